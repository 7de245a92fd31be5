"""Sets, hashes and sorted sets (django-redis' data-structure API) on real servers.

Every ``mode`` test runs once through the sync methods and once through their async twins.
What the server stores is checked with redis-py; that each call is one round trip, with the
server's own INFO commandstats. Interop with django-redis is in test_structures_interop.py.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redoxide._redoxide import key_slot
from redoxide.exceptions import CrossSlotError, ResponseError
from support.backend import build_cache, is_redoxide, topology_cache
from support.dispatch import Ops
from support.servers import Cluster, RedisServer, commands_sent, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's data-structure API")

# A member pickled as django-redis pickles it (its default protocol).
PICKLED = pickle.dumps("a", pickle.DEFAULT_PROTOCOL)


def scan_all(cache: Any, mode: str, key: str, **kwargs: Any) -> list[Any]:
    """Every member sscan_iter (or asscan_iter) yields."""
    if mode == "sync":
        return list(cache.sscan_iter(key, **kwargs))

    async def collect() -> list[Any]:
        return [m async for m in cache.asscan_iter(key, **kwargs)]

    return asyncio.run(collect())


# -- sets ----------------------------------------------------------------------------------------


def test_sadd_counts_new_members_and_smembers_returns_them(ops: Ops) -> None:
    assert ops.sadd("s", "a", "b", 1, (2, "t")) == 4
    assert ops.sadd("s", "a", "c") == 1
    assert ops.smembers("s") == {"a", "b", "c", 1, (2, "t")}
    assert ops.scard("s") == 5


def test_set_reads_of_a_missing_set_are_empty(ops: Ops) -> None:
    assert ops.smembers("none") == set()
    assert ops.scard("none") == 0
    assert ops.sismember("none", "a") is False
    assert ops.smismember("none", "a", "b") == [False, False]
    assert ops.spop("none") is None
    assert ops.spop("none", 3) == set()
    assert ops.srandmember("none") is None
    assert ops.srandmember("none", 3) == []
    assert ops.srem("none", "a") == 0
    assert ops.sscan("none") == set()
    assert ops.sdiff("none", "other") == set()
    assert ops.sinter("none", "other") == set()
    assert ops.sunion("none", "other") == set()
    assert ops.smove("none", "other", "a") is False


def test_no_members_or_keys_sends_nothing(ops: Ops, redis_server: RedisServer) -> None:
    ops.scard("warm")  # this mode's connection, made
    sent = commands_sent(
        redis_server,
        lambda: (ops.sadd("s"), ops.srem("s"), ops.smismember("s"), ops.sunion(), ops.zrem("z")),
    )
    assert sent == {}
    assert (ops.sadd("s"), ops.srem("s"), ops.smismember("s"), ops.sunion()) == (0, 0, [], set())
    assert (ops.hset("h"), ops.hset("h", mapping={}), ops.hmget("h"), ops.zadd("z", {})) == (
        0,
        0,
        [],
        0,
    )


def test_ints_are_raw_members_everything_else_pickled(ops: Ops, redis_client: Any) -> None:
    assert ops.sadd("s", 1, -7, 2**70, True, "a", 1.5) == 6
    raw = redis_client.smembers(":1:s")
    assert {b"1", b"-7", b"%d" % 2**70, PICKLED} <= raw
    assert pickle.dumps(True, pickle.DEFAULT_PROTOCOL) in raw  # a bool is not an int here
    assert pickle.dumps(1.5, pickle.DEFAULT_PROTOCOL) in raw
    assert ops.sismember("s", True) and ops.sismember("s", 1)
    assert ops.scard("s") == 6


def test_sismember_and_smismember(ops: Ops) -> None:
    ops.sadd("s", "a", 2)
    assert ops.sismember("s", "a") is True
    assert ops.sismember("s", 2) is True
    assert ops.sismember("s", "2") is False  # a str is pickled, the int is raw
    assert ops.smismember("s", "a", "x", 2) == [True, False, True]


def test_srem_counts_members_removed(ops: Ops) -> None:
    ops.sadd("s", "a", "b", 3)
    assert ops.srem("s", "a", 3, "zz") == 2
    assert ops.smembers("s") == {"b"}


def test_sdiff_sinter_sunion(ops: Ops) -> None:
    ops.sadd("x", "a", "b", 1)
    ops.sadd("y", "b", 1, "c")
    assert ops.sdiff("x", "y") == {"a"}
    assert ops.sinter("x", "y") == {"b", 1}
    assert ops.sunion("x", "y") == {"a", "b", "c", 1}
    assert ops.sunion("x") == {"a", "b", 1}


def test_store_forms_replace_the_destination_and_return_its_size(ops: Ops) -> None:
    ops.sadd("x", "a", "b", 1)
    ops.sadd("y", "b", 1, "c")
    ops.sadd("d", "old")
    assert ops.sdiffstore("d", "x", "y") == 1
    assert ops.smembers("d") == {"a"}
    assert ops.sinterstore("d", "x", "y") == 2
    assert ops.smembers("d") == {"b", 1}
    assert ops.sunionstore("d", "x", "y") == 4
    assert ops.smembers("d") == {"a", "b", "c", 1}
    assert ops.sinterstore("d", "x", "none") == 0
    assert ops.scard("d") == 0


def test_store_forms_version_their_keys(ops: Ops, redis_client: Any) -> None:
    ops.sadd("x", "a", version=2)
    ops.sadd("y", "b", version=2)
    assert ops.sunionstore("d", "x", "y", version=2) == 2
    assert ops.smembers("d", version=2) == {"a", "b"}
    assert ops.sdiffstore("d", "x", "y", version_dest=5, version_keys=2) == 1
    assert redis_client.smembers(":5:d") == {PICKLED}
    assert ops.sdiffstore("d", "x", version_keys=2) == 1  # dest at the cache's version
    assert ops.smembers("d") == {"a"}


def test_smove_moves_between_sets_of_one_version(ops: Ops) -> None:
    ops.sadd("src", "a", "b", version=2)
    assert ops.smove("src", "dst", "a", version=2) is True
    assert ops.smove("src", "dst", "zz", version=2) is False
    assert ops.smembers("src", version=2) == {"b"}
    assert ops.smembers("dst", version=2) == {"a"}
    assert ops.smembers("dst") == set()


def test_spop_removes_one_or_count_members(ops: Ops) -> None:
    ops.sadd("s", "a", "b", 3)
    one = ops.spop("s")
    assert one in {"a", "b", 3}
    rest = ops.spop("s", 5)
    assert isinstance(rest, set) and rest | {one} == {"a", "b", 3}
    assert ops.scard("s") == 0


def test_srandmember_leaves_the_set_alone(ops: Ops) -> None:
    ops.sadd("s", "a", "b")
    assert ops.srandmember("s") in {"a", "b"}
    picked = ops.srandmember("s", 5)
    assert isinstance(picked, list) and sorted(picked) == ["a", "b"]
    repeated = ops.srandmember("s", -6)  # negative: repeats allowed, exactly that many
    assert len(repeated) == 6 and set(repeated) <= {"a", "b"}
    assert ops.scard("s") == 2


def test_sscan_returns_the_first_page(ops: Ops) -> None:
    ops.sadd("s", "a", "b", 1)
    assert ops.sscan("s") == {"a", "b", 1}
    assert ops.sscan("s", count=None) == {"a", "b", 1}


def test_sscan_match_is_encoded_like_a_member(ops: Ops) -> None:
    # As in django-redis: under pickle a pattern matches members of its own length.
    ops.sadd("s", "bar1", "bar2", "baz", "other", 12, 13, 2)
    assert ops.sscan("s", match="bar?") == {"bar1", "bar2"}
    assert ops.sscan("s", match="1*") == set()  # a str pattern is pickled: raw ints never match
    assert set(scan_all(ops.cache, ops.mode, "s", match="ba??")) == {"bar1", "bar2"}


def test_sscan_match_with_compression_is_refused(make_cache: Callable[..., Any], mode: str) -> None:
    cache = make_cache(COMPRESSOR="redoxide.compressors.ZlibCompressor")
    with pytest.raises(ValueError, match="compression"):
        Ops(cache, mode).sscan("s", match="a*")
    with pytest.raises(ValueError, match="compression"):
        scan_all(cache, mode, "s", match="a*")
    assert Ops(cache, mode).sscan("s") == set()


def test_sscan_iter_yields_every_member_over_several_pages(
    ops: Ops, redis_server: RedisServer
) -> None:
    members = {f"m{i}" for i in range(250)} | set(range(50))
    ops.sadd("big", *members)
    found = scan_all(ops.cache, ops.mode, "big", count=20)
    assert set(found) == members
    assert scan_all(ops.cache, ops.mode, "none") == []
    stats = commands_sent(redis_server, lambda: scan_all(ops.cache, ops.mode, "big", count=20))
    assert stats["sscan"] > 3  # pages, one round trip each


def test_set_versions_keep_sets_apart(ops: Ops, redis_client: Any) -> None:
    ops.sadd("s", "a", version=2)
    ops.sadd("s", "b")
    assert ops.smembers("s", version=2) == {"a"}
    assert ops.smembers("s") == {"b"}
    assert ops.sinter("s", version=2) == {"a"}
    assert redis_client.smembers(":2:s") == {PICKLED}


def test_key_prefix_and_key_function(
    make_cache: Callable[..., Any], mode: str, redis_client: Any
) -> None:
    ops = Ops(make_cache(KEY_PREFIX="p", VERSION=4), mode)
    ops.sadd("s", 1)
    ops.hset("h", "f", 1)
    ops.zadd("z", {"a": 1})
    assert set(redis_client.keys()) == {b"p:4:s", b"p:4:h", b"p:4:z"}
    custom = Ops(make_cache(KEY_FUNCTION="support.backend.custom_key_func"), mode)
    custom.sadd("s", 1)
    assert custom.smembers("s") == {1}
    assert redis_client.exists("custom||1|s")


def test_a_set_operation_on_a_string_raises_wrongtype(ops: Ops) -> None:
    ops.set("plain", "x")
    with pytest.raises(ResponseError):
        ops.sadd("plain", "a")


# -- hashes --------------------------------------------------------------------------------------


def test_hset_counts_new_fields(ops: Ops) -> None:
    assert ops.hset("h", "f", "v") == 1
    assert ops.hset("h", "f", "w") == 0
    assert ops.hset("h", mapping={"g": 1, "k": [1, 2]}) == 2
    assert ops.hset("h", "x", 1, mapping={"f": 2, "y": 3}) == 2
    assert ops.hgetall("h") == {"f": 2, "g": 1, "k": [1, 2], "x": 1, "y": 3}


def test_hash_reads(ops: Ops) -> None:
    ops.hset("h", mapping={"a": "x", "n": 5, "none": None})
    assert ops.hget("h", "a") == "x"
    assert ops.hget("h", "n") == 5
    assert ops.hget("h", "none", "dflt") is None  # a stored None is a value
    assert ops.hget("h", "missing") is None
    assert ops.hget("h", "missing", "dflt") == "dflt"
    assert ops.hmget("h", "a", "missing", "n") == ["x", None, 5]
    assert sorted(ops.hkeys("h")) == ["a", "n", "none"]
    assert ops.hlen("h") == 3
    assert ops.hexists("h", "a") is True
    assert ops.hexists("h", "missing") is False


def test_hash_reads_of_a_missing_hash(ops: Ops) -> None:
    assert ops.hgetall("none") == {}
    assert ops.hkeys("none") == []
    assert ops.hlen("none") == 0
    assert ops.hexists("none", "f") is False
    assert ops.hget("none", "f", 7) == 7
    assert ops.hmget("none", "f", "g") == [None, None]
    assert ops.hdel("none", "f") == 0


def test_hdel_removes_one_field(ops: Ops) -> None:
    ops.hset("h", mapping={"a": 1, "b": 2})
    assert ops.hdel("h", "a") == 1
    assert ops.hdel("h", "a") == 0
    assert ops.hgetall("h") == {"b": 2}


def test_hash_values_ints_raw_fields_as_redis_py_sends_them(ops: Ops, redis_client: Any) -> None:
    ops.hset("h", mapping={"n": 12, "s": "a", 3: "int field", 2.5: "float field", b"b": 1})
    raw = redis_client.hgetall(":1:h")
    assert raw[b"n"] == b"12"
    assert raw[b"s"] == pickle.dumps("a", pickle.HIGHEST_PROTOCOL)  # a value, like cache.set's
    assert set(raw) == {b"n", b"s", b"3", b"2.5", b"b"}
    assert ops.hget("h", 3) == "int field"
    assert ops.hget("h", 2.5) == "float field"
    assert ops.hexists("h", b"b")


def test_hincrby_counts_on_what_hset_stored(ops: Ops) -> None:
    ops.hset("h", "n", 10)
    assert ops.hincrby("h", "n") == 11
    assert ops.hincrby("h", "n", -20) == -9
    assert ops.hincrby("h", "new", 3) == 3
    assert ops.hget("h", "n") == -9
    ops.hset("h", "s", "text")
    with pytest.raises(ResponseError):
        ops.hincrby("h", "s")


def test_hash_versions(ops: Ops, redis_client: Any) -> None:
    ops.hset("h", "f", 1, version=3)
    assert ops.hget("h", "f") is None
    assert ops.hget("h", "f", version=3) == 1
    assert ops.hgetall("h", version=3) == {"f": 1}
    assert redis_client.hgetall(":3:h") == {b"f": b"1"}


# -- sorted sets ---------------------------------------------------------------------------------


def test_zadd_zcard_zscore_zrank(ops: Ops) -> None:
    assert ops.zadd("z", {"a": 1, "b": 2.5, 7: -1}) == 3
    assert ops.zadd("z", {"a": 3}) == 0
    assert ops.zcard("z") == 3
    assert ops.zscore("z", "a") == 3.0
    assert ops.zscore("z", 7) == -1.0
    assert ops.zscore("z", "none") is None
    assert ops.zrank("z", 7) == 0
    assert ops.zrank("z", "a") == 2
    assert ops.zrank("z", "none") is None


def test_zset_int_members_are_pickled(ops: Ops, redis_client: Any) -> None:
    # As django-redis does: a sorted-set member is serialized even when it is an int.
    ops.zadd("z", {5: 1, "a": 2})
    members = redis_client.zrange(":1:z", 0, -1)
    assert members == [pickle.dumps(5, pickle.DEFAULT_PROTOCOL), PICKLED]
    assert ops.zrange("z", 0, -1) == [5, "a"]


def test_zadd_options(ops: Ops) -> None:
    ops.zadd("z", {"a": 1})
    assert ops.zadd("z", {"a": 5, "b": 1}, nx=True) == 1
    assert ops.zscore("z", "a") == 1.0
    assert ops.zadd("z", {"a": 5, "c": 1}, xx=True) == 0
    assert ops.zscore("z", "a") == 5.0 and ops.zscore("z", "c") is None
    assert ops.zadd("z", {"a": 6, "d": 1}, ch=True) == 2
    assert ops.zadd("z", {"a": 2}, gt=True) == 0
    assert ops.zadd("z", {"a": 2}, lt=True, ch=True) == 1
    assert ops.zadd("z", {"a": 1.5}, incr=True) == 3.5
    assert ops.zadd("z", {"a": 1}, incr=True, nx=True) is None
    for bad in ({"nx": True, "xx": True}, {"gt": True, "lt": True}, {"nx": True, "gt": True}):
        with pytest.raises(ValueError):
            ops.zadd("z", {"a": 1}, **bad)
    with pytest.raises(ValueError):
        ops.zadd("z", {"a": 1, "b": 2}, incr=True)


def test_zcount_and_zremrangebyscore_take_redis_bounds(ops: Ops) -> None:
    ops.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert ops.zcount("z", 2, 3) == 2
    assert ops.zcount("z", "(2", "+inf") == 2
    assert ops.zcount("z", "-inf", 1.5) == 1
    assert ops.zcount("none", 0, 10) == 0
    assert ops.zremrangebyscore("z", "(1", 3) == 2
    assert ops.zrange("z", 0, -1) == ["a", "d"]


def test_zincrby(ops: Ops) -> None:
    assert ops.zincrby("z", 2, "a") == 2.0
    assert ops.zincrby("z", 0.5, "a") == 2.5
    assert ops.zincrby("z", -3, 9) == -3.0
    assert ops.zrange("z", 0, -1, withscores=True) == [(9, -3.0), ("a", 2.5)]


def test_zrange_forms(ops: Ops) -> None:
    ops.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert ops.zrange("z", 0, -1) == ["a", "b", "c"]
    assert ops.zrange("z", 0, 1, desc=True) == ["c", "b"]
    assert ops.zrange("z", 0, -1, withscores=True) == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert ops.zrange("z", -1, -1, withscores=True, score_cast_func=int) == [("c", 3)]
    assert ops.zrevrange("z", 0, 0) == ["c"]
    assert ops.zrevrange("z", 0, -1, withscores=True) == [("c", 3.0), ("b", 2.0), ("a", 1.0)]
    assert ops.zrange("none", 0, -1) == []
    assert ops.zrevrange("none", 0, -1, withscores=True) == []


def test_zrangebyscore_forms(ops: Ops) -> None:
    ops.zadd("z", {"a": 1, "b": 2.5, "c": 3, "d": 4})
    assert ops.zrangebyscore("z", 2, 4) == ["b", "c", "d"]
    assert ops.zrangebyscore("z", "(1", "+inf", start=1, num=2) == ["c", "d"]
    assert ops.zrangebyscore("z", 2, 3, withscores=True) == [("b", 2.5), ("c", 3.0)]
    # score_cast_func=int on 2.5 falls back to int(float(...)), as in redis-py.
    assert ops.zrangebyscore("z", 2, 3, withscores=True, score_cast_func=int) == [
        ("b", 2),
        ("c", 3),
    ]
    assert ops.zrevrangebyscore("z", 4, 2) == ["d", "c", "b"]
    assert ops.zrevrangebyscore("z", "+inf", "-inf", start=0, num=1, withscores=True) == [
        ("d", 4.0)
    ]
    assert ops.zrangebyscore("none", 0, 1) == []
    with pytest.raises(ValueError, match="both"):
        ops.zrangebyscore("z", 0, 1, start=1)


def test_zpopmax_and_zpopmin(ops: Ops) -> None:
    ops.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert ops.zpopmax("z") == ("d", 4.0)
    assert ops.zpopmin("z") == ("a", 1.0)
    assert ops.zpopmax("z", 5) == [("c", 3.0), ("b", 2.0)]
    assert ops.zpopmin("z") is None
    assert ops.zpopmin("z", 2) == []
    assert ops.zpopmax("none") is None


def test_zrem(ops: Ops) -> None:
    ops.zadd("z", {"a": 1, 2: 2, "c": 3})
    assert ops.zrem("z", "a", 2, "none") == 2
    assert ops.zrange("z", 0, -1) == ["c"]


def test_zrank_withscore_needs_redis_7_2(ops: Ops, redis_server: RedisServer) -> None:
    ops.zadd("z", {"a": 1.5})
    version = tuple(int(p) for p in redis_server.info("server")["redis_version"].split("."))
    if version < (7, 2):
        with pytest.raises(ResponseError):
            ops.zrank("z", "a", withscore=True)
    else:
        assert ops.zrank("z", "a", withscore=True) == [0, 1.5]
        assert ops.zrank("z", "none", withscore=True) is None


def test_zset_versions(ops: Ops, redis_client: Any) -> None:
    ops.zadd("z", {"a": 1}, version=2)
    assert ops.zcard("z") == 0
    assert ops.zrange("z", 0, -1, version=2) == ["a"]
    assert ops.zscore("z", "a", version=2) == 1.0
    assert redis_client.zrange(":2:z", 0, -1) == [PICKLED]


# -- one round trip per call -----------------------------------------------------------------------


ROUND_TRIPS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("sadd", ("s", "a", 1, "b"), {}, "sadd"),
    ("srem", ("s", "a", "zz"), {}, "srem"),
    ("scard", ("s",), {}, "scard"),
    ("sismember", ("s", 1), {}, "sismember"),
    ("smismember", ("s", 1, "b"), {}, "smismember"),
    ("smembers", ("s",), {}, "smembers"),
    ("sdiff", ("s", "t"), {}, "sdiff"),
    ("sinter", ("s", "t"), {}, "sinter"),
    ("sunion", ("s", "t"), {}, "sunion"),
    ("sdiffstore", ("d", "s", "t"), {}, "sdiffstore"),
    ("sinterstore", ("d", "s", "t"), {}, "sinterstore"),
    ("sunionstore", ("d", "s", "t"), {}, "sunionstore"),
    ("smove", ("s", "t", 1), {}, "smove"),
    ("spop", ("s",), {}, "spop"),
    ("spop", ("t", 2), {}, "spop"),
    ("srandmember", ("t", 2), {}, "srandmember"),
    ("sscan", ("t",), {"match": "a*"}, "sscan"),
    ("hset", ("h", "f", 1), {"mapping": {"g": "x"}}, "hset"),
    ("hget", ("h", "f"), {}, "hget"),
    ("hmget", ("h", "f", "g"), {}, "hmget"),
    ("hgetall", ("h",), {}, "hgetall"),
    ("hkeys", ("h",), {}, "hkeys"),
    ("hlen", ("h",), {}, "hlen"),
    ("hexists", ("h", "f"), {}, "hexists"),
    ("hincrby", ("h", "f", 2), {}, "hincrby"),
    ("hdel", ("h", "f"), {}, "hdel"),
    ("zadd", ("z", {"a": 1, "b": 2}), {"ch": True}, "zadd"),
    ("zcard", ("z",), {}, "zcard"),
    ("zcount", ("z", 0, "+inf"), {}, "zcount"),
    ("zincrby", ("z", 1, "a"), {}, "zincrby"),
    ("zscore", ("z", "a"), {}, "zscore"),
    ("zrank", ("z", "a"), {}, "zrank"),
    ("zrange", ("z", 0, -1), {"withscores": True}, "zrange"),
    ("zrange", ("z", 0, -1), {"desc": True}, "zrevrange"),
    ("zrevrange", ("z", 0, -1), {}, "zrevrange"),
    ("zrangebyscore", ("z", 0, 5), {"start": 0, "num": 1}, "zrangebyscore"),
    ("zrevrangebyscore", ("z", 5, 0), {"withscores": True}, "zrevrangebyscore"),
    ("zpopmax", ("z",), {}, "zpopmax"),
    ("zpopmin", ("z", 3), {}, "zpopmin"),
    ("zrem", ("z", "a", "b"), {}, "zrem"),
    ("zremrangebyscore", ("z", 0, 1), {}, "zremrangebyscore"),
]


@pytest.fixture
def counted(ops: Ops) -> Iterator[Ops]:
    """ops with a little data and this mode's connection already made."""
    ops.sadd("s", "a", 1)
    ops.sadd("t", "b", 2)
    ops.hset("h", "f", 1)
    ops.zadd("z", {"a": 1})
    yield ops


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "command"),
    ROUND_TRIPS,
    ids=[f"{m}-{c}" for m, _, _, c in ROUND_TRIPS],
)
def test_each_call_is_one_command(
    counted: Ops,
    redis_server: RedisServer,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    command: str,
) -> None:
    sent = commands_sent(redis_server, lambda: getattr(counted, method)(*args, **kwargs))
    assert sent == {command: 1}


