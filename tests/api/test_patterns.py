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


# -- clear() under CLEAR_PREFIX_ONLY: this cache's names, every version, nothing else ------------

# Keys of every awkward kind: ':' and glob metacharacters, non-ASCII, long, empty.
AWKWARD = ["plain", "a:b:c", "1:2", "*", "[x]?\\", "é-ü-漢", "long-" * 40, ""]


def version_first_key(key: Any, key_prefix: str, version: Any) -> str:
    """The version in front: "VERSION:PREFIX:key"."""
    return f"{version}:{key_prefix}:{key}"


def int_version_key(key: Any, key_prefix: str, version: Any) -> str:
    """The version formatted as an int (a text version raises), zero-padded."""
    return "%s/v%04d/%s" % (key_prefix, version, key)  # noqa: UP031


def word_key(key: Any, key_prefix: str, version: Any) -> str:
    """Django's layout, for keys of letters, digits and underscores only (others raise)."""
    import re

    if not re.fullmatch(r"\w+", str(key)):
        raise ValueError(f"not a word: {key!r}")
    return f"{key_prefix}:{version}:{key}"


def hashed_tail_key(key: Any, key_prefix: str, version: Any) -> str:
    """Prefix and version kept, the key hashed."""
    import hashlib

    return f"{key_prefix}:{version}:{hashlib.sha1(str(key).encode()).hexdigest()}"


@pytest.fixture
def caches_on(redis_server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Return use(**entries): CACHES with these aliases (KEY_PREFIX, OPTIONS... each) on the
    session's server, emptied first; returns django.core.cache.caches."""
    from django.core.cache import caches
    from django.test.utils import override_settings

    redis_server.flushall()
    active: list[Any] = []

    def use(**entries: dict[str, Any]) -> Any:
        base = {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url}
        override = override_settings(
            CACHES={alias: {**base, **entry} for alias, entry in entries.items()}
        )
        override.enable()
        active.append(override)
        return caches

    yield use
    while active:
        active.pop().disable()


def fill_every_version(cache: Any) -> set[bytes]:
    """Write AWKWARD keys under several versions (and a structure, a lock); return the names."""
    for version in (None, 2, 10, 0, -3):
        cache.set_many({key: key for key in AWKWARD}, version=version)
    cache.incr_version("plain")  # to VERSION + 1, by the cache's own move
    cache.lpush("list", 1)
    with cache.lock("held", timeout=60):
        pass
    cache.set("kept-lock", 1)
    return {name for name in raw_names(cache) if name}


def raw_names(cache: Any) -> set[bytes]:
    return set(cache.client.execute("KEYS", "*"))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_clear_prefix_only_leaves_a_cache_whose_prefix_extends_it_and_foreign_keys(
    caches_on: Callable[..., Any], redis_client: Any, mode: str
) -> None:
    caches = caches_on(
        site={"KEY_PREFIX": "site", "OPTIONS": {"CLEAR_PREFIX_ONLY": True}},
        sessions={"KEY_PREFIX": "site:sessions"},
    )
    site, sessions = caches["site"], caches["sessions"]
    sessions.set_many({"abc": 1, "1:x": 2})
    sessions.set("v", 3, version=7)
    theirs = raw_names(sessions)
    # Names no cache of this shape writes: no version part, or not a number there.
    redis_client.mset({"site:lock": b"1", "site:": b"2", "site:x:y": b"3", "site:1": b"4"})
    ours = fill_every_version(site) - theirs - {b"site:lock", b"site:", b"site:x:y", b"site:1"}
    assert len(ours) > 30 and all(name.startswith(b"site:") for name in ours)

    done = site.clear() if mode == "sync" else asyncio.run(site.aclear())

    assert done is True
    left = raw_names(site)
    assert left == theirs | {b"site:lock", b"site:", b"site:x:y", b"site:1"}
    assert sessions.get_many(["abc", "1:x"]) == {"abc": 1, "1:x": 2}


@pytest.mark.parametrize(
    ("key_function", "lookalikes"),
    [
        # *:shop:* would match any name holding ":shop:".
        (version_first_key, {b"site:1:x:shop:y", b"cart:shop:1", b"x:shop:", b"1:shop"}),
        # The version formatted as an int: found by number, not by a text marker.
        (int_version_key, {b"shop/lock", b"shop/vx/1", b"shop/v/1", b"shop/v1"}),
        # The key hashed: prefix and version still say whose a name is.
        (hashed_tail_key, {b"shop:lock", b"shop:x:1", b"shop::1"}),
    ],
)
def test_clear_prefix_only_with_a_key_function_deletes_its_names_and_no_lookalike(
    caches_on: Callable[..., Any], redis_client: Any, key_function: Any, lookalikes: set[bytes]
) -> None:
    caches = caches_on(
        shop={
            "KEY_PREFIX": "shop",
            "KEY_FUNCTION": key_function,
            "OPTIONS": {"CLEAR_PREFIX_ONLY": True},
        },
        site={"KEY_PREFIX": "site"},
    )
    shop, site = caches["shop"], caches["site"]
    site.set_many({"x:shop:y": 1, "shop": 2})
    redis_client.mset(dict.fromkeys(lookalikes - raw_names(site), b"not shop's"))
    others = raw_names(site)
    ours = fill_every_version(shop) - others
    assert len(ours) > 30

    assert shop.clear() is True

    assert raw_names(site) == others
    assert site.get_many(["x:shop:y", "shop"]) == {"x:shop:y": 1, "shop": 2}


def test_clear_prefix_only_with_a_key_function_that_validates_keys(
    caches_on: Callable[..., Any],
) -> None:
    # The shape is found with keys of letters and digits when the key function refuses the
    # usual probes (which hold ":" and "-").
    caches = caches_on(
        shop={
            "KEY_PREFIX": "shop",
            "KEY_FUNCTION": word_key,
            "OPTIONS": {"CLEAR_PREFIX_ONLY": True},
        },
        other={"KEY_PREFIX": "shop:other"},
    )
    shop, other = caches["shop"], caches["other"]
    other.set_many({"a": 1, "b": 2})
    others = raw_names(other)
    for version in (1, 2, 10):
        shop.set_many({"k1": 1, "k_2": 2}, version=version)
    assert len(raw_names(shop) - others) == 6

    assert shop.clear() is True

    assert raw_names(shop) == others
    assert other.get_many(["a", "b"]) == {"a": 1, "b": 2}


# -- the shapes, without a server ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key_function", "prefix", "glob", "theirs", "not_theirs"),
    [
        (None, "site", "site:*:*", [b"site:1:k", b"site:-2:", b"site:10:a:b\n\xc3\xa9"], []),
        (None, "a*[b]", "a\\*\\[b\\]:*:*", [b"a*[b]:3:x"], [b"ab:3:x", b"a*[b]:x:3"]),
        (version_first_key, "shop", "*:shop:*", [b"7:shop:", b"-1:shop:x:shop:y"], [b"x:shop:1"]),
        (int_version_key, "shop", "shop/v*/*", [b"shop/v0001/k", b"shop/v-001/"], [b"shop/v/1"]),
        (hashed_tail_key, "mine", "mine:*:*", [b"mine:2:" + b"0" * 40], [b"mine::x"]),
    ],
)
def test_a_shape_takes_every_name_of_the_cache_and_no_lookalike(
    key_function: Any, prefix: str, glob: str, theirs: list[bytes], not_theirs: list[bytes]
) -> None:
    from django.core.cache.backends.base import default_key_func
    from redoxide._name_shapes import name_matcher

    matcher = name_matcher(key_function or default_key_func, prefix, 1)
    assert matcher is not None and matcher.glob == glob
    assert all(matcher(name) for name in theirs)
    assert not any(matcher(name) for name in [*not_theirs, b"lock", prefix.encode()])


