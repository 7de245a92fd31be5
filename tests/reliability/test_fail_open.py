"""Fail-open (IGNORE_EXCEPTIONS): with the server down, reads miss and writes report failure,
sync and async, and nothing raises; server errors still raise; the cache recovers when the
server returns. Also the settings (django-redis' DJANGO_REDIS_* project settings,
IGNORE_EXCEPTION_CLASSES) and the methods beside the core ones: expiry, key patterns, locks
(whose errors are never swallowed).

Elsewhere, beside what they are about: a value another serializer wrote, or a planted unsigned
pickle, is a miss under fail-open (values/test_serializers.py, security/test_signing.py); an
out-of-memory reply raises even under fail-open (test_faults_under_load.py).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import pytest
import redoxide
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redoxide import RedisCache
from redoxide._patterns import PatternsMixin
from redoxide.exceptions import ConnectionInterrupted
from redoxide.lock import Lock
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, free_port

redoxide_only = pytest.mark.skipif(not is_redoxide(), reason="redoxide options")

OPTIONS = {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}

# (method, args, what fail-open returns)
CASES: list[tuple[str, tuple[Any, ...], Any]] = [
    ("get", ("k", "dflt"), "dflt"),
    ("get_many", (["a", "b"],), {}),
    ("has_key", ("k",), False),
    ("add", ("k", 1), False),
    ("set", ("k", 1), None),
    ("touch", ("k", 10), False),
    ("delete", ("k",), False),
    ("set_many", ({"a": 1, "b": 2},), ["a", "b"]),
    ("delete_many", (["a", "b"],), None),
    ("get_or_set", ("k", lambda: "computed"), "computed"),
    ("incr", ("n",), None),
    ("clear", (), False),
]


def down_cache() -> Any:
    return build_cache(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": OPTIONS})


@redoxide_only
@pytest.mark.parametrize(("method", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_methods_fail_open(mode: str, method: str, args: tuple[Any, ...], expected: Any) -> None:
    assert getattr(Ops(down_cache(), mode), method)(*args) == expected


@redoxide_only
def test_server_errors_still_raise_under_fail_open(redis_server: RedisServer) -> None:
    from redoxide.exceptions import ResponseError

    cache = build_cache(redis_server.url, {"OPTIONS": OPTIONS})
    key = cache.make_key("h")
    redis_server.cli("HSET", key, "f", "v")
    with pytest.raises(ResponseError):
        cache.get("h")
    with pytest.raises(ResponseError):
        asyncio.run(cache.aget("h"))


@redoxide_only
def test_fail_open_recovers_when_the_server_returns() -> None:
    port = free_port()
    cache = build_cache(f"redis://127.0.0.1:{port}/0", {"OPTIONS": OPTIONS})
    assert cache.get("k", "miss") == "miss"
    assert asyncio.run(cache.aget("k", "miss")) == "miss"
    with RedisServer(port=port):
        cache.set("k", "hit")
        assert cache.get("k") == "hit"
        assert asyncio.run(cache.aget("k")) == "hit"


# -- settings ----------------------------------------------------------------------------------


@redoxide_only
def test_django_redis_ignore_exceptions_settings_are_the_defaults(
    caplog: pytest.LogCaptureFixture,
) -> None:
    location = f"redis://127.0.0.1:{free_port()}/0"
    options = {"SOCKET_CONNECT_TIMEOUT": 0.5}
    with override_settings(
        DJANGO_REDIS_IGNORE_EXCEPTIONS=True,
        DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS=True,
        DJANGO_REDIS_LOGGER="myproject.cache",
    ):
        cache = build_cache(location, {"OPTIONS": options})
        with caplog.at_level(logging.ERROR, logger="myproject.cache"):
            assert cache.get("k", "miss") == "miss"
        assert any(r.name == "myproject.cache" for r in caplog.records)
        # OPTIONS win over the project-wide setting.
        strict = build_cache(location, {"OPTIONS": {**options, "IGNORE_EXCEPTIONS": False}})
        with pytest.raises(ConnectionError):
            strict.get("k")


@redoxide_only
def test_ignored_exception_classes_are_configurable() -> None:
    location = f"redis://127.0.0.1:{free_port()}/0"
    options = {
        "SOCKET_CONNECT_TIMEOUT": 0.5,
        "IGNORE_EXCEPTIONS": True,
        "IGNORE_EXCEPTION_CLASSES": ["redoxide.exceptions.CacheTimeout"],
    }
    cache = build_cache(location, {"OPTIONS": options})
    with pytest.raises(ConnectionError):  # not in the list: still raised
        cache.get("k")


@redoxide_only
@pytest.mark.parametrize(
    "classes",
    [["redoxide.exceptions.ResponseError"], ["redoxide.exceptions.CacheError"], ["os.path"], []],
)
def test_ignoring_server_errors_or_non_exceptions_is_refused(classes: list[str]) -> None:
    options = {"IGNORE_EXCEPTIONS": True, "IGNORE_EXCEPTION_CLASSES": classes}
    with pytest.raises(ImproperlyConfigured, match="IGNORE_EXCEPTION_CLASSES"):
        build_cache("redis://127.0.0.1:1/0", {"OPTIONS": options}).get("k")


# -- expiry methods ----------------------------------------------------------------------------


def _expiry_cache_class() -> type[Any]:
    import redoxide
    from redoxide._expiry import ExpiryMixin

    if issubclass(redoxide.RedisCache, ExpiryMixin):
        return redoxide.RedisCache
    return type("ExpiryCache", (ExpiryMixin, redoxide.RedisCache), {})


# (method, args, what IGNORE_EXCEPTIONS returns): a down server reads as a missing key.
EXPIRY_CASES: list[tuple[str, tuple[Any, ...], Any]] = [
    ("ttl", ("k",), 0),
    ("pttl", ("k",), 0),
    ("expire", ("k", 10), False),
    ("pexpire", ("k", 10_000), False),
    ("expire_at", ("k", datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)), False),
    ("pexpire_at", ("k", 4_102_444_800_000), False),
    ("persist", ("k",), False),
]


DOWN_OPTIONS = {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}


@redoxide_only
@pytest.mark.parametrize(
    ("method", "args", "expected"), EXPIRY_CASES, ids=[c[0] for c in EXPIRY_CASES]
)
def test_expiry_methods_fail_open_when_server_is_down(
    mode: str, method: str, args: tuple[Any, ...], expected: Any
) -> None:
    options = {**DOWN_OPTIONS, "IGNORE_EXCEPTIONS": True}
    cache = _expiry_cache_class()(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": options})
    result = getattr(Ops(cache, mode), method)(*args)
    assert result == expected
    assert type(result) is type(expected)


@redoxide_only
@pytest.mark.parametrize(
    ("method", "args", "expected"), EXPIRY_CASES, ids=[c[0] for c in EXPIRY_CASES]
)
def test_expiry_methods_raise_without_ignore_exceptions(
    mode: str, method: str, args: tuple[Any, ...], expected: Any
) -> None:
    from redoxide.exceptions import ConnectionInterrupted

    cache = _expiry_cache_class()(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": DOWN_OPTIONS})
    with pytest.raises(ConnectionInterrupted):
        getattr(Ops(cache, mode), method)(*args)


# -- key patterns ------------------------------------------------------------------------------


# The mixin under test, whether or not RedisCache has taken it among its bases yet.
PatternsCache: type[Any] = (
    RedisCache
    if issubclass(RedisCache, PatternsMixin)
    else type("Cache", (PatternsMixin, RedisCache), {})
)


def test_patterns_fail_open_to_empty_results() -> None:
    options = {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}
    cache = PatternsCache(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": options})
    assert cache.keys("*") == []
    assert list(cache.iter_keys("*")) == []
    assert cache.delete_pattern("*") == 0

    async def scenario() -> None:
        assert await cache.akeys("*") == []
        assert [k async for k in cache.aiter_keys("*")] == []
        assert await cache.adelete_pattern("*") == 0

    asyncio.run(scenario())


# -- locks -------------------------------------------------------------------------------------


LockingCache = redoxide.RedisCache


def test_lock_errors_are_not_swallowed_by_ignore_exceptions(
    fresh_redis_server: RedisServer,
) -> None:
    cache = build_cache(fresh_redis_server.url, {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    locking = LockingCache(fresh_redis_server.url, {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    lock = locking.lock("job", blocking_timeout=0.1)
    assert isinstance(lock, Lock)
    fresh_redis_server.stop()
    assert cache.get("job", "missed") == "missed"  # the rest of the cache fails open
    with pytest.raises(ConnectionInterrupted):
        lock.acquire()
