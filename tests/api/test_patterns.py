"""keys / iter_keys / delete_pattern and their async twins, against a real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redoxide import RedisCache
from redoxide._patterns import PatternsMixin, glob_escape
from support.servers import RedisServer

# The mixin under test, whether or not RedisCache has taken it among its bases yet.
Cache: type[Any] = (
    RedisCache
    if issubclass(RedisCache, PatternsMixin)
    else type("Cache", (PatternsMixin, RedisCache), {})
)


@pytest.fixture
def make(redis_server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Return a factory of caches on an empty redis_server: make(KEY_PREFIX=..., VERSION=...)."""
    redis_server.flushall()
    yield lambda **params: Cache(redis_server.url, params)


def raw_keys(redis_client: Any) -> set[str]:
    return {k.decode() for k in redis_client.keys("*")}


def test_keys_returns_matching_user_keys_only(make: Callable[..., Any]) -> None:
    cache = make(KEY_PREFIX="site")
    cache.set_many({"user:1": 1, "user:2": 2, "post:1": 3})
    assert sorted(cache.keys("user:*")) == ["user:1", "user:2"]
    assert sorted(cache.keys("*")) == ["post:1", "user:1", "user:2"]
    assert cache.keys("nothing:*") == []


def test_iter_keys_yields_every_match_with_a_small_itersize(make: Callable[..., Any]) -> None:
    cache = make()
    cache.set_many({f"k{i}": i for i in range(50)})
    cache.set("other", 1)
    keys = cache.iter_keys("k*", itersize=3)
    assert iter(keys) is keys  # lazy: a generator, not a list
    assert set(keys) == {f"k{i}" for i in range(50)}


def test_delete_pattern_returns_count_and_spares_the_rest(
    make: Callable[..., Any], redis_client: Any
) -> None:
    cache = make(KEY_PREFIX="site")
    cache.set_many({f"session:{i}": i for i in range(30)})
    cache.set_many({"keep:1": 1, "sessionx": 2})
    redis_client.set("session:raw", b"not ours")  # outside KEY_PREFIX
    assert cache.delete_pattern("session:*", itersize=7) == 30
    assert raw_keys(redis_client) == {"site:1:keep:1", "site:1:sessionx", "session:raw"}
    assert cache.delete_pattern("session:*") == 0


def test_patterns_are_scoped_to_the_version(make: Callable[..., Any], redis_client: Any) -> None:
    cache = make(VERSION=2)
    cache.set("a", 1)
    cache.set("a", 1, version=3)
    assert cache.keys("*") == ["a"]
    assert cache.keys("*", version=3) == ["a"]
    assert cache.keys("*", version=4) == []
    assert list(cache.iter_keys("*", version=3)) == ["a"]
    assert cache.delete_pattern("*", version=3) == 1
    assert raw_keys(redis_client) == {":2:a"}


def test_patterns_are_scoped_to_the_prefix(make: Callable[..., Any], redis_client: Any) -> None:
    one, two = make(KEY_PREFIX="one"), make(KEY_PREFIX="two")
    one.set("k", 1)
    two.set("k", 2)
    assert one.keys("*") == ["k"]
    assert one.delete_pattern("*") == 1
    assert raw_keys(redis_client) == {"two:1:k"}
    # prefix= overrides KEY_PREFIX for one call, as in django-redis.
    assert one.delete_pattern("*", prefix="two") == 1
    assert raw_keys(redis_client) == set()


def test_delete_pattern_takes_django_redis_positional_order(make: Callable[..., Any]) -> None:
    cache = make()
    cache.set("a", 1, version=5)
    cache.set("a", 1)
    assert cache.delete_pattern("a", 5) == 1  # the second argument is the version
    assert cache.keys("*") == ["a"]


