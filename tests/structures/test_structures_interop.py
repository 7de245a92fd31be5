"""Sets, hashes and sorted sets shared with django-redis 7 on one server, both directions.

django-redis' cache (``django_redis.cache.RedisCache``) and redoxide's, with the same
KEY_PREFIX and VERSION: what one writes the other reads, finds and removes. Set and
sorted-set members are found by their bytes, so they must be the very bytes django-redis
writes; that is checked directly, under each serializer django-redis offers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils.module_loading import import_string
from support.backend import is_redoxide
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's data-structure API")

PARAMS = {"KEY_PREFIX": "interop", "VERSION": 3}
SERIALIZERS = {
    "pickle": (
        "django_redis.serializers.pickle.PickleSerializer",
        "redoxide.serializers.PickleSerializer",
    ),
    "json": ("django_redis.serializers.json.JSONSerializer", "redoxide.serializers.JSONSerializer"),
    "msgpack": (
        "django_redis.serializers.msgpack.MSGPackSerializer",
        "redoxide.serializers.MSGPackSerializer",
    ),
}
# Hashable members each serializer keeps (json and msgpack turn tuples into lists). msgpack
# has no ints over 64 bits. redoxide's JSON (orjson's when installed) is compact UTF-8 and
# django-redis' is json.dumps' ASCII with ", " separators: a non-ASCII string (or a list) is
# a different member under JSON, so those are left out of its byte-for-byte check.
MEMBERS: dict[str, list[Any]] = {
    "pickle": ["a", "héllo", "x" * 40, 7, -3, 2**70, 1.5, True, None, ("t", 1), frozenset({1})],
    "json": ["a", "x" * 40, 7, -3, 2**70, 1.5, True, None],
    "msgpack": ["a", "héllo", "x" * 40, 7, -3, 1.5, True, None, b"\x00raw"],
}
VALUES: dict[str, Any] = {"n": 12, "s": "text", "l": [1, "two"], "d": {"k": 1.5}, "none": None}


@pytest.fixture
def pair(redis_server: RedisServer) -> Iterator[Callable[..., tuple[Any, Any]]]:
    """Return a factory of (django-redis, redoxide) caches with matching options."""
    made: list[Any] = []

    def factory(
        serializer: str = "pickle",
        theirs_options: dict[str, Any] | None = None,
        ours_options: dict[str, Any] | None = None,
    ) -> tuple[Any, Any]:
        theirs_s, ours_s = SERIALIZERS[serializer]
        theirs = import_string("django_redis.cache.RedisCache")(
            redis_server.url,
            {**PARAMS, "OPTIONS": {"SERIALIZER": theirs_s, **(theirs_options or {})}},
        )
        ours = import_string("redoxide.RedisCache")(
            redis_server.url, {**PARAMS, "OPTIONS": {"SERIALIZER": ours_s, **(ours_options or {})}}
        )
        made.extend((theirs, ours))
        return theirs, ours

    redis_server.flushall()
    yield factory
    for cache in made:
        cache.close()


@pytest.mark.parametrize("serializer", sorted(SERIALIZERS))
def test_members_are_the_bytes_django_redis_writes(
    pair: Callable[..., tuple[Any, Any]], redis_client: Any, serializer: str
) -> None:
    theirs, ours = pair(serializer)
    members = MEMBERS[serializer]
    theirs.sadd("theirs", *members)
    ours.sadd("ours", *members)
    assert redis_client.smembers("interop:3:ours") == redis_client.smembers("interop:3:theirs")
    scored = {m: i for i, m in enumerate(members)}
    theirs.zadd("ztheirs", scored)
    ours.zadd("zours", scored)
    assert redis_client.zrange("interop:3:zours", 0, -1, withscores=True) == redis_client.zrange(
        "interop:3:ztheirs", 0, -1, withscores=True
    )
    # Hash values (not looked up by their bytes) read back either way; ints are raw in both.
    theirs.hset("htheirs", mapping=VALUES)
    ours.hset("hours", mapping=VALUES)
    assert redis_client.hget("interop:3:hours", "n") == redis_client.hget("interop:3:htheirs", "n")


def test_members_follow_an_explicit_pickle_version(
    pair: Callable[..., tuple[Any, Any]], redis_client: Any
) -> None:
    theirs, ours = pair(theirs_options={"PICKLE_VERSION": 2}, ours_options={"PICKLE_VERSION": 2})
    theirs.sadd("theirs", "a", ("t", 1))
    ours.sadd("ours", "a", ("t", 1))
    assert redis_client.smembers("interop:3:ours") == redis_client.smembers("interop:3:theirs")
    assert b"\x80\x02" in {m[:2] for m in redis_client.smembers("interop:3:ours")}


def test_compressed_members_match_with_the_same_threshold(
    pair: Callable[..., tuple[Any, Any]], redis_client: Any
) -> None:
    # django-redis compresses above 15 bytes; COMPRESS_MIN_LENGTH=16 makes redoxide do so too.
    theirs, ours = pair(
        theirs_options={"COMPRESSOR": "django_redis.compressors.zlib.ZlibCompressor"},
        ours_options={
            "COMPRESSOR": "redoxide.compressors.ZlibCompressor",
            "COMPRESS_MIN_LENGTH": 16,
        },
    )
    members = ["short", "y" * 200, ("t", "u" * 50)]
    theirs.sadd("theirs", *members)
    ours.sadd("ours", *members)
    assert redis_client.smembers("interop:3:ours") == redis_client.smembers("interop:3:theirs")
    assert ours.smembers("theirs") == set(members)
    assert ours.sismember("theirs", "y" * 200)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sets_django_redis_wrote_read_through_redoxide(
    pair: Callable[..., tuple[Any, Any]], mode: str
) -> None:
    theirs, ours = pair()
    members = MEMBERS["pickle"]
    theirs.sadd("s", *members)
    theirs.sadd("t", "a", 7, "only-t")
    expected = {
        "smembers": set(members),
        "scard": len(members),
        "sismember": True,
        "smismember": [True, True, False],
        "sinter": {"a", 7},
        "srem": 2,
        "after": set(members) - {"a", ("t", 1)},
    }
    assert run(ours, mode, [
        ("smembers", ("s",)),
        ("scard", ("s",)),
        ("sismember", ("s", ("t", 1))),
        ("smismember", ("s", 2**70, None, "zz")),
        ("sinter", ("s", "t")),
        ("srem", ("s", "a", ("t", 1))),
        ("smembers", ("s",)),
    ]) == list(expected.values())  # fmt: skip


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sets_redoxide_wrote_read_through_django_redis(
    pair: Callable[..., tuple[Any, Any]], mode: str
) -> None:
    theirs, ours = pair()
    members = MEMBERS["pickle"]
    run(ours, mode, [("sadd", ("s", *members)), ("sadd", ("t", "a", 7, "only-t"))])
    assert theirs.smembers("s") == set(members)
    assert theirs.scard("s") == len(members)
    assert theirs.sismember("s", ("t", 1))
    assert theirs.smismember("s", 2**70, None, "zz") == [True, True, False]
    assert theirs.sinter("s", "t") == {"a", 7}
    assert theirs.smove("s", "t", 1.5) is True
    assert theirs.srem("s", "a", frozenset({1})) == 2
    assert run(ours, mode, [("smembers", ("s",)), ("smembers", ("t",))]) == [
        set(members) - {"a", frozenset({1}), 1.5},
        {"a", 7, "only-t", 1.5},
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_hashes_both_ways(pair: Callable[..., tuple[Any, Any]], mode: str) -> None:
    theirs, ours = pair()
    theirs.hset("theirs", mapping=VALUES)
    theirs.hset("theirs", "extra", "v")
    assert run(ours, mode, [
        ("hgetall", ("theirs",)),
        ("hget", ("theirs", "l")),
        ("hincrby", ("theirs", "n", 3)),
        ("hexists", ("theirs", "extra")),
        ("hdel", ("theirs", "extra")),
        ("hset", ("ours", None, None, VALUES)),
    ]) == [{**VALUES, "extra": "v"}, [1, "two"], 15, True, 1, len(VALUES)]  # fmt: skip
    assert sorted(theirs.hkeys("ours")) == sorted(VALUES)
    assert theirs.hlen("ours") == len(VALUES)
    assert theirs.hexists("ours", "d")
    assert theirs.hdel("ours", "s") == 1
    raw = theirs.client.get_client().hget(theirs.make_key("ours"), "d")
    assert theirs.client.decode(raw) == {"k": 1.5}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sorted_sets_django_redis_wrote_read_through_redoxide(
    pair: Callable[..., tuple[Any, Any]], mode: str
) -> None:
    theirs, ours = pair()
    theirs.zadd("z", {"a": 1, 7: 2.5, ("t", 1): 3})
    assert run(ours, mode, [
        ("zrange", ("z", 0, -1)),
        ("zrange", ("z", 0, -1, True, True)),
        ("zscore", ("z", 7)),
        ("zrank", ("z", ("t", 1))),
        ("zincrby", ("z", 1, "a")),
        ("zrem", ("z", 7)),
        ("zrangebyscore", ("z", 0, 10)),
    ]) == [
        ["a", 7, ("t", 1)],
        [(("t", 1), 3.0), (7, 2.5), ("a", 1.0)],
        2.5,
        2,
        2.0,
        1,
        ["a", ("t", 1)],
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sorted_sets_redoxide_wrote_read_through_django_redis(
    pair: Callable[..., tuple[Any, Any]], mode: str
) -> None:
    theirs, ours = pair()
    run(ours, mode, [("zadd", ("z", {"a": 1, 7: 2.5, ("t", 1): 3}))])
    assert theirs.zrange("z", 0, -1) == ["a", 7, ("t", 1)]
    assert theirs.zrevrange("z", 0, 0, withscores=True) == [(("t", 1), 3.0)]
    assert theirs.zscore("z", 7) == 2.5
    assert theirs.zrank("z", "a") == 0
    assert theirs.zcount("z", 2, 3) == 2
    assert theirs.zrem("z", ("t", 1)) == 1
    assert theirs.zpopmax("z") == (7, 2.5)
    assert run(ours, mode, [("zrange", ("z", 0, -1, False, True))]) == [[("a", 1.0)]]


def run(cache: Any, mode: str, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """Call cache methods in order, sync or through their async twins; return the results."""
    if mode == "sync":
        return [getattr(cache, name)(*args) for name, args in calls]

    async def all_of() -> list[Any]:
        return [await getattr(cache, "a" + name)(*args) for name, args in calls]

    return asyncio.run(all_of())
