"""One call of every public cache method that talks to the server, for the tests that check
each makes its span (test_tracing) and is counted under its command (test_stats).

The methods are found from the class (every public method of RedisCache but the local ones),
so a new method fails those tests until it has a call here.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

from redoxide import RedisCache

#: Public methods that never talk to the server.
LOCAL = frozenset(
    {
        "close", "aclose", "client", "lock", "alock", "make_key", "make_and_validate_key",
        "validate_key", "get_backend_timeout", "stats", "reset_stats", "near_cache_stats",
    }
)  # fmt: skip

_LATER = int(time.time()) + 3600

#: method: (args, kwargs, the operation its span is named after). The state prepare() makes
#: lets each succeed.
CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any], str]] = {
    # Django's API and the counters
    "get": (("k",), {}, "GET"),
    "set": (("k", 2), {}, "SET"),
    "add": (("new", 1), {}, "SET"),
    "get_many": ((["k", "x"],), {}, "MGET"),
    "set_many": (({"a": 1, "b": 2},), {}, "MSET"),
    "delete": (("k",), {}, "DEL"),
    "delete_many": ((["k", "x"],), {}, "DEL"),
    "has_key": (("k",), {}, "EXISTS"),
    "touch": (("k", 100), {}, "PEXPIRE"),
    "clear": ((), {}, "FLUSHDB"),
    "incr": (("n",), {}, "incr"),
    "decr": (("n",), {}, "decr"),
    "get_or_set": (("gos", 1), {}, "get_or_set"),
    "incr_version": (("v",), {}, "incr_version"),
    "decr_version": (("v",), {}, "decr_version"),
    # expiry
    "ttl": (("k",), {}, "TTL"),
    "pttl": (("k",), {}, "PTTL"),
    "expire": (("k", 100), {}, "EXPIRE"),
    "pexpire": (("k", 100_000), {}, "PEXPIRE"),
    "expire_at": (("k", _LATER), {}, "EXPIREAT"),
    "pexpire_at": (("k", _LATER * 1000), {}, "PEXPIREAT"),
    "persist": (("k",), {}, "PERSIST"),
    # patterns
    "keys": (("*",), {}, "keys"),
    "iter_keys": (("*",), {"itersize": 2}, "iter_keys"),
    "delete_pattern": (("k*",), {}, "delete_pattern"),
    # hashes
    "hset": (("h", "f2", "v"), {}, "HSET"),
    "hdel": (("h", "f"), {}, "HDEL"),
    "hlen": (("h",), {}, "HLEN"),
    "hkeys": (("h",), {}, "HKEYS"),
    "hexists": (("h", "f"), {}, "HEXISTS"),
    "hget": (("h", "f"), {}, "HGET"),
    "hgetall": (("h",), {}, "HGETALL"),
    "hmget": (("h", "f", "g"), {}, "HMGET"),
    "hincrby": (("h", "count", 2), {}, "HINCRBY"),
    # lists
    "lpush": (("l", "x"), {}, "LPUSH"),
    "rpush": (("l", "y"), {}, "RPUSH"),
    "lpop": (("l",), {}, "LPOP"),
    "rpop": (("l",), {}, "RPOP"),
    "lrange": (("l", 0, -1), {}, "LRANGE"),
    "lindex": (("l", 0), {}, "LINDEX"),
    "llen": (("l",), {}, "LLEN"),
    "lpos": (("l", "b"), {}, "LPOS"),
    "lmove": (("l", "l2"), {}, "LMOVE"),
    "lrem": (("l", 1, "a"), {}, "LREM"),
    "ltrim": (("l", 0, 1), {}, "LTRIM"),
    "lset": (("l", 0, "q"), {}, "LSET"),
    "linsert": (("l", "BEFORE", "b", "z"), {}, "LINSERT"),
    # sets
    "sadd": (("s", "m"), {}, "SADD"),
    "srem": (("s", "a"), {}, "SREM"),
    "scard": (("s",), {}, "SCARD"),
    "sismember": (("s", "a"), {}, "SISMEMBER"),
    "smismember": (("s", "a", "m"), {}, "SMISMEMBER"),
    "smembers": (("s",), {}, "SMEMBERS"),
    "sdiff": (("s", "s2"), {}, "SDIFF"),
    "sinter": (("s", "s2"), {}, "SINTER"),
    "sunion": (("s", "s2"), {}, "SUNION"),
    "sdiffstore": (("d", "s", "s2"), {}, "SDIFFSTORE"),
    "sinterstore": (("d", "s", "s2"), {}, "SINTERSTORE"),
    "sunionstore": (("d", "s", "s2"), {}, "SUNIONSTORE"),
    "smove": (("s", "s2", "a"), {}, "SMOVE"),
    "spop": (("s",), {}, "SPOP"),
    "srandmember": (("s",), {}, "SRANDMEMBER"),
    "sscan": (("s",), {}, "SSCAN"),
    "sscan_iter": (("s",), {"count": 1}, "sscan_iter"),
    # sorted sets
    "zadd": (("z", {"m": 1.5}), {}, "ZADD"),
    "zcard": (("z",), {}, "ZCARD"),
    "zcount": (("z", 0, 10), {}, "ZCOUNT"),
    "zincrby": (("z", 1, "a"), {}, "ZINCRBY"),
    "zpopmax": (("z",), {}, "ZPOPMAX"),
    "zpopmin": (("z",), {}, "ZPOPMIN"),
    "zrange": (("z", 0, -1), {}, "ZRANGE"),
    "zrevrange": (("z", 0, -1), {}, "ZREVRANGE"),
    "zrangebyscore": (("z", 0, 10), {}, "ZRANGEBYSCORE"),
    "zrevrangebyscore": (("z", 10, 0), {}, "ZREVRANGEBYSCORE"),
    "zrank": (("z", "a"), {}, "ZRANK"),
    "zrem": (("z", "a"), {}, "ZREM"),
    "zremrangebyscore": (("z", 0, 1), {}, "ZREMRANGEBYSCORE"),
    "zscore": (("z", "a"), {}, "ZSCORE"),
}


def server_methods(cls: type[Any] = RedisCache) -> list[str]:
    """Every public method of the cache class that talks to the server, sync names only."""
    names = {
        name
        for name in dir(cls)
        if not name.startswith("_") and name not in LOCAL and callable(getattr(cls, name))
    }
    return sorted(name for name in names if not (name.startswith("a") and name[1:] in names))


def prepare(cache: Any) -> None:
    """Empty the server, then store what the calls in CALLS read (through `cache`)."""
    cache.clear()
    cache.set("k", 1)
    cache.set("n", 10)
    cache.set("v", "versioned")
    cache.hset("h", mapping={"f": 1, "g": 2})
    cache.rpush("l", "a", "b", "c")
    cache.sadd("s", "a", "b")
    cache.sadd("s2", "b", "c")
    cache.zadd("z", {"a": 1, "b": 2})


def call(cache: Any, method: str, mode: str) -> Any:
    """Make the call of CALLS for `method` (its async twin in async mode); an iterator is run
    to its end."""
    args, kwargs, _ = CALLS[method]
    if mode == "sync":
        result = getattr(cache, method)(*args, **kwargs)
        return list(result) if inspect.isgenerator(result) else result
    twin = getattr(cache, "a" + method)

    async def main() -> Any:
        result = twin(*args, **kwargs)
        if inspect.isasyncgen(result):
            return [item async for item in result]
        return await result

    return asyncio.run(main())
