"""Failovers, Sentinel and Cluster: traffic (sync and async) sees typed errors in time and
resumes, every acknowledged write reads back; writes move off a demoted primary; clear()
follows a failover.

Tests that migrate slots on or pause servers use `own`, a cluster of the topology tests' own
(topologies/conftest.py); the session's `cluster` and `sentinel_set` are only read and written.
Tests marked "Regression test" come from a review of the topology routers and showed a bug
(fixed since); the other review cases are controls that pin down the behaviour the bugs were
measured against.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from redoxide.exceptions import CacheError
from support.backend import build_cache, is_redoxide
from support.servers import Cluster, SentinelSet
from support.topology import cluster_cache, outcome

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


class Traffic:
    """A steady stream of sets and gets, from a thread (sync) and an event loop (async), that
    records each call's outcome and duration.

    Each side pauses a millisecond between calls: a stream that takes every free cycle of a
    2-core host starves the servers' own failure detection (cluster bus pings, sentinel
    hellos), so a failover under test would wait on the host rather than on the servers."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.stop = threading.Event()
        self.records: list[
            tuple[str, float, float, Any, str | None]
        ] = []  # mode, t0, t1, key, error
        self.acked: dict[str, int] = {}
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._sync, daemon=True),
            threading.Thread(target=lambda: asyncio.run(self._async()), daemon=True),
        ]

    def _record(
        self, mode: str, t0: float, key: str, value: int, error: BaseException | None
    ) -> None:
        with self._lock:
            self.records.append(
                (mode, t0, time.monotonic(), key, None if error is None else type(error).__name__)
            )
            if error is None:
                self.acked[key] = value

    def _sync(self) -> None:
        i = 0
        while not self.stop.is_set():
            key, i = f"s{i}", i + 1
            t0 = time.monotonic()
            try:
                self.cache.set(key, i)
                assert self.cache.get(key) == i
            except CacheError as exc:
                self._record("sync", t0, key, i, exc)
                time.sleep(0.02)
            else:
                self._record("sync", t0, key, i, None)
                time.sleep(0.001)

    async def _async(self) -> None:
        i = 0
        while not self.stop.is_set():
            key, i = f"a{i}", i + 1
            t0 = time.monotonic()
            try:
                await self.cache.aset(key, i)
                assert await self.cache.aget(key) == i
            except CacheError as exc:
                self._record("async", t0, key, i, exc)
                await asyncio.sleep(0.02)
            else:
                self._record("async", t0, key, i, None)
                await asyncio.sleep(0.001)

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(30)

    def ok_count(self) -> int:
        return sum(1 for r in self.records if r[4] is None)

    def wait_ok(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        start = self.ok_count()
        while self.ok_count() < start + count:
            assert time.monotonic() < deadline, "traffic did not make progress"
            time.sleep(0.01)

    def last_error_end(self) -> float | None:
        ends = [r[2] for r in self.records if r[4] is not None]
        return max(ends) if ends else None

    def first_success_after(self, mode: str, moment: float) -> float | None:
        times = [r[2] for r in self.records if r[0] == mode and r[1] >= moment and r[4] is None]
        return min(times) if times else None


def check_failover(
    traffic: Traffic, killed_at: float, timeout: float, bound: float
) -> dict[str, float]:
    """Errors were typed and in time; both modes resumed; every write acked after
    recovery reads back. Returns the seconds from the kill to the first success per mode."""
    resumed = {}
    for mode in ("sync", "async"):
        first = traffic.first_success_after(mode, killed_at)
        assert first is not None, f"{mode} traffic never resumed"
        resumed[mode] = first - killed_at
        assert resumed[mode] < bound, f"{mode} resumed after {resumed[mode]:.1f} s"
    for mode, t0, t1, _key, error in traffic.records:
        if error is not None:
            assert error in ("ConnectionInterrupted", "CacheTimeout", "ResponseError"), error
            # a set + a get, each bounded by the timeouts (+ one re-discovery)
            assert t1 - t0 < 3 * timeout + 1.0, f"{mode} call took {t1 - t0:.2f} s"
    return resumed


@pytest.mark.slow
def test_sentinel_failover_under_traffic() -> None:
    with SentinelSet() as sset:
        timeout = 0.5
        cache = build_cache(
            f"redis://{sset.service}/0",
            {
                "OPTIONS": {
                    "SENTINELS": sset.sentinel_addresses,
                    "SOCKET_TIMEOUT": timeout,
                    "SOCKET_CONNECT_TIMEOUT": timeout,
                }
            },
        )
        old_port = sset.current_primary_port()
        with Traffic(cache) as traffic:
            traffic.wait_ok(50, 10)
            killed_at = time.monotonic()
            sset.node_for_port(old_port).kill()
            sset.wait_for_new_primary(old_port)
            switched_at = time.monotonic()
            traffic.wait_ok(50, 15)
            recovered_at = time.monotonic()
        resumed = check_failover(traffic, killed_at, timeout, bound=30)
        # Writes resume within 10 s of the sentinel switch (measured: well under 1 s).
        assert recovered_at - switched_at < 10
        for mode in resumed:
            first = traffic.first_success_after(mode, killed_at)
            assert first is not None and first - switched_at < 10
        # Everything acknowledged after the switch is on the new primary.
        later = [r[3] for r in traffic.records if r[4] is None and r[1] > switched_at]
        assert later
        for key in later:
            assert cache.get(key) == traffic.acked[key]
        last_error = traffic.last_error_end() or switched_at
        assert last_error - switched_at < 10
        print(
            f"\nsentinel failover: switch {switched_at - killed_at:.2f} s after the kill; "
            f"last failed call ended {last_error - switched_at:+.2f} s from the switch; "
            f"first success sync +{resumed['sync']:.2f} s, async +{resumed['async']:.2f} s"
        )


@pytest.mark.slow
def test_cluster_failover_under_traffic() -> None:
    with Cluster() as own:
        timeout = 0.5
        options = {"CLUSTER": True, "SOCKET_TIMEOUT": timeout, "SOCKET_CONNECT_TIMEOUT": timeout}
        cache = build_cache(own.urls, {"OPTIONS": options})
        with Traffic(cache) as traffic:
            traffic.wait_ok(50, 10)
            victim = own.primaries()[0]
            victim_port = victim.port
            killed_at = time.monotonic()
            victim.kill()
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, (
                    "no replica was promoted; the cluster as a survivor sees it:\n"
                    + own.live_nodes()[0].cli("cluster", "nodes")
                )
                try:
                    own.wait_ok(timeout=0.2)
                    if len(own.primaries()) == 3:
                        break
                except RuntimeError:
                    pass
            promoted_at = time.monotonic()
            traffic.wait_ok(100, 15)
            recovered_at = time.monotonic()
        check_failover(traffic, killed_at, timeout, bound=promoted_at - killed_at + 15)
        assert recovered_at - promoted_at < 10
        later = [r[3] for r in traffic.records if r[4] is None and r[1] > promoted_at]
        assert later
        for key in later:
            assert cache.get(key) == traffic.acked[key]
        assert victim_port not in [n.port for n in own.primaries()]
        last_error = traffic.last_error_end() or promoted_at
        assert last_error - promoted_at < 10
        errors = sum(1 for r in traffic.records if r[4] is not None)
        print(
            f"\ncluster failover: promotion {promoted_at - killed_at:.2f} s after the kill; "
            f"{errors} failed calls, the last ended {last_error - promoted_at:+.2f} s from "
            "the promotion"
        )


@pytest.mark.slow
def test_sentinel_manual_failover_moves_writes_off_the_demoted_primary() -> None:
    # SENTINEL FAILOVER: the old primary stays up, becomes a replica; a client still talking to
    # it gets its connection killed or a READONLY reply, and must follow to the new primary.
    with SentinelSet() as sset:
        cache = build_cache(
            f"redis://{sset.service}/0",
            {"OPTIONS": {"SENTINELS": sset.sentinel_addresses, "SOCKET_TIMEOUT": 0.5}},
        )
        cache.set("before", 1)
        assert asyncio.run(cache.aget("before")) == 1
        old_port = sset.current_primary_port()
        sset.sentinels[0].cli("sentinel", "failover", sset.service)
        new_primary = sset.node_for_port(sset.wait_for_new_primary(old_port))
        deadline = time.monotonic() + 30
        while new_primary.info("replication").get("role") != "master":
            assert time.monotonic() < deadline, "new primary not promoted"
            time.sleep(0.05)
        # Wait until the old primary has really been turned into a replica.
        old = sset.node_for_port(old_port)
        while old.info("replication").get("role") != "slave":
            assert time.monotonic() < deadline, "old primary not demoted"
            time.sleep(0.05)
        failures = 0
        for i in range(20):
            try:
                cache.set(f"after{i}", i)
                assert asyncio.run(cache.aset(f"aafter{i}", i)) is None
            except CacheError:
                failures += 1
        assert failures <= 2  # at most the calls that met the switch itself
        raw_new = new_primary.cli("get", cache.make_key("after19"))
        assert raw_new == "19"
        assert cache.get("after19") == 19


# Regression test (review finding, fixed): ClusterRouter._every_primary (FLUSHDB, DBSIZE, KEYS)
# never marks the table suspect: after a failover clear() keeps sending FLUSHDB to the demoted
# primary (READONLY) for as long as no key call happens to hit a MOVED
def test_cluster_clear_recovers_after_a_failover(own: Cluster) -> None:
    cache = cluster_cache(own.urls[:1], SOCKET_TIMEOUT=2.13)
    assert cache.clear() is True  # the router learns the table now
    old = own.primaries()[0]
    replica_port = int(old.info("replication")["slave0"].split("port=")[1].split(",")[0])
    replica = own.node_for_port(replica_port)
    replica.cli("cluster", "failover")
    deadline = time.monotonic() + 20
    while own.role(replica) != "master" or own.role(old) != "slave":
        assert time.monotonic() < deadline, "manual failover did not happen"
        time.sleep(0.05)
    own.wait_ok()
    results = []
    for _ in range(4):
        results.append(outcome(cache.clear))
        time.sleep(0.1)
    assert results[-1] == ("ok", True), results
