"""django-redis' ``cache.client.get_client(write=...)`` and the redis-py commands user code sends
through it (feeds in lists, rate limits in sorted sets, counters in hashes, INFO for a health
page), each reply checked against redis-py's for the same call on the same server, sync,
async and in a pipeline; ``write=False`` reads where the cache reads (a replica).
"""

from __future__ import annotations

import asyncio
import datetime
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings
from redoxide import get_redis_connection
from redoxide.connection import Connection
from redoxide.exceptions import DataError, ResponseError, WrongTypeError
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, SentinelSet

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="django-redis' API on redoxide")


@pytest.fixture
def default_cache(redis_server: RedisServer, cache: Any) -> Iterator[Any]:
    """CACHES["default"] is redoxide on redis_server (flushed by the `cache` fixture)."""
    from django.core.cache import caches

    settings = {"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url}}
    with override_settings(CACHES=settings):
        yield caches["default"]


def test_get_client_is_get_redis_connection(default_cache: Any, redis_client: Any) -> None:
    cache = default_cache
    conn = cache.client.get_client()
    assert isinstance(conn, Connection)
    assert isinstance(get_redis_connection(), Connection)
    cache.set("k", [1, 2])
    assert conn.get(cache.make_key("k")) == redis_client.get(":1:k")
    assert cache.client.get_client(write=False).get(cache.make_key("k")) == conn.get(":1:k")
    client, index = cache.client.get_client(write=True, show_index=True)
    assert isinstance(client, Connection) and index == 0
    assert cache.client.get_client(True, None).ping() is True


# The calls a site makes through get_client(), on an empty server: redis-py's reply is the
# reference for each.
SCRIPT: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("ping", (), {}),
    ("mset", ({"a": 1, "b": b"\x00"},), {}),
    ("mget", (["a", "b", "zz"],), {}),
    ("mget", ("a", "b"), {}),
    ("setex", ("e", 100, "v"), {}),
    ("setex", ("e2", datetime.timedelta(seconds=50), "v"), {}),
    ("setnx", ("e", "w"), {}),
    ("setnx", ("new", "w"), {}),
    ("getdel", ("new",), {}),
    ("getdel", ("new",), {}),
    ("decr", ("n",), {}),
    ("decrby", ("n", 5), {}),
    ("incrbyfloat", ("f", 1.5), {}),
    ("append", ("s1", "ab"), {}),
    ("strlen", ("s1",), {}),
    ("pexpire", ("a", 100_000), {}),
    ("expireat", ("b", datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)), {}),
    ("persist", ("b",), {}),
    ("persist", ("zz",), {}),
    ("type", ("a",), {}),
    ("type", ("zz",), {}),
    ("rename", ("s1", "s2"), {}),
    ("touch", ("a", "s2", "zz"), {}),
    ("unlink", ("s2", "zz"), {}),
    ("hset", ("h",), {"mapping": {"x": 1, "y": 2}}),
    ("hmget", ("h", ["x", "zz"]), {}),
    ("hmget", ("h", "x", "y"), {}),
    ("hexists", ("h", "x"), {}),
    ("hexists", ("h", "zz"), {}),
    ("hincrby", ("h", "x", 5), {}),
    ("hincrbyfloat", ("h", "y", 0.5), {}),
    ("hsetnx", ("h", "x", 9), {}),
    ("hsetnx", ("h", "z", 9), {}),
    ("hlen", ("h",), {}),
    ("hkeys", ("h",), {}),
    ("hvals", ("h",), {}),
    ("hdel", ("h", "z", "zz"), {}),
    ("lpush", ("feed", 1, 2, 3), {}),
    ("rpush", ("feed", "r"), {}),
    ("lpushx", ("nolist", 1), {}),
    ("rpushx", ("feed", "rx"), {}),
    ("lrange", ("feed", 0, -1), {}),
    ("llen", ("feed",), {}),
    ("lindex", ("feed", 1), {}),
    ("lindex", ("feed", 99), {}),
    ("lset", ("feed", 0, "first"), {}),
    ("linsert", ("feed", "BEFORE", "r", "before-r"), {}),
    ("lpos", ("feed", "r"), {}),
    ("lpos", ("feed", "zz"), {}),
    ("lpos", ("feed", "r"), {"rank": 1, "count": 2, "maxlen": 10}),
    ("lrem", ("feed", 0, "2"), {}),
    ("lmove", ("feed", "other"), {}),
    ("lmove", ("feed", "other", "RIGHT", "LEFT"), {}),
    ("ltrim", ("feed", 0, 1), {}),
    ("lpop", ("feed",), {}),
    ("rpop", ("other", 2), {}),
    ("lpop", ("nolist",), {}),
    ("sadd", ("set", "a", "b", "c"), {}),
    ("srem", ("set", "c", "zz"), {}),
    ("scard", ("set",), {}),
    ("sismember", ("set", "a"), {}),
    ("sismember", ("set", "zz"), {}),
    ("srandmember", ("noset",), {}),
    ("spop", ("noset",), {}),
    ("zadd", ("z", {"a": 1, "b": 2, "c": 3}), {}),
    ("zrevrange", ("z", 0, -1), {}),
    ("zrevrange", ("z", 0, 0), {"withscores": True}),
    ("zrangebyscore", ("z", 1, "+inf"), {}),
    ("zrangebyscore", ("z", "-inf", 2), {"withscores": True}),
    ("zrangebyscore", ("z", 0, 10), {"start": 1, "num": 1}),
    ("zcount", ("z", 2, 3), {}),
    ("zscore", ("z", "b"), {}),
    ("zscore", ("z", "zz"), {}),
    ("zincrby", ("z", 2.5, "a"), {}),
    ("zrank", ("z", "a"), {}),
    ("zrank", ("z", "zz"), {}),
    ("zrem", ("z", "c", "zz"), {}),
    ("zcard", ("z",), {}),
    ("zremrangebyscore", ("z", 0, 2), {}),
    ("zremrangebyrank", ("z", 0, 0), {}),
    ("publish", ("channel", "hello"), {}),
    ("dbsize", (), {}),
    ("flushdb", (), {}),
    ("dbsize", (), {}),
]


