"""Fixtures of the reliability tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from support.servers import RedisServer


@pytest.fixture
def paused_guard(fresh_redis_server: RedisServer) -> Iterator[RedisServer]:
    """Yield fresh_redis_server and make sure it is resumed whatever the test does."""
    try:
        yield fresh_redis_server
    finally:
        with contextlib.suppress(ProcessLookupError, RuntimeError):
            fresh_redis_server.resume()