@pytest.mark.parametrize(
    ("prefix", "lookalike"),
    [("p*", "pq"), ("p?", "px"), ("[ab]", "a"), ("p\\", "p"), ("x]", "x]")],
)
def test_glob_characters_in_the_prefix_match_only_themselves(
    make: Callable[..., Any], redis_client: Any, prefix: str, lookalike: str
) -> None:
    cache = make(KEY_PREFIX=prefix)
    cache.set("k", 1)
    if lookalike != prefix:
        make(KEY_PREFIX=lookalike).set("k", 2)
    assert cache.keys("*") == ["k"]
    assert list(cache.iter_keys("k")) == ["k"]
    assert cache.delete_pattern("*") == 1
    expected = set() if lookalike == prefix else {f"{lookalike}:1:k"}
    assert raw_keys(redis_client) == expected


def test_glob_escape_escapes_redis_metacharacters() -> None:
    assert glob_escape("a*b?c[d]e\\f:g") == "a\\*b\\?c\\[d\\]e\\\\f:g"


def test_the_users_pattern_keeps_its_glob_meaning(make: Callable[..., Any]) -> None:
    cache = make()
    cache.set_many({"a1": 1, "b1": 2, "c1": 3, "a22": 4})
    assert sorted(cache.keys("[ab]?")) == ["a1", "b1"]


def test_keys_strip_a_prefix_that_contains_colons(make: Callable[..., Any]) -> None:
    cache = make(KEY_PREFIX="app:cache")
    cache.set("user:1", 1)
    assert cache.keys("user:*") == ["user:1"]
    assert list(cache.iter_keys("*")) == ["user:1"]


def test_a_custom_key_function_shapes_the_pattern(
    make: Callable[..., Any], redis_client: Any
) -> None:
    cache = make(KEY_PREFIX="p", KEY_FUNCTION=lambda key, prefix, version: f"{prefix}:{key}")
    cache.set("a", 1)
    cache.set("b", 1)
    assert cache.delete_pattern("a") == 1
    assert raw_keys(redis_client) == {"p:b"}


@pytest.mark.parametrize("itersize", [0, -1, 2.5, True, "10"])
def test_invalid_itersize_is_rejected(make: Callable[..., Any], itersize: Any) -> None:
    cache = make()
    with pytest.raises(ValueError, match="itersize"):
        cache.delete_pattern("*", itersize=itersize)
    with pytest.raises(ValueError, match="itersize"):
        list(cache.iter_keys("*", itersize=itersize))


def test_async_twins(make: Callable[..., Any], redis_client: Any) -> None:
    cache = make(KEY_PREFIX="site")
    cache.set_many({f"user:{i}": i for i in range(20)})
    cache.set("keep", 1)

    async def scenario() -> None:
        assert sorted(await cache.akeys("user:1*")) == ["user:1"] + [
            f"user:{i}" for i in range(10, 20)
        ]
        seen = [key async for key in cache.aiter_keys("user:*", itersize=4)]
        assert sorted(seen) == sorted(f"user:{i}" for i in range(20))
        assert await cache.adelete_pattern("user:*", itersize=5) == 20
        assert await cache.akeys("user:*") == []

    asyncio.run(scenario())
    assert raw_keys(redis_client) == {"site:1:keep"}


def test_delete_pattern_over_100_000_keys(make: Callable[..., Any], redis_client: Any) -> None:
    cache = make(KEY_PREFIX="big")
    names = [f"big:1:doomed:{i}" for i in range(100_000)]
    pipe = redis_client.pipeline(transaction=False)
    for start in range(0, len(names), 10_000):
        pipe.mset(dict.fromkeys(names[start : start + 10_000], b"x"))
    pipe.mset({f"big:1:kept:{i}": b"x" for i in range(10_000)})
    pipe.execute()

    started = time.perf_counter()
    assert cache.delete_pattern("doomed:*") == 100_000
    elapsed = time.perf_counter() - started

    assert redis_client.dbsize() == 10_000
    assert cache.keys("doomed:*") == []
    # The target is under 2 s; leave room for a loaded test machine.
    assert elapsed < 4, f"delete_pattern took {elapsed:.2f} s"
