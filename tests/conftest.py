"""Shared fixtures: real redis-server processes, redoxide caches on them, sync/async dispatch.

Layout: a folder per concern (contract/, api/, config/, values/, topologies/, reliability/,
security/, connections/, packaging/, tools/ for the benchmarks' own tools; unit/ for pure
logic without a server) and one support
package, support/ (servers, the backend under test, sync/async dispatch, network fakes,
secrets). Test files have no __init__.py and
every test file has a basename of its own, so pytest's default "prepend" import mode imports
each under its bare name. This directory is put on sys.path (below, and by prepend mode
itself), so tests import their helpers as

    from support.backend import BACKEND, build_cache
    from support.dispatch import Ops
    from support.servers import RedisServer, free_port

Fixtures live here only (never import from a conftest); a concern's own fixtures live in its
folder's conftest.py. Every ``mode`` test runs once through the sync methods and once through
their async twins (support/dispatch.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.backend import TOPOLOGY, build_cache, topology_settings
from support.dispatch import MODES, Ops
from support.secrecy import SECRET
from support.servers import Cluster, RedisServer, ReplicaSet, SentinelSet, shard

# Django cache parameters that live beside OPTIONS; make_cache() puts every other
# keyword argument into OPTIONS.
CACHE_PARAMS = frozenset({"TIMEOUT", "KEY_PREFIX", "VERSION", "KEY_FUNCTION", "OPTIONS"})

# The Django contract (contract/test_contract.py) downloads and extracts Django's own tests
# here.
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


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Yield one redis-server shared by the whole session (flush it in your test)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def fresh_redis_server() -> Iterator[RedisServer]:
    """Yield a throwaway redis-server of this test's own (safe to kill, pause, restart)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def auth_server() -> Iterator[RedisServer]:
    """Yield a server of this test's own with requirepass SECRET and an ACL user alice
    (password SECRET)."""
    with RedisServer(password=SECRET) as server:
        server.cli("ACL", "SETUSER", "alice", "on", f">{SECRET}", "~*", "+@all")
        yield server


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """Yield a server whose default user needs SECRET; alice may do anything, bob may not
    FLUSHDB and may only touch keys under allowed:*."""
    with RedisServer(password=SECRET) as server:
        server.cli("ACL", "SETUSER", "alice", "on", f">{SECRET}", "~*", "+@all")
        server.cli("ACL", "SETUSER", "bob", "on", f">{SECRET}", "~allowed:*", "+@all", "-flushdb")
        yield server


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """Yield one 6-node cluster (3 primaries, 3 replicas) shared by the session."""
    with Cluster() as running:
        yield running


@pytest.fixture(scope="session")
def sentinel_set() -> Iterator[SentinelSet]:
    """Yield one sentinel set (a primary, 2 replicas, 3 sentinels) shared by the session."""
    with SentinelSet() as running:
        yield running


@pytest.fixture(scope="module")
def replica_set() -> Iterator[tuple[RedisServer, list[RedisServer]]]:
    """Yield a primary and two replicas (no sentinels), for LOCATION lists."""
    with ReplicaSet() as running:
        yield running.primary, running.replicas


@pytest.fixture(scope="module")
def contract_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Return LOCATION and OPTIONS for the Django contract: REDOXIDE_TEST_TOPOLOGY's servers."""
    return topology_settings(TOPOLOGY, request)


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[Any]:
    """Yield a redis-py client on redis_server (db 0) to inspect raw keys, values and TTLs."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_server.port, db=0)
    yield client
    client.close()


# -- caches --------------------------------------------------------------------------------------


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


# -- sync/async dispatch -------------------------------------------------------------------------


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Return "sync" or "async": the test runs once with each (see support/dispatch.py)."""
    return str(request.param)


@pytest.fixture
def ops(cache: Any, mode: str) -> Ops:
    """Return the default cache's methods, called sync or through their async twins."""
    return Ops(cache, mode)


# -- order ---------------------------------------------------------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The packaging tests (clean release builds of the wheel and the sdist, minutes of CPU)
    go first: under pytest-xdist their group starts on one worker at once while the other
    workers take the rest, instead of becoming the run's tail. With REDOXIDE_SHARD=i/n
    (support.servers.shard) this process keeps every n-th test from the i-th."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("xdist_group") else 1)
    sharded = shard()
    if sharded is not None:
        index, count = sharded
        others = [item for at, item in enumerate(items) if at % count != index]
        config.hook.pytest_deselected(items=others)
        items[:] = items[index::count]
