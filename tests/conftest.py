"""Shared fixtures: real redis-server processes and redoxide caches on them.

Imports: tests/ is deliberately not a package (no __init__.py), so pytest's default
"prepend" import mode puts tests/ on sys.path and helpers import by bare module name:

    from redis_server import RedisServer, free_port
    from conftest import BACKEND, build_cache

The backend under test is the single constant BACKEND. Set REDOXIDE_TEST_BACKEND to run the
same suite against another backend with the same semantics, e.g.
REDOXIDE_TEST_BACKEND=django.core.cache.backends.redis.RedisCache (Django's builtin), which is
how the contract suites check themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from redis_server import RedisServer

BACKEND = os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide.RedisCache")
# The topology the Django contract runs on: standalone (default), cluster or sentinel.
TOPOLOGY = os.environ.get("REDOXIDE_TEST_TOPOLOGY", "standalone")
BUILTIN_BACKEND = "django.core.cache.backends.redis.RedisCache"

# Django cache parameters that live beside OPTIONS; make_cache() puts every other
# keyword argument into OPTIONS.
CACHE_PARAMS = frozenset({"TIMEOUT", "KEY_PREFIX", "VERSION", "KEY_FUNCTION", "OPTIONS"})

# The Django contract (test_contract.py) downloads and extracts Django's own tests here.
collect_ignore_glob = ["_django_contract/*"]

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=[],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        SECRET_KEY="redoxide-tests",
    )
    django.setup()


def is_redoxide() -> bool:
    """Return True when the backend under test is redoxide (not a reference backend)."""
    return BACKEND.startswith("redoxide.")


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


def build_cache(location: str | list[str], params: dict[str, Any] | None = None) -> Any:
    """Return a BACKEND instance built the way Django's CacheHandler builds one."""
    from django.utils.module_loading import import_string

    backend_cls = import_string(BACKEND)
    return backend_cls(location, dict(params or {}))


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Yield one redis-server shared by the whole session (flush it in your test)."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """Yield one 6-node cluster (3 primaries, 3 replicas) shared by the session."""
    from topologies import Cluster

    with Cluster() as running:
        yield running


@pytest.fixture(scope="session")
def sentinel_set() -> Iterator[Any]:
    """Yield one sentinel set (a primary, 2 replicas, 3 sentinels) shared by the session."""
    from topologies import SentinelSet

    with SentinelSet() as running:
        yield running


def topology_settings(topology: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """LOCATION and OPTIONS of a cache on `topology` (starting its servers if needed)."""
    if topology == "cluster":
        running = request.getfixturevalue("cluster")
        return {"LOCATION": running.urls[:2], "OPTIONS": {"CLUSTER": True}}
    if topology == "sentinel":
        running = request.getfixturevalue("sentinel_set")
        return {
            "LOCATION": f"redis://{running.service}/0",
            "OPTIONS": {"SENTINELS": running.sentinel_addresses},
        }
    if topology == "standalone":
        return {"LOCATION": request.getfixturevalue("redis_server").url}
    raise ValueError(f"unknown REDOXIDE_TEST_TOPOLOGY {topology!r}")


@pytest.fixture(scope="module")
def contract_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """LOCATION and OPTIONS for the Django contract: REDOXIDE_TEST_TOPOLOGY's servers."""
    return topology_settings(TOPOLOGY, request)


@pytest.fixture
def fresh_redis_server() -> Iterator[RedisServer]:
    """Yield a throwaway redis-server of this test's own (safe to kill, pause, restart)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[Any]:
    """Yield a redis-py client on redis_server (db 0) to inspect raw keys, values and TTLs."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_server.port, db=0)
    yield client
    client.close()


@pytest.fixture
def make_cache(redis_server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Return a factory of BACKEND instances; redis_server is flushed before the test.

    make_cache(location=None, **kwargs): location defaults to redis_server.url; the Django
    cache parameters TIMEOUT, KEY_PREFIX, VERSION, KEY_FUNCTION and OPTIONS are passed as
    such, every other keyword goes into OPTIONS, e.g.
    make_cache(KEY_PREFIX="p", SOCKET_TIMEOUT=0.5). Caches are closed after the test.
    """
    made: list[Any] = []

    def factory(location: str | list[str] | None = None, **kwargs: Any) -> Any:
        params: dict[str, Any] = {}
        options: dict[str, Any] = dict(kwargs.pop("OPTIONS", None) or {})
        for name, value in kwargs.items():
            if name in CACHE_PARAMS:
                params[name] = value
            else:
                options[name] = value
        if options:
            params["OPTIONS"] = options
        cache = build_cache(location if location is not None else redis_server.url, params)
        made.append(cache)
        return cache

    redis_server.flushall()
    yield factory
    for cache in made:
        cache.close()


@pytest.fixture
def cache(make_cache: Callable[..., Any]) -> Any:
    """Return a BACKEND instance on redis_server with default settings, on an empty server."""
    return make_cache()
