"""django-redis 7's calls that Django's API lacks, so a site switches BACKEND without touching
its code: incr / decr with ignore_key_check, what delete and delete_many return, the old
host:port:db LOCATION (refused by both, with the URL to write), and get_redis_connection.

Where django-redis is the reference its own cache runs beside ours on the same server, and
get_redis_connection's replies are checked against redis-py's for the same calls.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import InvalidCacheBackendError
from django.test import override_settings
from django.utils.module_loading import import_string
from redoxide import get_redis_connection
from redoxide.exceptions import ConfigurationError, DataError, ResponseError
from redoxide.options import parse_location
from support.backend import is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, commands_sent

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="django-redis' API on redoxide")


@pytest.fixture
def theirs(redis_server: RedisServer) -> Iterator[Any]:
    """django-redis 7's cache on the same server (flushed by make_cache / cache)."""
    cache = import_string("django_redis.cache.RedisCache")(redis_server.url, {})
    yield cache
    cache.close()


# -- incr / decr with ignore_key_check ----------------------------------------------------------


def test_incr_ignore_key_check_creates_a_missing_key(
    cache: Any, redis_client: Any, mode: str
) -> None:
    ops = Ops(cache, mode)
    assert ops.incr("n", 5, ignore_key_check=True) == 5
    assert ops.incr("n", ignore_key_check=True) == 6
    assert redis_client.get(":1:n") == b"6"  # raw digits: later incr() calls count on it
    assert redis_client.ttl(":1:n") == -1  # created without an expiry, like INCRBY does
    assert ops.get("n") == 6


def test_decr_ignore_key_check_creates_a_missing_key_at_minus_delta(cache: Any, mode: str) -> None:
    ops = Ops(cache, mode)
    assert ops.decr("n", 3, ignore_key_check=True) == -3
    assert ops.decr("v", version=4, ignore_key_check=True) == -1
    assert ops.get("v", version=4) == -1
    assert ops.get("v") is None


def test_incr_ignore_key_check_on_an_existing_key_keeps_its_ttl(
    cache: Any, redis_client: Any, mode: str
) -> None:
    ops = Ops(cache, mode)
    cache.set("n", 41, timeout=100)
    assert ops.incr("n", ignore_key_check=True) == 42
    assert ops.decr("n", 2, ignore_key_check=True) == 40
    assert 95_000 < redis_client.pttl(":1:n") <= 100_000


@pytest.mark.parametrize(
    ("stored", "delta", "expected"),
    [(1.5, 2, 3.5), (2**70, 1, 2**70 + 1), (41, 0.5, 41.5), (None, 0.5, 0.5)],
    ids=["float_value", "big_int", "float_delta", "float_delta_missing"],
)
def test_incr_ignore_key_check_falls_back_to_read_add_write(
    cache: Any, redis_client: Any, mode: str, stored: Any, delta: Any, expected: Any
) -> None:
    """Values INCRBY cannot add to (ERR) are read, added to and written back."""
    ops = Ops(cache, mode)
    if stored is not None:
        cache.set("n", stored, timeout=100)
    assert ops.incr("n", delta, ignore_key_check=True) == expected
    assert ops.get("n") == expected
    assert redis_client.ttl(":1:n") == (-1 if stored is None else 100)


def test_incr_ignore_key_check_is_one_incrby(
    cache: Any, redis_server: RedisServer, mode: str
) -> None:
    ops = Ops(cache, mode)
    assert commands_sent(redis_server, lambda: ops.incr("n", 2, ignore_key_check=True)) == {
        "incrby": 1
    }
    # Without it, the existence check and INCRBY run in one script, called by its SHA1 once
    # the server has it (commandstats counts the script's own calls too).
    ops.incr("n")
    assert commands_sent(redis_server, lambda: ops.incr("n")) == {
        "evalsha": 1,
        "exists": 1,
        "incrby": 1,
    }


def test_incr_without_ignore_key_check_still_raises_for_a_missing_key(
    cache: Any, redis_client: Any, mode: str
) -> None:
    with pytest.raises(ValueError, match="not found"):
        Ops(cache, mode).incr("n", ignore_key_check=False)
    assert redis_client.exists(":1:n") == 0


