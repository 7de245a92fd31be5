"""ttl, pttl, expire, pexpire, expire_at, pexpire_at, persist, as django-redis has them.

Each test runs twice, once through the sync method and once through its async twin (the
``mode`` fixture), and checks the TTL the server itself reports. What they do with the server
down is in reliability/test_fail_open.py.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from support.dispatch import Ops
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide.RedisCache") != "redoxide.RedisCache",
    reason="redoxide extras",
)

Call = Callable[..., Any]


def _cache_class() -> type[Any]:
    import redoxide
    from redoxide._expiry import ExpiryMixin

    if issubclass(redoxide.RedisCache, ExpiryMixin):
        return redoxide.RedisCache
    return type("ExpiryCache", (ExpiryMixin, redoxide.RedisCache), {})


def build(location: str, **params: Any) -> Any:
    return _cache_class()(location, params)


@pytest.fixture
def make(redis_server: RedisServer) -> Callable[..., Any]:
    """Return a factory of caches with the expiry methods, on a flushed redis_server."""
    redis_server.flushall()
    return lambda **params: build(redis_server.url, **params)


def _now() -> float:
    return datetime.datetime.now(datetime.timezone.utc).timestamp()


# -- ttl / pttl -----------------------------------------------------------------------------------


def test_ttl_of_missing_key_is_zero(make: Call, mode: str) -> None:
    cache = make()
    assert Ops(cache, mode).ttl("missing") == 0
    assert Ops(cache, mode).pttl("missing") == 0


def test_ttl_of_persistent_key_is_none(make: Call, mode: str) -> None:
    cache = make()
    cache.set("k", 1, timeout=None)
    assert Ops(cache, mode).ttl("k") is None
    assert Ops(cache, mode).pttl("k") is None


def test_ttl_and_pttl_match_the_server(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=100)
    assert Ops(cache, mode).ttl("k") in (99, 100)
    assert redis_client.ttl(cache.make_key("k")) in (99, 100)
    pttl = Ops(cache, mode).pttl("k")
    assert 95_000 < pttl <= 100_000
    assert abs(pttl - redis_client.pttl(cache.make_key("k"))) < 1000


# -- expire / pexpire -----------------------------------------------------------------------------


def test_expire_sets_seconds(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=None)
    assert Ops(cache, mode).expire("k", 50) is True
    assert redis_client.ttl(cache.make_key("k")) in (49, 50)
    assert Ops(cache, mode).expire("k", datetime.timedelta(minutes=2)) is True
    assert redis_client.ttl(cache.make_key("k")) in (119, 120)
    assert Ops(cache, mode).expire("k", 0.5) is True
    assert 0 < redis_client.pttl(cache.make_key("k")) <= 500


def test_pexpire_sets_milliseconds(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=None)
    assert Ops(cache, mode).pexpire("k", 50_000) is True
    assert 45_000 < redis_client.pttl(cache.make_key("k")) <= 50_000
    assert Ops(cache, mode).pexpire("k", datetime.timedelta(seconds=20)) is True
    assert 15_000 < redis_client.pttl(cache.make_key("k")) <= 20_100


def test_expire_of_missing_key_is_false(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    assert Ops(cache, mode).expire("missing", 10) is False
    assert Ops(cache, mode).pexpire("missing", 10_000) is False
    assert Ops(cache, mode).expire("missing", None) is False
    assert Ops(cache, mode).expire("missing", 0) is False
    assert redis_client.keys("*") == []


def test_expire_default_timeout_is_the_cache_timeout(
    make: Call, mode: str, redis_client: Any
) -> None:
    # pexpire too: the default is TIMEOUT seconds, not TIMEOUT ms as in django-redis.
    cache = make(TIMEOUT=40)
    for method in ("expire", "pexpire"):
        cache.set("k", "v", timeout=None)
        assert getattr(Ops(cache, mode), method)("k", DEFAULT_TIMEOUT) is True
        assert redis_client.ttl(cache.make_key("k")) in (39, 40)


def test_expire_none_makes_the_key_persistent(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=10)
    assert Ops(cache, mode).expire("k", None) is True
    assert redis_client.ttl(cache.make_key("k")) == -1


@pytest.mark.parametrize("timeout", [0, -5])
def test_expire_zero_or_less_deletes(make: Call, mode: str, timeout: int) -> None:
    cache = make()
    for method in ("expire", "pexpire"):
        cache.set("k", "v", timeout=None)
        assert getattr(Ops(cache, mode), method)("k", timeout) is True
        assert cache.get("k") is None


def test_expire_rejects_a_non_number(make: Call, mode: str) -> None:
    cache = make()
    cache.set("k", "v")
    with pytest.raises(TypeError):
        Ops(cache, mode).expire("k", "10")
    with pytest.raises(TypeError):
        Ops(cache, mode).pexpire("k", True)


# -- expire_at / pexpire_at -----------------------------------------------------------------------


def test_expire_at_datetime_and_unix_time(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=None)
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60)
    assert Ops(cache, mode).expire_at("k", when) is True
    assert 55_000 < redis_client.pttl(cache.make_key("k")) <= 60_100
    assert Ops(cache, mode).expire_at("k", int(_now()) + 30) is True
    assert 25 <= redis_client.ttl(cache.make_key("k")) <= 30


# Absolute expiry times meet the server's clock: upper bounds allow it 100 ms of skew.
def test_pexpire_at_datetime_and_unix_ms(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=None)
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=45)
    assert Ops(cache, mode).pexpire_at("k", when) is True
    assert 40_000 < redis_client.pttl(cache.make_key("k")) <= 45_100
    assert Ops(cache, mode).pexpire_at("k", round(_now() * 1000) + 20_000) is True
    assert 15_000 < redis_client.pttl(cache.make_key("k")) <= 20_100


def test_expire_at_in_the_past_deletes(make: Call, mode: str) -> None:
    cache = make()
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    for method in ("expire_at", "pexpire_at"):
        cache.set("k", "v", timeout=None)
        assert getattr(Ops(cache, mode), method)("k", past) is True
        assert cache.get("k") is None


def test_expire_at_of_missing_key_is_false(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60)
    assert Ops(cache, mode).expire_at("missing", when) is False
    assert Ops(cache, mode).pexpire_at("missing", when) is False
    assert redis_client.keys("*") == []


def test_expire_at_rejects_a_non_time(make: Call, mode: str) -> None:
    cache = make()
    with pytest.raises(TypeError):
        Ops(cache, mode).expire_at("k", "tomorrow")


# -- persist --------------------------------------------------------------------------------------


def test_persist_removes_the_expiry(make: Call, mode: str, redis_client: Any) -> None:
    cache = make()
    cache.set("k", "v", timeout=10)
    assert Ops(cache, mode).persist("k") is True
    assert redis_client.ttl(cache.make_key("k")) == -1
    assert Ops(cache, mode).ttl("k") is None


def test_persist_of_persistent_or_missing_key_is_false(make: Call, mode: str) -> None:
    cache = make()
    cache.set("k", "v", timeout=None)
    assert Ops(cache, mode).persist("k") is False
    assert Ops(cache, mode).persist("missing") is False


# -- keys -----------------------------------------------------------------------------------------


def test_methods_use_prefix_and_version(make: Call, mode: str, redis_client: Any) -> None:
    cache = make(KEY_PREFIX="pre", VERSION=2)
    cache.set("k", "v", timeout=None)
    cache.set("k", "v3", timeout=None, version=3)
    assert Ops(cache, mode).expire("k", 70) is True
    assert redis_client.ttl("pre:2:k") in (69, 70)
    assert redis_client.ttl("pre:3:k") == -1
    assert Ops(cache, mode).pexpire("k", 80_000, version=3) is True
    assert 75_000 < redis_client.pttl("pre:3:k") <= 80_000
    assert Ops(cache, mode).ttl("k") in (69, 70)
    assert Ops(cache, mode).ttl("k", version=3) in (79, 80)
    assert Ops(cache, mode).ttl("k", version=4) == 0
    assert Ops(cache, mode).persist("k", version=3) is True
    assert redis_client.ttl("pre:3:k") == -1
    assert redis_client.ttl("pre:2:k") in (69, 70)
    assert Ops(cache, mode).expire_at("k", int(_now()) + 90, version=3) is True
    assert 85 <= redis_client.ttl("pre:3:k") <= 90


def test_methods_warn_about_unsafe_keys(make: Call, mode: str) -> None:
    from django.core.cache import CacheKeyWarning

    cache = make()
    with pytest.warns(CacheKeyWarning):
        Ops(cache, mode).ttl("bad key")


# -- fail-open ------------------------------------------------------------------------------------