def parameters(function: Any) -> list[tuple[str, Any, Any]]:
    """A signature's parameters as (name, kind, default), annotations aside (a *args's name
    is nothing a caller sees)."""
    import inspect

    return [
        ("*" if p.kind is p.VAR_POSITIONAL else p.name, p.kind, p.default)
        for p in inspect.signature(function).parameters.values()
        if p.name not in ("self", "client")
    ]


def test_the_api_has_django_redis_signatures_and_async_twins(cache: Any) -> None:
    import inspect

    from django_redis.cache import RedisCache as DjangoRedisCache
    from django_redis.client import DefaultClient

    names = {m for m in vars(DjangoRedisCache) if m[:1] in "shz"} - {"set", "set_many", "has_key"}
    assert len(names) == 36  # 17 set, 5 hash and 14 sorted-set methods
    ours = type(cache)
    for name in names | {"hget", "hgetall", "hmget", "hincrby"}:
        if name in names:
            assert parameters(getattr(ours, name)) == parameters(getattr(DefaultClient, name)), name
        assert parameters(getattr(ours, name)) == parameters(getattr(ours, "a" + name)), name
        if name == "sscan_iter":
            assert inspect.isgeneratorfunction(ours.sscan_iter)
            assert inspect.isasyncgenfunction(ours.asscan_iter)
        else:
            assert inspect.iscoroutinefunction(getattr(ours, "a" + name)), name