def test_incr_ignore_key_check_on_a_text_value_raises(cache: Any, mode: str) -> None:
    cache.set("t", "text")
    with pytest.raises(TypeError):
        Ops(cache, mode).incr("t", ignore_key_check=True)
    assert cache.get("t") == "text"


def test_incr_ignore_key_check_matches_django_redis(cache: Any, theirs: Any) -> None:
    assert theirs.incr("a", 5, ignore_key_check=True) == cache.incr("b", 5, ignore_key_check=True)
    # Each reads the other's counter and keeps counting on it.
    assert cache.incr("a", ignore_key_check=True) == 6
    assert theirs.incr("b", ignore_key_check=True) == 6
    assert theirs.get("a") == cache.get("b") == 6


# -- delete / delete_many return values ---------------------------------------------------------


def test_delete_returns_whether_the_key_existed(cache: Any, theirs: Any, mode: str) -> None:
    ops = Ops(cache, mode)
    cache.set("k", 1)
    assert ops.delete("k") is True
    assert ops.delete("k") is False
    theirs.set("k", 1)
    assert theirs.delete("k") is True  # django-redis 7 returns a bool too
    assert theirs.delete("k") is False


def test_delete_many_returns_how_many_keys_existed(cache: Any, mode: str) -> None:
    ops = Ops(cache, mode)
    cache.set_many({"a": 1, "b": 2, "c": 3})
    assert ops.delete_many(["a", "b", "missing"]) == 2
    assert ops.delete_many(["c", "c"]) == 1  # a key named twice is deleted once
    assert ops.delete_many(["a", "missing"]) == 0
    assert cache.get_many(["a", "b", "c"]) == {}


def test_delete_many_of_no_keys_returns_none_as_django_says(
    cache: Any, redis_server: RedisServer, mode: str
) -> None:
    ops = Ops(cache, mode)
    assert commands_sent(redis_server, lambda: ops.delete_many([])) == {}
    assert ops.delete_many([]) is None  # Django's contract (django-redis returns 0)


def test_delete_many_counts_as_django_redis_does(cache: Any, theirs: Any) -> None:
    for backend in (theirs, cache):
        backend.set_many({"a": 1, "b": 2})
    assert theirs.delete_many(["a", "b", "missing"]) == 2
    cache.set_many({"a": 1, "b": 2})
    assert cache.delete_many(["a", "b", "missing"]) == 2


# -- the old host:port:db LOCATION --------------------------------------------------------------

LEGACY = [
    ("127.0.0.1:6379:1", "redis://127.0.0.1:6379/1"),
    ("localhost:6380:0", "redis://localhost:6380/0"),
    ("cache.internal:6379", "redis://cache.internal:6379/0"),
]


@pytest.mark.parametrize(("legacy", "url"), LEGACY, ids=[lg for lg, _ in LEGACY])
def test_legacy_location_is_refused_with_the_url_to_write(legacy: str, url: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"write '{url}'")):
        parse_location(legacy)
    with pytest.raises(ConfigurationError, match="host:port:db"):
        parse_location(f"redis://127.0.0.1:6379/0,{legacy}")  # a replica entry too
    assert parse_location(url) == (url,)


def test_other_locations_without_a_scheme_keep_the_scheme_error() -> None:
    for location in ("cache", "user:secret@host:6379:1", "host:port:db"):
        with pytest.raises(ConfigurationError, match="needs one of the schemes") as caught:
            parse_location(location)
        assert "secret" not in str(caught.value)


def test_django_redis_7_refuses_the_legacy_location(redis_server: RedisServer) -> None:
    legacy = f"127.0.0.1:{redis_server.port}:1"
    theirs = import_string("django_redis.cache.RedisCache")(legacy, {})
    with pytest.raises(ValueError, match="scheme"):
        theirs.get("k")


