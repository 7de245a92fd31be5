"""Lists (django-cachex's list API) on real servers, sync and async: what each call returns, the
bytes stored (a list element is encoded as a set member is: the bytes django-redis writes),
one command per call, fail-open, and every topology.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from redoxide.exceptions import CrossSlotError, ResponseError, SerializationError
from support.backend import build_cache, is_redoxide, topology_cache
from support.dispatch import Ops
from support.near import near_options
from support.servers import Cluster, RedisServer, commands_sent, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's list API")


def test_push_pop_and_read_back_any_value(ops: Ops) -> None:
    assert ops.rpush("l", "a", 1, {"k": [1, 2]}) == 3
    assert ops.lpush("l", "z", "y") == 5  # the last one ends up first
    assert ops.lrange("l", 0, -1) == ["y", "z", "a", 1, {"k": [1, 2]}]
    assert ops.llen("l") == 5
    assert ops.lindex("l", 0) == "y"
    assert ops.lindex("l", -1) == {"k": [1, 2]}
    assert ops.lindex("l", 99) is None
    assert ops.lpop("l") == "y"
    assert ops.rpop("l") == {"k": [1, 2]}
    assert ops.lpop("l", 2) == ["z", "a"]
    assert ops.rpop("l", 5) == [1]
    assert ops.llen("l") == 0


def test_reads_of_a_missing_list(ops: Ops) -> None:
    assert ops.lrange("none", 0, -1) == []
    assert ops.llen("none") == 0
    assert ops.lindex("none", 0) is None
    assert ops.lpop("none") is None
    assert ops.rpop("none", 3) is None
    assert ops.lpos("none", "a") is None
    assert ops.lrem("none", 0, "a") == 0
    assert ops.linsert("none", "BEFORE", "a", "b") == 0
    assert ops.lmove("none", "other") is None
    assert ops.lpush("none") == 0  # nothing to push: nothing sent, nothing made
    assert ops.has_key("none") is False


def test_elements_are_found_by_value(ops: Ops) -> None:
    ops.rpush("l", "a", "b", "a", 7, "a")
    assert ops.lpos("l", "a") == 0
    assert ops.lpos("l", "a", rank=2) == 2
    assert ops.lpos("l", "a", rank=-1) == 4
    assert ops.lpos("l", "a", count=0) == [0, 2, 4]
    assert ops.lpos("l", "a", count=5, maxlen=3) == [0, 2]
    assert ops.lpos("l", 7) == 3
    assert ops.lpos("l", "zz") is None
    assert ops.lrem("l", -1, "a") == 1  # from the end
    assert ops.lrange("l", 0, -1) == ["a", "b", "a", 7]
    assert ops.linsert("l", "after", "b", "c") == 5
    assert ops.linsert("l", "BEFORE", 7, "six") == 6
    assert ops.linsert("l", "BEFORE", "zz", "x") == -1
    assert ops.lrem("l", 0, "a") == 2
    assert ops.lrange("l", 0, -1) == ["b", "c", "six", 7]


def test_lset_ltrim_and_lmove(ops: Ops) -> None:
    ops.rpush("l", 1, 2, 3, 4)
    assert ops.lset("l", 1, "two") is True
    with pytest.raises(ResponseError, match="out of range"):
        ops.lset("l", 99, "x")
    assert ops.ltrim("l", 0, 2) is True
    assert ops.lrange("l", 0, -1) == [1, "two", 3]
    assert ops.lmove("l", "m") == 1
    assert ops.lmove("l", "m", "RIGHT", "LEFT") == 3
    assert ops.lrange("m", 0, -1) == [3, 1]
    assert ops.lrange("l", 0, -1) == ["two"]
    with pytest.raises(ValueError, match="wherefrom must be one of LEFT, RIGHT"):
        ops.lmove("l", "m", "UP", "LEFT")
    with pytest.raises(ValueError, match="where must be one of BEFORE, AFTER"):
        ops.linsert("l", "NEAR", "two", "x")


def test_versions_and_lmove_across_versions(ops: Ops) -> None:
    ops.rpush("l", "v1", version=1)
    ops.rpush("l", "v2", version=2)
    assert ops.lrange("l", 0, -1, version=2) == ["v2"]
    assert ops.lmove("l", "l", version_src=1, version_dst=2) == "v1"
    assert ops.lrange("l", 0, -1, version=2) == ["v2", "v1"]
    assert ops.llen("l", version=1) == 0


def test_stored_bytes_are_django_redis_member_bytes(cache: Any, redis_client: Any) -> None:
    cache.rpush("l", "a", 5, 2.5)
    assert redis_client.lrange(":1:l", 0, -1) == [
        pickle.dumps("a", pickle.DEFAULT_PROTOCOL),
        b"5",  # ints raw, as everywhere
        pickle.dumps(2.5, pickle.DEFAULT_PROTOCOL),
    ]
    # What another client pushed in those bytes is read and found by value.
    redis_client.rpush(":1:l", pickle.dumps(("t", 1), pickle.DEFAULT_PROTOCOL), b"9")
    assert cache.lrange("l", 3, -1) == [("t", 1), 9]
    assert cache.lpos("l", ("t", 1)) == 3


def test_an_undecodable_element_raises_or_under_fail_open_is_left_out(
    redis_server: RedisServer, redis_client: Any
) -> None:
    redis_server.flushall()
    strict = build_cache(redis_server.url, {})
    strict.rpush("l", "a", "b")
    redis_client.rpush(":1:l", b"\x80not-a-pickle")
    with pytest.raises(SerializationError):
        strict.lrange("l", 0, -1)
    lenient = build_cache(redis_server.url, {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    assert lenient.lrange("l", 0, -1) == ["a", "b"]


ROUND_TRIPS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("lpush", ("l", 1, 2), {}, "lpush"),
    ("rpush", ("l", "x"), {}, "rpush"),
    ("lpop", ("l",), {"count": 2}, "lpop"),
    ("rpop", ("l",), {}, "rpop"),
    ("lrange", ("l", 0, -1), {}, "lrange"),
    ("lindex", ("l", 0), {}, "lindex"),
    ("llen", ("l",), {}, "llen"),
    ("lpos", ("l", "x"), {"rank": 1}, "lpos"),
    ("lmove", ("l", "m"), {}, "lmove"),
    ("lrem", ("l", 0, "x"), {}, "lrem"),
    ("ltrim", ("l", 0, 5), {}, "ltrim"),
    ("lset", ("l", 0, "y"), {}, "lset"),
    ("linsert", ("l", "AFTER", "y", "z"), {}, "linsert"),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "command"), ROUND_TRIPS)
def test_each_call_is_one_command(
    cache: Any,
    redis_server: RedisServer,
    mode: str,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    command: str,
) -> None:
    cache.rpush("l", "x", "y", "x", "w")
    sent = commands_sent(redis_server, lambda: getattr(Ops(cache, mode), method)(*args, **kwargs))
    assert sent == {command: 1}


FAIL_OPEN: list[tuple[str, tuple[Any, ...], Any]] = [
    ("lpush", ("l", 1), 0),
    ("rpop", ("l",), None),
    ("lrange", ("l", 0, -1), []),
    ("llen", ("l",), 0),
    ("lindex", ("l", 0), None),
    ("lpos", ("l", 1), None),
    ("lmove", ("l", "m"), None),
    ("lrem", ("l", 0, 1), 0),
    ("ltrim", ("l", 0, 1), False),
    ("lset", ("l", 0, 1), False),
    ("linsert", ("l", "BEFORE", 1, 2), 0),
]


@pytest.mark.parametrize(("method", "args", "expected"), FAIL_OPEN, ids=[c[0] for c in FAIL_OPEN])
def test_fail_open_on_a_dead_server(
    mode: str, method: str, args: tuple[Any, ...], expected: Any
) -> None:
    options = {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 0.5}
    cache = build_cache(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": options})
    assert getattr(Ops(cache, mode), method)(*args) == expected


def test_lists_on_a_cluster(cluster: Cluster, mode: str) -> None:
    cluster.flushall()
    ops = Ops(build_cache(cluster.urls[:2], {"OPTIONS": {"CLUSTER": True}}), mode)
    for i in range(8):  # keys spread over the primaries, each call to its key's node
        assert ops.rpush(f"feed{i}", i, "x") == 2
        assert ops.lrange(f"feed{i}", 0, -1) == [i, "x"]
    assert ops.lmove("{u1}:a", "{u1}:b") is None
    ops.rpush("{u1}:a", "m")
    assert ops.lmove("{u1}:a", "{u1}:b") == "m"
    with pytest.raises(CrossSlotError):
        ops.lmove("feed0", "feed1")


@pytest.mark.parametrize("topology", ["replicas", "sentinel"])
def test_lists_on_replicas_and_sentinel(
    request: pytest.FixtureRequest, topology: str, mode: str
) -> None:
    # Every list command goes to the primary, so a read sees the write before it.
    ops = Ops(topology_cache(topology, request), mode)
    key = f"l-{mode}"
    ops.delete(key)
    assert ops.rpush(key, "a", 1) == 2
    assert ops.lrange(key, 0, -1) == ["a", 1]
    assert ops.lpop(key) == "a"
    ops.delete(key)


def test_a_near_cached_key_turned_into_a_list_is_not_read_stale(
    fresh_redis_server: RedisServer,
) -> None:
    # The near cache held "cfg:k"'s value; once the key is a list, get() reaches the server
    # and gets its WRONGTYPE, never the old local copy.
    # A server of its own: the near cache's tracking connection outlives the test.
    cache = build_cache(fresh_redis_server.url, {"OPTIONS": {"NEAR_CACHE": near_options()}})
    cache.set("cfg:k", "v")
    assert cache.get("cfg:k") == "v"
    cache.delete("cfg:k")
    cache.rpush("cfg:k", 1)
    with pytest.raises(ResponseError):
        cache.get("cfg:k")
    assert cache.lrange("cfg:k", 0, -1) == [1]