# -- fail-open -----------------------------------------------------------------------------------


def test_unreachable_server_reads_as_empty_under_ignore_exceptions(
    make_cache: Callable[..., Any], mode: str
) -> None:
    cache = make_cache(
        f"redis://127.0.0.1:{free_port()}", IGNORE_EXCEPTIONS=True, SOCKET_CONNECT_TIMEOUT=0.2
    )
    ops = Ops(cache, mode)
    assert ops.smembers("s") == set()
    assert ops.sadd("s", "a") == 0
    assert ops.scard("s") == 0
    assert ops.sismember("s", "a") is False
    assert ops.smismember("s", "a", "b") == [False, False]
    assert ops.spop("s") is None and ops.spop("s", 2) == set()
    assert ops.srandmember("s", 2) == []
    assert ops.hgetall("h") == {} and ops.hget("h", "f", "d") == "d"
    assert ops.hmget("h", "f") == [None] and ops.hkeys("h") == []
    assert ops.hincrby("h", "f") is None
    assert ops.zrange("z", 0, -1) == [] and ops.zscore("z", "a") is None
    assert ops.zpopmax("z") is None and ops.zpopmax("z", 2) == []
    assert ops.zadd("z", {"a": 1}) == 0 and ops.zadd("z", {"a": 1}, incr=True) is None
    assert scan_all(cache, mode, "s") == []