def test_a_key_function_that_hashes_the_whole_name_has_no_shape_to_clear() -> None:
    import hashlib

    from redoxide._name_shapes import name_matcher

    def hashed(key: Any, key_prefix: str, version: Any) -> str:
        return hashlib.sha1(f"{key_prefix}:{version}:{key}".encode()).hexdigest()

    assert name_matcher(hashed, "mine", 1) is None


def test_two_shapes_share_a_name_only_where_one_name_can_be_of_both() -> None:
    from django.core.cache.backends.base import default_key_func
    from redoxide._name_shapes import name_matcher, shared_name

    def shape(prefix: str, key_function: Any = default_key_func) -> Any:
        return name_matcher(key_function, prefix, 1)

    assert shared_name(shape("site"), shape("site:1")) == "site:1:1:"
    assert shared_name(shape("site:1"), shape("site")) == "site:1:1:"
    assert shared_name(shape("site"), shape("site:sessions")) is None
    assert shared_name(shape("site"), shape("sites")) is None
    assert shared_name(shape("shop", version_first_key), shape("site")) is None
    assert shared_name(shape("shop", version_first_key), shape("shop:x", version_first_key))


def test_clear_prefix_only_on_a_cluster_leaves_other_caches_on_every_primary(
    cluster: Any,
) -> None:
    from django.core.cache import caches
    from django.test.utils import override_settings

    cluster.flushall()
    base = {"BACKEND": "redoxide.RedisCache", "LOCATION": cluster.urls[:1]}
    options = {"CLUSTER": True}
    settings = {
        "site": {**base, "KEY_PREFIX": "site", "OPTIONS": {**options, "CLEAR_PREFIX_ONLY": True}},
        "sessions": {**base, "KEY_PREFIX": "site:sessions", "OPTIONS": options},
    }
    with override_settings(CACHES=settings):
        site, sessions = caches["site"], caches["sessions"]
        theirs = {f"s{i}": i for i in range(40)}
        sessions.set_many(theirs)
        site.set_many({f"k{i}": i for i in range(40)})
        site.set_many({f"k{i}": i for i in range(40)}, version=3)
        site.client.execute("SET", "site:lock", 1)

        assert site.clear() is True

        assert site.keys("*") == [] and site.keys("*", version=3) == []
        assert sessions.get_many(list(theirs)) == theirs
        assert site.client.execute("GET", "site:lock") == b"1"