def run_script(client: Any) -> list[Any]:
    return [getattr(client, name)(*args, **kwargs) for name, args, kwargs in SCRIPT]


def test_replies_match_redis_py(
    default_cache: Any, redis_server: RedisServer, redis_client: Any, mode: str
) -> None:
    expected = run_script(redis_client)
    redis_server.flushall()
    assert run_script(Ops(default_cache.client.get_client(), mode)) == expected


def test_a_pipeline_of_them_matches_redis_py(
    default_cache: Any, redis_server: RedisServer, redis_client: Any
) -> None:
    def queue(client: Any) -> Any:
        pipe = client.pipeline(transaction=False)
        for name, args, kwargs in SCRIPT:
            getattr(pipe, name)(*args, **kwargs)
        return pipe

    expected = queue(redis_client).execute()
    redis_server.flushall()
    conn = default_cache.client.get_client()
    assert queue(conn).execute() == expected
    redis_server.flushall()
    assert asyncio.run(queue(conn).aexecute()) == expected


def test_a_rate_limit_window_in_one_transaction(default_cache: Any) -> None:
    # The shape of a sliding-window limiter seen in public code: MULTI / EXEC of four commands.
    pipe = default_cache.client.get_client().pipeline()
    now = 1_000.0
    pipe.zremrangebyscore("rl:ip", 0, now - 60)
    pipe.zadd("rl:ip", {str(now): now})
    pipe.zcard("rl:ip")
    pipe.expire("rl:ip", 60)
    assert pipe.execute() == [0, 1, 1, True]


def test_info_parses_as_redis_py_does(default_cache: Any, redis_client: Any) -> None:
    conn = default_cache.client.get_client()
    ours, theirs = conn.info(), redis_client.info()
    assert ours["redis_version"] == theirs["redis_version"]
    assert set(ours) - {"__raw__"} == set(theirs) - {"__raw__"}
    for field in ("tcp_port", "maxmemory", "role", "mem_fragmentation_ratio"):
        assert type(ours[field]) is type(theirs[field]), field
    stats = conn.info("commandstats")
    assert isinstance(stats["cmdstat_info"], dict) and stats["cmdstat_info"]["calls"] >= 1