def test_the_suggested_url_reaches_the_legacy_locations_database(
    make_cache: Callable[..., Any], redis_server: RedisServer, redis_client: Any
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_cache(f"127.0.0.1:{redis_server.port}:2").get("k")
    suggested = re.search(r"write '([^']+)'", str(caught.value))
    assert suggested is not None
    cache = make_cache(suggested.group(1))
    cache.set("k", "v")
    assert asyncio.run(cache.aget("k")) == "v"
    redis_client.execute_command("SELECT", 2)
    assert redis_client.exists(":1:k") == 1


# -- get_redis_connection -----------------------------------------------------------------------


@pytest.fixture
def caches_on(redis_server: RedisServer, cache: Any) -> Iterator[Any]:
    """CACHES: default is redoxide on redis_server, "local" is LocMemCache; yield the default
    cache (as django.core.cache.caches makes it)."""
    from django.core.cache import caches

    settings = {
        "default": {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url},
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    with override_settings(CACHES=settings):
        yield caches["default"]


def test_connection_reads_what_the_cache_wrote(caches_on: Any, redis_client: Any) -> None:
    cache, conn = caches_on, get_redis_connection()
    cache.set("k", {"a": 1})
    cache.set("n", 7)
    assert conn.get(cache.make_key("k")) == redis_client.get(":1:k")  # pickled bytes, raw
    assert conn.get(cache.make_key("n")) == b"7"
    assert conn.get("k") is None  # keys are raw: no prefix, no version
    assert conn.incr(cache.make_key("n"), 3) == 10
    assert cache.get("n") == 10
    assert conn.exists(cache.make_key("k"), cache.make_key("n"), "k") == 2


def test_connection_commands_async_twins(caches_on: Any, mode: str) -> None:
    cache, conn = caches_on, Ops(get_redis_connection(), mode)
    cache.set("n", 1, timeout=None)
    key = cache.make_key("n")
    assert conn.incr(key) == 2
    assert conn.incrby(key, 5) == 7
    assert conn.expire(key, 60) is True
    assert 0 < conn.ttl(key) <= 60
    assert conn.set("raw", b"\x00\xff", ex=30) is True
    assert conn.set("raw", b"x", nx=True) is None
    assert conn.get("raw") == b"\x00\xff"
    assert conn.hset("h", "f", "v") == 1
    assert conn.hgetall("h") == {b"f": b"v"}
    assert conn.sadd("s", "a", "b") == 2
    assert conn.smembers("s") == {b"a", b"b"}
    assert conn.zadd("z", {"m": 2}) == 1
    assert conn.zrange("z", 0, -1, withscores=True) == [(b"m", 2.0)]
    assert sorted(conn.keys("*")) == sorted([b"h", b"raw", b"s", b"z", key.encode()])
    assert conn.execute_command("DBSIZE") == 5
    assert conn.delete("h", "s", "missing") == 2
    assert cache.get("n") == 7


def test_scan_iter_yields_raw_keys(caches_on: Any) -> None:
    cache, conn = caches_on, get_redis_connection()
    cache.set_many({f"k{i}": i for i in range(30)})
    cache.set("other", 1)
    expected = {cache.make_key(f"k{i}").encode() for i in range(30)}
    assert set(conn.scan_iter(match=":1:k*", count=7)) == expected

    async def collect() -> set[bytes]:
        return {key async for key in conn.ascan_iter(match=":1:k*", count=7)}

    assert asyncio.run(collect()) == expected
    assert set(conn.scan_iter(_type="hash")) == set()
    assert set(conn.scan_iter(match=memoryview(b":1:k1*"))) == {
        k for k in expected if k.startswith(b":1:k1")
    }


# The same calls through redis-py and through get_redis_connection, each on an empty server.
SCRIPT: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("set", ("k", "v"), {}),
    ("set", ("k", "w"), {"nx": True}),
    ("set", ("k", "w"), {"xx": True, "ex": 100}),
    ("set", ("k2", b"\x00\xff"), {"px": datetime.timedelta(seconds=50)}),
    ("set", ("k3", 1), {"keepttl": True}),
    ("get", ("k",), {}),
    ("get", ("missing",), {}),
    ("ttl", ("k",), {}),
    ("ttl", ("k3",), {}),
    ("ttl", ("missing",), {}),
    ("exists", ("k", "k2", "missing"), {}),
    ("expire", ("k2", 30), {}),
    ("expire", ("missing", datetime.timedelta(seconds=30)), {}),
    ("incr", ("n",), {}),
    ("incr", ("n", 5), {}),
    ("incrby", ("n", -2), {}),
    ("hset", ("h", "f", "v"), {}),
    ("hset", ("h",), {"mapping": {"a": 1, "b": "2"}}),
    ("hget", ("h", "a"), {}),
    ("hget", ("h", "zz"), {}),
    ("hgetall", ("h",), {}),
    ("hgetall", ("nohash",), {}),
    ("sadd", ("s", "a", "b", 3), {}),
    ("sadd", ("s", "a"), {}),
    ("smembers", ("s",), {}),
    ("smembers", ("noset",), {}),
    ("zadd", ("z", {"a": 1, "b": 2.5}), {}),
    ("zadd", ("z", {"a": 5}), {"incr": True}),
    ("zadd", ("z", {"c": 0}), {"xx": True}),
    ("zadd", ("z", {"b": 9}), {"ch": True, "gt": True}),
    ("zrange", ("z", 0, -1), {}),
    ("zrange", ("z", 0, -1), {"withscores": True}),
    ("zrange", ("z", 0, 0), {"desc": True, "withscores": True}),
    ("zrange", ("z", 0, -1), {"withscores": True, "score_cast_func": int}),
    ("delete", ("k", "k2", "missing"), {}),
]


def run_script(client: Any) -> list[Any]:
    return [getattr(client, name)(*args, **kwargs) for name, args, kwargs in SCRIPT]


def test_connection_replies_match_redis_py(
    caches_on: Any, redis_server: RedisServer, redis_client: Any, mode: str
) -> None:
    expected = run_script(redis_client)
    expected_keys = sorted(redis_client.keys("*"))
    redis_server.flushall()
    assert run_script(Ops(get_redis_connection(), mode)) == expected
    assert sorted(get_redis_connection().keys()) == expected_keys


def test_pipeline_queues_until_execute_and_converts_replies(
    caches_on: Any, redis_server: RedisServer
) -> None:
    cache, conn = caches_on, get_redis_connection()
    cache.set("n", 1)
    key = cache.make_key("n")
    pipe = conn.pipeline(transaction=False)
    assert pipe.incr(key).incrby(key, 10).get(key) is pipe  # chained, as in redis-py
    pipe.set("x", "y").hset("h", mapping={"f": 1}).hgetall("h").smembers("nothing")
    assert len(pipe) == 7
    sent: dict[str, list[Any]] = {}
    counts = commands_sent(redis_server, lambda: sent.setdefault("replies", pipe.execute()))
    assert sent["replies"] == [2, 12, b"12", True, 1, {b"f": b"1"}, set()]
    assert counts == {"incrby": 2, "get": 1, "set": 1, "hset": 1, "hgetall": 1, "smembers": 1}
    assert len(pipe) == 0 and pipe.execute() == []
    assert cache.get("n") == 12


def test_pipeline_is_a_transaction_by_default(
    caches_on: Any, redis_server: RedisServer, mode: str
) -> None:
    conn = get_redis_connection()
    with conn.pipeline() as pipe:
        pipe.set("a", 1).incr("a").get("a")
        if mode == "async":
            counts = commands_sent(redis_server, lambda: asyncio.run(pipe.aexecute()))
        else:
            counts = commands_sent(redis_server, pipe.execute)
    assert counts == {"multi": 1, "set": 1, "incrby": 1, "get": 1, "exec": 1}
    assert conn.get("a") == b"2"


def test_async_pipeline_replies(caches_on: Any) -> None:
    conn = get_redis_connection()

    async def run() -> list[list[Any]]:
        async def transaction(i: int) -> list[Any]:
            pipe = conn.pipeline()
            pipe.incr("counter").get("counter")
            return await pipe.aexecute()

        return await asyncio.gather(*(transaction(i) for i in range(100)))

    results = asyncio.run(run())
    # Each transaction's GET sees its own INCR: nothing interleaved inside MULTI / EXEC.
    assert all(int(got) == count for count, got in results)
    assert sorted(count for count, _ in results) == list(range(1, 101))


def test_pipeline_error_reply_raises_and_empties_the_queue(caches_on: Any, mode: str) -> None:
    conn = get_redis_connection()
    for transaction in (False, True):
        pipe = conn.pipeline(transaction=transaction)
        pipe.set("t", "text").incr("t")
        with pytest.raises(ResponseError):
            if mode == "async":
                asyncio.run(pipe.aexecute())
            else:
                pipe.execute()
        assert len(pipe) == 0
    assert conn.get("t") == b"text"


def test_pipeline_refuses_what_redis_py_refuses_at_execute_and_sends_nothing(
    caches_on: Any, redis_client: Any, mode: str
) -> None:
    import redis

    for client, error in (
        (redis_client, redis.exceptions.DataError),
        (get_redis_connection(), DataError),
    ):
        pipe = client.pipeline(transaction=False)
        pipe.set("a", "1").set("b", True).set("c", memoryview(b"3"))  # queued as redis-py does
        assert len(pipe) == 3
        with pytest.raises(error, match="'bool'"):
            if mode == "async" and client is not redis_client:
                asyncio.run(pipe.aexecute())
            else:
                pipe.execute()
        assert len(pipe) == 0
        assert client.mget("a", "b", "c") == [None, None, None]
    with pytest.raises(DataError, match=r"nx.*xx"):  # refused when queued, as in redis-py
        get_redis_connection().pipeline().set("a", 1, nx=True, xx=True)


def test_error_replies_raise_response_error(caches_on: Any, mode: str) -> None:
    conn = Ops(get_redis_connection(), mode)
    conn.set("t", "text")
    with pytest.raises(ResponseError):
        conn.incr("t")
    with pytest.raises(ResponseError):
        conn.execute_command("NOSUCHCOMMAND")


def test_argument_errors(caches_on: Any) -> None:
    conn = get_redis_connection()
    with pytest.raises(DataError, match="hset"):
        conn.hset("h")
    with pytest.raises(ValueError, match="ZADD"):  # a DataError is a ValueError, a TypeError
        conn.zadd("z", {})
    with pytest.raises(TypeError, match="'NoneType'"):
        conn.set("k", None)


def test_write_is_accepted(caches_on: Any) -> None:
    caches_on.set("k", "v")
    assert get_redis_connection("default", write=False).get(caches_on.make_key("k")) is not None


def test_non_redoxide_alias_is_refused(caches_on: Any) -> None:
    with pytest.raises(NotImplementedError, match=r"CACHES\['local'\] is .*LocMemCache"):
        get_redis_connection("local")
    with pytest.raises(InvalidCacheBackendError):
        get_redis_connection("nowhere")


def test_django_redis_callers_except_clause_still_catches(caches_on: Any) -> None:
    # django-redis raises NotImplementedError for a backend without raw connections.
    with pytest.raises(NotImplementedError):
        import_string("django_redis.get_redis_connection")("local")
    with pytest.raises(NotImplementedError):
        get_redis_connection("local")


def test_connection_on_a_cluster(cluster: Any) -> None:
    from support.backend import build_cache

    cache = build_cache(cluster.urls[:1], {"OPTIONS": {"CLUSTER": True}})
    cache.clear()
    keys = [f"compat-{i}" for i in range(40)]  # spread over the three primaries
    cache.set_many(dict.fromkeys(keys, 1))
    with override_settings(
        CACHES={
            "default": {
                "BACKEND": "redoxide.RedisCache",
                "LOCATION": cluster.urls[:1],
                "OPTIONS": {"CLUSTER": True},
            }
        }
    ):
        conn = get_redis_connection()
    made = {cache.make_key(k).encode() for k in keys}
    assert set(conn.scan_iter(match=":1:compat-*")) == made
    assert set(conn.keys(":1:compat-*")) == made
    assert conn.incr(cache.make_key("compat-0")) == 2
    with pytest.raises(NotImplementedError, match="transaction=False"):
        conn.pipeline()
    pipe = conn.pipeline(transaction=False)
    for key in keys[:5]:
        pipe.get(cache.make_key(key))
    assert pipe.execute() == [b"2", b"1", b"1", b"1", b"1"]
    assert conn.delete(*[cache.make_key(k) for k in keys]) == 40
