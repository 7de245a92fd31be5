"""Fixtures of the near-cache tests: a server of their own, caches with NEAR_CACHE on, a
second client that writes, and a proxy that can hold a fill's reply back (helpers are in
support/near.py).

Near caches live for the process (one per configuration) and keep a tracking connection and
a database marker key (one of the cache's own names) on their server: the tests here use a
server of this folder's own, and every cache a test makes stops tracking (and its markers are
deleted) when the test ends, so no other test sees their traffic or keys.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.backend import build_cache
from support.near import near_options, stop_tracking
from support.netfakes import CountingProxy
from support.servers import RedisServer


@pytest.fixture(scope="module")
def near_server() -> Iterator[RedisServer]:
    """Yield a redis-server of the near-cache tests' own (flush it in your test)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def near_proxy(near_server: RedisServer) -> Iterator[CountingProxy]:
    """A proxy in front of near_server (request it before make_near, so it outlives the caches
    made on it): ``make_near(near_proxy.url)``, then ``near_proxy.hold(b"PTTL")`` holds the
    next fill's reply (GET and PTTL) in the proxy until ``near_proxy.release()``."""
    with CountingProxy(near_server.port) as proxy:
        yield proxy


@pytest.fixture
def make_near(near_server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Return a factory of caches with the near cache on, each with a KEY_PREFIX of its own
    (so each has its own store and counters); the server is flushed first."""
    made: list[Any] = []

    def factory(
        location: str | None = None, near: dict[str, Any] | None = None, **opts: Any
    ) -> Any:
        params: dict[str, Any] = {"KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
        for name in ("KEY_PREFIX", "KEY_FUNCTION", "VERSION", "TIMEOUT"):
            if name in opts:
                params[name] = opts.pop(name)
        params["OPTIONS"] = {"NEAR_CACHE": near if near is not None else near_options(), **opts}
        cache = build_cache(location or near_server.url, params)
        made.append(cache)
        return cache

    near_server.flushall()
    yield factory
    for cache in made:
        stop_tracking(cache)


@pytest.fixture
def writer(near_server: RedisServer) -> Iterator[Any]:
    """A redis-py client on near_server: the other process that writes."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=near_server.port, db=0)
    yield client
    with contextlib.suppress(Exception):
        client.close()
