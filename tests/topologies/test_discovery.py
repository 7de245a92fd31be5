"""Discovery of a topology (CLUSTER SLOTS, sentinel queries): it never blocks the event loop,
runs once for concurrent callers, and fails with a typed error when nothing answers.

Tests marked "Regression test" come from a review of the topology routers and showed a bug
(fixed since); the other review cases are controls that pin down the behaviour the bugs were
measured against.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any

import pytest
from redoxide.exceptions import CacheError
from support.backend import build_cache, is_redoxide
from support.netfakes import stalled_listener
from support.servers import Cluster, free_port
from support.topology import cluster_cache, commandstat

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


async def max_loop_gap(work: Awaitable[Any]) -> float:
    """Run `work` beside a 10 ms ticker; return the longest the event loop went without it."""
    gaps: list[float] = []
    done = False

    async def tick() -> None:
        last = time.monotonic()
        while not done:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.03)
    with contextlib.suppress(CacheError):
        await work
    done = True
    await ticker
    return max(gaps)


# Regression test (review finding, fixed): keys/iter_keys/delete_pattern (and clear with
# CLEAR_PREFIX_ONLY) get their nodes from the sync scan_nodes(), whose first-use / after-failure
# discovery blocks the event loop (here for a seed's whole SOCKET_TIMEOUT)
def test_cluster_async_key_scan_does_not_block_the_event_loop(cluster: Cluster) -> None:
    with stalled_listener() as stall:
        seeds = [f"redis://127.0.0.1:{stall.getsockname()[1]}", cluster.urls[0]]
        cache = cluster_cache(seeds, SOCKET_TIMEOUT=1.0, SOCKET_CONNECT_TIMEOUT=1.0)
        gap = asyncio.run(max_loop_gap(cache.akeys("nothing-*")))
    assert gap < 0.5, f"the event loop was blocked for {gap:.2f} s"


def test_cluster_async_get_discovery_does_not_block_the_event_loop(cluster: Cluster) -> None:
    # Control for the test above: aget's discovery is awaited, so the loop keeps running.
    with stalled_listener() as stall:
        seeds = [f"redis://127.0.0.1:{stall.getsockname()[1]}", cluster.urls[0]]
        cache = cluster_cache(seeds, SOCKET_TIMEOUT=1.01, SOCKET_CONNECT_TIMEOUT=1.01)
        gap = asyncio.run(max_loop_gap(cache.aget("x")))
    assert gap < 0.5, f"the event loop was blocked for {gap:.2f} s"


# Regression test (review finding, fixed): async discovery (ClusterRouter.relearn /
# SentinelPrimary.primary_now, awaited) has no single-flight guard: every task that finds the table
# missing or suspect runs its own CLUSTER SLOTS, so a burst of N requests after a failure sends N
# (the sync path has a lock)
def test_cluster_async_discovery_runs_once_for_concurrent_callers(cluster: Cluster) -> None:
    # A slow discovery (the first seed does not answer, as in an outage) keeps every caller
    # of the burst waiting on its own CLUSTER SLOTS.
    def slots_calls() -> int:
        return sum(commandstat(node, "cluster|slots") for node in cluster.live_nodes())

    with stalled_listener() as stall:
        seeds = [f"redis://127.0.0.1:{stall.getsockname()[1]}", cluster.urls[0]]
        cache = cluster_cache(seeds, SOCKET_TIMEOUT=0.42, SOCKET_CONNECT_TIMEOUT=0.42)
        before = slots_calls()

        async def main() -> list[Any]:
            return await asyncio.gather(*(cache.aget(f"herd{i}") for i in range(50)))

        assert asyncio.run(main()) == [None] * 50
    calls = slots_calls() - before
    assert calls <= 2, f"{calls} CLUSTER SLOTS for one burst of 50 agets"


# Regression test (review finding, fixed): SentinelPrimary.primary_now, awaited, has no
# single-flight guard: 50 concurrent first calls ask the sentinels 50 times
def test_sentinel_async_discovery_runs_once_for_concurrent_callers(sentinel_set: Any) -> None:
    with stalled_listener() as stall:
        sentinels = [stall.getsockname(), *sentinel_set.sentinel_addresses]
        cache = build_cache(
            f"redis://{sentinel_set.service}/0",
            {"OPTIONS": {"SENTINELS": sentinels, "SOCKET_TIMEOUT": 0.43}},
        )
        router = cache._client
        runs = []
        discover = router.primary._discover

        def counted() -> Any:
            runs.append(1)
            return discover()

        router.primary._discover = counted  # type: ignore[method-assign]

        async def main() -> list[Any]:
            return await asyncio.gather(*(cache.aget(f"herd{i}") for i in range(50)))

        assert asyncio.run(main()) == [None] * 50
    assert len(runs) <= 2, f"{len(runs)} discoveries (each asking the sentinels) for one burst"


def test_sentinel_with_no_reachable_sentinel_is_a_typed_error() -> None:

    cache = build_cache(
        "redis://mymaster/0",
        {
            "OPTIONS": {
                "SENTINELS": [("127.0.0.1", free_port()), ("127.0.0.1", free_port())],
                "SOCKET_CONNECT_TIMEOUT": 0.3,
            }
        },
    )
    with pytest.raises(CacheError, match="no sentinel could name the primary of 'mymaster'"):
        cache.get("k")
    with pytest.raises(CacheError, match="no sentinel"):
        asyncio.run(cache.aget("k"))
