"""Fixtures of the tests of the project's own tools: the benchmarks' delay proxy
(benchmarks/fullstack_proxy.py, put on sys.path here) in front of a server of its own."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.servers import RedisServer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from fullstack_proxy import DelayProxy  # noqa: E402  (found on the path set just above)


@pytest.fixture(scope="module")
def proxied_server() -> Iterator[RedisServer]:
    """A server of this folder's own: its client count belongs to these tests alone."""
    with RedisServer() as started:
        yield started


@pytest.fixture
def proxy(proxied_server: RedisServer) -> Iterator[DelayProxy]:
    """The delay proxy, 2 ms each way, in front of `proxied_server`."""
    started = DelayProxy(proxied_server.port, 2.0).start()
    yield started
    started.stop()
