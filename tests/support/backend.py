"""The backend under test: its dotted path, how to build it, its exceptions, and plugins.

The backend is the single constant BACKEND. Set REDOXIDE_TEST_BACKEND to run the same suite
against another backend with the same semantics, e.g.
REDOXIDE_TEST_BACKEND=django.core.cache.backends.redis.RedisCache (Django's builtin), which is
how the contract suites check themselves. REDOXIDE_TEST_TOPOLOGY (standalone, cluster or
sentinel) chooses the servers Django's contract runs on.
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

BACKEND = os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide.RedisCache")
# The topology the Django contract runs on: standalone (default), cluster or sentinel.
TOPOLOGY = os.environ.get("REDOXIDE_TEST_TOPOLOGY", "standalone")
BUILTIN_BACKEND = "django.core.cache.backends.redis.RedisCache"
# REDOXIDE_TEST_NEAR_CACHE=1 runs the Django contract with every key near-cached.
NEAR_CACHE = os.environ.get("REDOXIDE_TEST_NEAR_CACHE") == "1"


def is_redoxide() -> bool:
    """Return True when the backend under test is redoxide (not a reference backend)."""
    return BACKEND.startswith("redoxide.")


def build_cache(location: str | list[str], params: dict[str, Any] | None = None) -> Any:
    """Return a BACKEND instance built the way Django's CacheHandler builds one."""
    from django.utils.module_loading import import_string

    backend_cls = import_string(BACKEND)
    return backend_cls(location, dict(params or {}))


def topology_settings(topology: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Return LOCATION and OPTIONS of a cache on `topology` (see _topology_settings), with the
    near cache on every key under REDOXIDE_TEST_NEAR_CACHE=1."""
    settings = _topology_settings(topology, request)
    if NEAR_CACHE:
        near = {"PREFIXES": [""], "MAX_STALE_MS": 200}
        settings["OPTIONS"] = {**settings.get("OPTIONS", {}), "NEAR_CACHE": near}
    return settings


def _topology_settings(topology: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Return LOCATION and OPTIONS of a cache on `topology`, starting its servers if needed.

    `topology` is standalone, cluster, sentinel or replicas (a LOCATION list: the primary,
    then its replicas, with reads kept on the primary so a read right after a write sees it).
    """
    if topology == "cluster":
        running = request.getfixturevalue("cluster")
        return {"LOCATION": running.urls[:2], "OPTIONS": {"CLUSTER": True}}
    if topology == "sentinel":
        running = request.getfixturevalue("sentinel_set")
        return {
            "LOCATION": f"redis://{running.service}/0",
            "OPTIONS": {"SENTINELS": running.sentinel_addresses},
        }
    if topology == "replicas":
        primary, replicas = request.getfixturevalue("replica_set")
        return {
            "LOCATION": [primary.url] + [r.url for r in replicas],
            "OPTIONS": {"READ_FROM_REPLICAS": False},
        }
    if topology == "standalone":
        return {"LOCATION": request.getfixturevalue("redis_server").url}
    raise ValueError(f"unknown REDOXIDE_TEST_TOPOLOGY {topology!r}")


def topology_cache(topology: str, request: pytest.FixtureRequest, **options: Any) -> Any:
    """Return a BACKEND instance on `topology` (see topology_settings) with extra OPTIONS."""
    settings = topology_settings(topology, request)
    settings["OPTIONS"] = {**settings.get("OPTIONS", {}), **options}
    return build_cache(settings.pop("LOCATION"), settings)


# -- exceptions ---------------------------------------------------------------------------------


def backend_response_error() -> type[Exception]:
    """Return the exception the backend raises for a Redis error reply (e.g. INCR on text)."""
    if is_redoxide():
        from redoxide.exceptions import ResponseError

        return ResponseError
    from redis.exceptions import ResponseError as RedisPyResponseError

    return RedisPyResponseError


def backend_incr_type_error() -> type[Exception]:
    """Return the exception incr()/decr() raise for a stored value that is not a number.

    Django's RedisCacheTests expects redis-py's ResponseError: the builtin sends INCR and the
    server refuses a pickled value. redoxide answers that refusal like django-redis does, by
    reading, adding and writing back (so pickled floats can be incremented), which makes
    incr(None) raise Python's own TypeError, the default of Django's BaseCacheTests.
    """
    if is_redoxide():
        return TypeError
    return backend_response_error()


def backend_errors() -> SimpleNamespace:
    """Return the exception classes of the backend under test.

    For a reference backend (Django's builtin RedisCache, used while redoxide is being built)
    the closest redis-py classes stand in, so the suite can check itself.
    """
    if is_redoxide():
        from redoxide import exceptions as rx

        return SimpleNamespace(
            CacheError=rx.CacheError,
            ConnectionInterrupted=rx.ConnectionInterrupted,
            CacheTimeout=rx.CacheTimeout,
            ResponseError=rx.ResponseError,
            SerializationError=rx.SerializationError,
            InternalError=rx.InternalError,
        )
    import pickle

    import redis.exceptions as rpy

    return SimpleNamespace(
        CacheError=Exception,
        ConnectionInterrupted=rpy.ConnectionError,
        CacheTimeout=rpy.TimeoutError,
        ResponseError=rpy.ResponseError,
        SerializationError=pickle.UnpicklingError,
        InternalError=None,
    )


def assert_startup_error(location: Any, options: Any, *names: str) -> ImproperlyConfigured:
    """The cache's first call raises ImproperlyConfigured naming each of `names`, without
    touching the network (LOCATION points at a port nothing listens on). Building it does not
    raise: Django's own checks build every cache before redoxide's checks can report."""
    from redoxide.exceptions import ConfigurationError

    start = time.monotonic()
    with pytest.raises(ImproperlyConfigured) as info:
        build_cache(location, {"OPTIONS": options}).get("k")
    assert time.monotonic() - start < 0.5
    assert isinstance(info.value, ConfigurationError)
    for name in names:
        assert name in str(info.value), str(info.value)
    return info.value


def raw_client(port: int, db: int = 0, password: str | None = None) -> Any:
    """Return a redis-py client (raw bytes, no decoding) to inspect what the backend stored."""
    import redis

    return redis.Redis(host="127.0.0.1", port=port, db=db, password=password)


# -- plugins, importable by dotted path ("support.backend.NAME") --------------------------------


def custom_key_func(key: str, key_prefix: str, version: int) -> str:
    """Build keys as "custom|prefix|version|key" (a layout the default never makes)."""
    return f"custom|{key_prefix}|{version}|{key}"


class JSONSerializer:
    """A minimal serializer with dumps/loads, writing compact JSON."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)