def test_async_twins_are_coroutine_functions(default_cache: Any) -> None:
    conn = default_cache.client.get_client()

    async def main() -> list[Any]:
        task = asyncio.create_task(conn.alpush("q", "a"))
        return [await task, await conn.allen("q"), await conn.arpop("q")]

    assert asyncio.run(main()) == [1, 1, b"a"]
    assert conn.alpush.__name__ == "alpush"


def _role(conn: Connection) -> str:
    return str(conn.info("replication")["role"])


def test_write_false_reads_from_a_replica(
    replica_set: tuple[RedisServer, list[RedisServer]],
) -> None:
    primary, replicas = replica_set
    cache = build_cache([primary.url] + [r.url for r in replicas], {})
    assert _role(cache.client.get_client()) == "master"
    reads = cache.client.get_client(write=False)
    assert {_role(reads) for _ in range(4)} == {"slave"}
    assert asyncio.run(reads.aexecute_command("ROLE"))[0] == b"slave"
    with pytest.raises(ResponseError, match="READONLY"):
        reads.set("k", "v")
    cache.client.get_client().set("k", "v")
    cache.client.get_client().rpush("list", "a")
    cache.client.execute("WAIT", 2, 2000)
    assert reads.get("k") == b"v"
    # A command's own error reply is its answer: the replica is not left out for it.
    for _ in range(4):
        with pytest.raises(WrongTypeError):
            reads.get("list")
    assert {_role(reads) for _ in range(4)} == {"slave"}


def test_write_false_stays_on_the_primary_when_replicas_are_not_read(
    replica_set: tuple[RedisServer, list[RedisServer]],
) -> None:
    primary, replicas = replica_set
    locations = [primary.url] + [r.url for r in replicas]
    cache = build_cache(locations, {"OPTIONS": {"READ_FROM_REPLICAS": False}})
    assert _role(cache.client.get_client(write=False)) == "master"


def test_write_false_on_sentinel_reads_from_a_replica(sentinel_set: SentinelSet) -> None:
    cache = build_cache(
        f"redis://{sentinel_set.service}/0",
        {"OPTIONS": {"SENTINELS": sentinel_set.sentinel_addresses, "READ_FROM_REPLICAS": True}},
    )
    cache.set("warm", 1)  # the router learns the primary and its replicas
    assert _role(cache.client.get_client()) == "master"
    assert _role(cache.client.get_client(write=False)) == "slave"


def test_get_redis_connection_write_false_is_get_client_write_false(
    replica_set: tuple[RedisServer, list[RedisServer]],
) -> None:
    from django.core.cache import caches

    primary, replicas = replica_set
    settings = {
        "default": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": [primary.url] + [r.url for r in replicas],
        }
    }
    with override_settings(CACHES=settings):
        assert _role(get_redis_connection(write=False)) == "slave"
        assert _role(get_redis_connection()) == "master"
        assert isinstance(caches["default"].client.get_client(False), Connection)


def test_make_key_encode_decode_as_django_redis_client(
    default_cache: Any, redis_client: Any
) -> None:
    cache = default_cache
    client = cache.client
    assert client.make_key("k") == ":1:k" == cache.make_key("k")
    assert client.make_key("k", version=3) == ":3:k"
    assert client.encode(7) == b"7"  # ints raw
    cache.set("d", {"a": [1]})
    stored = redis_client.get(":1:d")
    assert client.encode({"a": [1]}) == stored
    assert client.decode(stored) == {"a": [1]}
    # A raw pipeline of cache values, as django-redis users write one.
    pipe = client.get_client().pipeline()
    pipe.set(client.make_key("p"), client.encode("v"), ex=60)
    pipe.execute()
    assert cache.get("p") == "v"


# -- every redis-py argument of the raw commands ------------------------------------------------
#
# Each case runs on a server holding SETUP's keys: once through redis-py, once through
# get_client() (sync, async, and queued in a pipeline). The reply (or the error's kind) and
# the server's state afterwards (each key's type, DUMP and expiry) must be the same.

