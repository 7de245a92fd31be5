"""Fixtures of the topology tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.servers import Cluster


@pytest.fixture(scope="session")
def own() -> Iterator[Cluster]:
    """Yield a cluster of the topology tests' own, safe to migrate slots on and pause (a long
    node timeout, so a primary paused for a second is not failed over)."""
    with Cluster(node_timeout_ms=4000) as running:
        yield running
