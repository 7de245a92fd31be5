"""Fixtures of the near-cache tests: caches with NEAR_CACHE on, and a second client that
writes (helpers are in support/near.py)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.backend import build_cache
from support.near import near_options
from support.servers import RedisServer


@pytest.fixture
def make_near(redis_server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Return a factory of caches with the near cache on, each with a KEY_PREFIX of its own
    (so each has its own store and counters); the server is flushed first."""

    def factory(
        location: str | None = None, near: dict[str, Any] | None = None, **opts: Any
    ) -> Any:
        params: dict[str, Any] = {"KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}"}
        for name in ("KEY_FUNCTION", "VERSION", "TIMEOUT"):
            if name in opts:
                params[name] = opts.pop(name)
        params["OPTIONS"] = {"NEAR_CACHE": near if near is not None else near_options(), **opts}
        return build_cache(location or redis_server.url, params)

    redis_server.flushall()
    yield factory


@pytest.fixture
def writer(redis_server: RedisServer) -> Iterator[Any]:
    """A redis-py client on redis_server: the other process that writes."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_server.port, db=0)
    yield client
    with contextlib.suppress(Exception):
        client.close()