YEAR_2100 = 4_102_444_800
YEAR_2100_DT = datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)
YEAR_2100_MS_DT = datetime.datetime(2100, 1, 1, 0, 0, 0, 123_456, tzinfo=datetime.timezone.utc)


def setup_keys(client: Any) -> None:
    client.set("s", "v")
    client.set("t", "old", ex=1000)
    client.set("n", 5)
    client.hset("h", mapping={"f": "v", "g": 1})
    client.rpush("l", "a", "b", "a", "c")
    client.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    client.zadd("lex", {"a": 0, "b": 0, "c": 0, "d": 0})
    client.sadd("set", "x", "y")


class Boxed:
    """A value of a type redis-py's encoder does not know."""


CASES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    # SET: every option and the combinations redis-py refuses
    ("set", ("s", "w"), {"get": True}),
    ("set", ("new", "w"), {"get": True}),
    ("set", ("s", "w"), {"nx": True, "get": True}),
    ("set", ("s", "w"), {"xx": True, "get": True, "keepttl": True}),
    ("set", ("new", "w"), {"xx": True, "get": True}),
    ("set", ("t", "w"), {"keepttl": True}),
    ("set", ("k", "w"), {"exat": YEAR_2100}),
    ("set", ("k", "w"), {"exat": YEAR_2100_DT}),
    ("set", ("k", "w"), {"pxat": YEAR_2100 * 1000 + 123}),
    ("set", ("k", "w"), {"pxat": YEAR_2100_MS_DT}),
    ("set", ("s", "w"), {"get": True, "xx": True, "pxat": YEAR_2100_MS_DT}),
    ("set", ("k", "w"), {"ex": "1000"}),
    ("set", ("k", "w"), {"px": "1000000"}),
    ("set", ("k", "w"), {"px": datetime.timedelta(seconds=1000, milliseconds=1)}),
    ("set", ("k", "w"), {"ex": 10, "px": 10}),
    ("set", ("k", "w"), {"ex": 10, "keepttl": True}),
    ("set", ("k", "w"), {"exat": YEAR_2100, "pxat": YEAR_2100}),
    ("set", ("k", "w"), {"nx": True, "xx": True}),
    ("set", ("k", "w"), {"ex": 1.5}),
    ("set", ("k", "w"), {"px": "soon"}),
    ("set", ("s", "w"), {"ifeq": "v"}),  # Valkey 8.1+, Redis 8.4+; an error before
    ("set", ("s", "w"), {"ifeq": "other", "get": True}),
    ("set", ("s", "w"), {"nx": True, "ifne": "v"}),
    # the expiry family's NX / XX / GT / LT
    ("expire", ("t", 2000), {"gt": True}),
    ("expire", ("t", 10), {"gt": True}),
    ("expire", ("s", 100), {"nx": True}),
    ("expire", ("t", 100), {"nx": True}),
    ("expire", ("s", datetime.timedelta(seconds=100)), {"xx": True}),
    ("expire", ("t", 500), {"lt": True}),
    ("expire", ("t", 100), {"nx": True, "xx": True}),
    ("pexpire", ("t", 2_000_000), {"gt": True}),
    ("pexpire", ("s", datetime.timedelta(seconds=100)), {"nx": True}),
    ("pexpire", ("t", 2_000_000), {"lt": True}),
    ("expireat", ("t", YEAR_2100_DT), {"xx": True}),
    ("expireat", ("s", YEAR_2100), {"lt": True}),
    ("expireat", ("t", YEAR_2100), {"gt": True}),
    ("pexpireat", ("t", YEAR_2100 * 1000 + 5), {}),
    ("pexpireat", ("s", YEAR_2100_MS_DT), {"nx": True}),
    ("pexpireat", ("t", YEAR_2100_MS_DT), {"nx": True}),
    # GETEX
    ("getex", ("s",), {}),
    ("getex", ("s",), {"ex": 100}),
    ("getex", ("s",), {"px": datetime.timedelta(seconds=100)}),
    ("getex", ("s",), {"exat": YEAR_2100_DT}),
    ("getex", ("s",), {"pxat": YEAR_2100 * 1000 + 7}),
    ("getex", ("t",), {"persist": True}),
    ("getex", ("missing",), {"ex": 100}),
    ("getex", ("s",), {"ex": 1, "px": 1}),
    ("getex", ("s",), {"ex": 1, "persist": True}),
    # HSET's items, with key / value and mapping
    ("hset", ("h",), {"items": ["a", 1, "b", 2]}),
    ("hset", ("h", "k", "v"), {"mapping": {"m": 1}, "items": ["i", 2]}),
    ("hset", ("h",), {}),
    ("hset", ("h", "k"), {}),
    ("hmget", ("h", ("f", "g")), {}),
    # ZRANGE by score and by name, reversed, with LIMIT
    ("zrange", ("z", 2, 3), {"byscore": True}),
    ("zrange", ("z", "(1", "+inf"), {"byscore": True, "offset": 1, "num": 2, "withscores": True}),
    ("zrange", ("z", 4, 1), {"byscore": True, "desc": True}),
    ("zrange", ("z", 0, -1), {"desc": True, "withscores": True, "score_cast_func": int}),
    ("zrange", ("z", 0, 1), {"offset": 0, "num": 1}),
    ("zrange", ("lex", "[b", "+"), {"bylex": True}),
    ("zrange", ("lex", "+", "[b"), {"bylex": True, "desc": True, "offset": 0, "num": 2}),
    ("zrange", ("z", 0, -1), {"offset": 1}),
    ("zrange", ("z", 0, 1), {"byscore": True, "bylex": True}),
    ("zrange", ("lex", "-", "+"), {"bylex": True, "withscores": True}),
    ("zrevrangebyscore", ("z", "+inf", 2), {"start": 0, "num": 2, "withscores": True}),
    ("zrevrangebyscore", ("z", 9, "-inf"), {}),
    ("zrangebyscore", ("z", 0, 9), {"start": 1}),
    ("zrank", ("z", "c"), {}),
    ("zrank", ("z", "c"), {"withscore": True}),
    ("zrevrank", ("z", "c"), {}),
    ("zrevrank", ("z", "zz"), {}),
    # ZADD's flags and what redis-py refuses
    ("zadd", ("z", {"a": 5, "e": 1}), {"lt": True, "ch": True}),
    ("zadd", ("z", {"a": 2}), {"incr": True, "xx": True}),
    ("zadd", ("z", {"zz": 2}), {"incr": True, "xx": True}),
    ("zadd", ("z", {"a": 1}), {"nx": True, "xx": True}),
    ("zadd", ("z", {"a": 1}), {"nx": True, "gt": True}),
    ("zadd", ("z", {"a": 1, "b": 2}), {"incr": True}),
    ("zadd", ("z", {}), {}),
    # SCAN, MGET of nothing, MSET of nothing
    ("scan", (0,), {"match": "l*", "count": 1000}),
    ("scan", (0,), {"_type": "zset", "count": 1000}),
    ("mget", ([],), {}),
    ("mget", (("s", "n"), "t"), {}),
    ("mset", ({},), {}),
    # replies of the counted and float forms
    ("spop", ("set", 5), {}),
    ("lpop", ("l", 2), {}),
    ("rpop", ("missing", 2), {}),
    ("lpos", ("l", "a"), {"rank": -1, "count": 0, "maxlen": 3}),
    ("zincrby", ("z", 0.5, "a"), {}),
    ("hincrbyfloat", ("h", "g", 1e3), {}),
    ("incrbyfloat", ("n", -0.25), {}),
    ("flushdb", (), {"asynchronous": True}),
    ("keys", (b"[st]*",), {}),
    # values redis-py's encoder takes, and those it refuses
    ("set", ("k", memoryview(b"mv")), {}),
    ("set", ("k", bytearray(b"ba")), {}),
    ("set", (memoryview(b"key"), "v"), {}),
    ("set", ("k", 1e16), {}),
    ("set", ("k", 2.5), {}),
    ("set", ("k", -0.0), {}),
    ("set", ("k", True), {}),
    ("set", ("k", None), {}),
    ("set", ("k", Boxed()), {}),
    ("set", (False, "v"), {}),
    ("rpush", ("l", memoryview(b"x"), bytearray(b"y")), {}),
    ("rpush", ("l", "x", True), {}),
    ("hset", ("h", "f", bytearray(b"z")), {}),
    ("hset", ("h", "f", False), {}),
    ("hset", ("h",), {"mapping": {"f": None}}),
    ("sadd", ("set", False), {}),
    ("zadd", ("z", {"m": True}), {}),
    ("zadd", ("z", {memoryview(b"m"): 7}), {}),
    ("mset", ({"a": True},), {}),
    ("mset", ({"a": memoryview(b"1"), "b": 1.5},), {}),
    ("lpos", ("l", bytearray(b"a")), {"count": 0}),
    ("execute_command", ("SET", "k", True), {}),
    ("execute_command", ("SET", "k", bytearray(b"raw")), {}),
]