# -- cluster ---------------------------------------------------------------------------------------


@pytest.fixture
def cluster_cache(cluster: Cluster) -> Any:
    cluster.flushall()
    return build_cache(cluster.urls[:2], {"OPTIONS": {"CLUSTER": True}})


def test_structures_on_a_cluster(cluster_cache: Any, mode: str) -> None:
    ops = Ops(cluster_cache, mode)
    for i in range(12):  # keys in many slots, on every primary
        assert ops.sadd(f"s{i}", "a", i) == 2
        assert ops.hset(f"h{i}", mapping={"f": i}) == 1
        assert ops.zadd(f"z{i}", {"m": i}) == 1
    for i in range(12):
        assert ops.smembers(f"s{i}") == {"a", i}
        assert ops.hgetall(f"h{i}") == {"f": i}
        assert ops.zrange(f"z{i}", 0, -1, withscores=True) == [("m", float(i))]
    assert set(scan_all(cluster_cache, mode, "s3", count=1)) == {"a", 3}


def test_cluster_multi_key_calls_need_one_slot(cluster_cache: Any, mode: str) -> None:
    ops = Ops(cluster_cache, mode)
    ops.sadd("{u1}:tags", "a", "b")
    ops.sadd("{u1}:likes", "b", "c")
    assert ops.sinter("{u1}:tags", "{u1}:likes") == {"b"}
    assert ops.sunionstore("{u1}:all", "{u1}:tags", "{u1}:likes") == 3
    assert ops.smove("{u1}:tags", "{u1}:likes", "a") is True
    first, second = (
        "x",
        next(
            f"y{i}"
            for i in range(100)
            if key_slot(cluster_cache.make_key(f"y{i}")) != key_slot(cluster_cache.make_key("x"))
        ),
    )
    ops.sadd(first, "a")
    ops.sadd(second, "a")
    with pytest.raises(CrossSlotError):
        ops.sinter(first, second)
    with pytest.raises(CrossSlotError):
        ops.sdiffstore(first, second, first)


# -- replicas and sentinel -------------------------------------------------------------------------


@pytest.mark.parametrize("topology", ["replicas", "sentinel"])
def test_structures_on_replicas_and_sentinel(
    request: pytest.FixtureRequest, topology: str, mode: str
) -> None:
    # Every structure command goes to the primary, so a read sees the write before it.
    ops = Ops(topology_cache(topology, request), mode)
    s, h, z = (f"{name}-{mode}" for name in ("s", "h", "z"))
    ops.delete_many([s, h, z])
    assert ops.sadd(s, "a", 1) == 2
    assert ops.smembers(s) == {"a", 1}
    assert ops.hset(h, "f", [1]) == 1
    assert ops.hgetall(h) == {"f": [1]}
    assert ops.zadd(z, {"m": 2}) == 1
    assert ops.zpopmin(z) == ("m", 2.0)
    ops.delete_many([s, h, z])