def _shown(value: Any) -> Any:
    if isinstance(value, (memoryview, bytearray, Boxed)):
        return type(value).__name__
    if isinstance(value, dict):
        return {_shown(k): _shown(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_shown(item) for item in value)
    return value


def case_id(case: tuple[str, tuple[Any, ...], dict[str, Any]]) -> str:
    name, args, kwargs = case
    return f"{name}{_shown(args)}{_shown(kwargs) or ''}"


def server_state(client: Any) -> dict[bytes, tuple[Any, ...]]:
    """Each key's type, DUMP and expiry (Unix ms by the server's clock; -1 when none). PTTL
    and TIME, not PEXPIRETIME, which Redis 6.2 does not have."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    state = {}
    for key in client.keys("*"):
        left = client.pttl(key)
        state[key] = (client.type(key), client.dump(key), now_ms + left if left >= 0 else -1)
    return state


def same_state(ours: dict[bytes, tuple[Any, ...]], theirs: dict[bytes, tuple[Any, ...]]) -> bool:
    # A relative expiry set a moment later ends a moment later: the two must agree to 60 s,
    # which still tells seconds from milliseconds and 100 s from 1000 s.
    if ours.keys() != theirs.keys():
        return False
    for key, (kind, dump, expires) in ours.items():
        their_kind, their_dump, their_expires = theirs[key]
        if (kind, dump) != (their_kind, their_dump):
            return False
        if (expires < 0 or their_expires < 0) and expires != their_expires:
            return False
        if abs(expires - their_expires) > 60_000:
            return False
    return True


def outcome(call: Callable[[], Any]) -> Any:
    """The reply, or the kind of error: DataError (refused before sending) or ResponseError."""
    import redis

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # redis-py's ifeq / ifne are "experimental"
            return call()
    except (redis.exceptions.DataError, DataError):
        return "DataError"
    except (redis.exceptions.ResponseError, ResponseError):
        return "ResponseError"


def in_pipeline(client: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    pipe = client.pipeline(transaction=False)
    getattr(pipe, name)(*args, **kwargs)
    reply = pipe.execute(raise_on_error=False)[0]
    return "ResponseError" if isinstance(reply, Exception) else reply


@pytest.mark.parametrize("how", ["sync", "async", "pipeline"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(case) for case in CASES])
def test_every_argument_matches_redis_py(
    default_cache: Any,
    redis_server: RedisServer,
    redis_client: Any,
    case: tuple[str, tuple[Any, ...], dict[str, Any]],
    how: str,
) -> None:
    name, args, kwargs = case

    def run(client: Any) -> tuple[Any, dict[bytes, tuple[Any, ...]]]:
        redis_server.flushall()
        setup_keys(redis_client)
        if how == "pipeline":
            reply = outcome(lambda: in_pipeline(client, name, args, kwargs))
        else:
            reply = outcome(lambda: getattr(client, name)(*args, **kwargs))
        if name == "keys" and isinstance(reply, list):
            reply = sorted(reply)  # the keyspace's order can change as its table rehashes
        elif name == "scan" and isinstance(reply, tuple):
            reply = (reply[0], sorted(reply[1]))
        return reply, server_state(redis_client)

    theirs, their_state = run(redis_client)
    conn = default_cache.client.get_client()
    ours, our_state = run(conn if how == "pipeline" else Ops(conn, how))
    assert ours == theirs
    assert same_state(our_state, their_state), (our_state, their_state)
