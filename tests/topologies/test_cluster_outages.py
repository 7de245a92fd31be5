"""Cluster nodes that are down or stalled: a typed error in time, healthy slots unaffected, one
timeout per fan-out however many nodes stall.

Tests that migrate slots on or pause servers use `own`, a cluster of the topology tests' own
(topologies/conftest.py); the session's `cluster` and `sentinel_set` are only read and written.
Tests marked "Regression test" come from a review of the topology routers and showed a bug
(fixed since); the other review cases are controls that pin down the behaviour the bugs were
measured against.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redoxide.exceptions import CacheError, CacheTimeout
from support.backend import build_cache, is_redoxide
from support.servers import Cluster
from support.topology import cluster_cache, name_on, owner_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


def test_cluster_down_fails_with_a_typed_error_in_time() -> None:
    own = Cluster().start()
    cache = build_cache(
        own.urls[:2],
        {"OPTIONS": {"CLUSTER": True, "SOCKET_TIMEOUT": 0.5, "SOCKET_CONNECT_TIMEOUT": 0.3}},
    )
    cache.set("k", 1)
    own.stop()
    start = time.monotonic()
    with pytest.raises(CacheError):
        cache.get("k")
    with pytest.raises(CacheError):
        asyncio.run(cache.aget("k"))
    # Each call tries its node, then asks every known node for the table once.
    assert time.monotonic() - start < 2 * (0.3 * 8 + 0.5)


# Regression test (review finding, fixed): re-discovery asks the known primaries in table order, a
# stalled one too, before any seed: after one call times out on a stalled primary, the next call
# for a HEALTHY slot waits out another full SOCKET_TIMEOUT inside CLUSTER SLOTS
def test_cluster_stalled_primary_does_not_slow_healthy_slots(own: Cluster) -> None:
    timeout = 1.0  # long enough that timeout / 2 is no race on a loaded host
    cache = cluster_cache(own.urls, SOCKET_TIMEOUT=timeout, SOCKET_CONNECT_TIMEOUT=timeout)
    router = cache._client
    router.slots.table_now()
    victim_port = int(router.slots.primaries[0].address.rsplit(":", 1)[1])
    bad = name_on(cache, victim_port, "stalled-bad")
    good = name_on(cache, victim_port, "stalled-good", on=False)
    cache.set(good, "ok")
    victim = own.node_for_port(victim_port)
    victim.pause()
    try:
        with pytest.raises(CacheTimeout):
            cache.get(bad)
        start = time.monotonic()
        assert cache.get(good) == "ok"
        healthy = time.monotonic() - start
    finally:
        victim.resume()
    assert healthy < timeout / 2, f"a healthy slot took {healthy:.2f} s"


# Regression test (review finding, fixed): mget's fan-out falls back to per-key calls on any
# CacheError, CacheTimeout included: get_many with one stalled primary waits out SOCKET_TIMEOUT
# twice (more with more keys before it), sync and async
def test_cluster_get_many_with_a_stalled_primary_costs_one_timeout(own: Cluster, mode: str) -> None:
    timeout = 1.0 if mode == "sync" else 1.01
    cache = cluster_cache(own.urls, SOCKET_TIMEOUT=timeout, SOCKET_CONNECT_TIMEOUT=timeout)
    names = [f"gm-stall-{i}" for i in range(30)]
    cache.set_many(dict.fromkeys(names, 1))
    victim = own.node_for_port(owner_port(cache, names[-1]))
    victim.pause()
    try:
        start = time.monotonic()
        with pytest.raises(CacheTimeout):
            if mode == "sync":
                cache.get_many(names)
            else:
                asyncio.run(cache.aget_many(names))
        took = time.monotonic() - start
    finally:
        victim.resume()
    assert took < 1.5 * timeout, f"get_many took {took:.2f} s for a {timeout} s timeout"


# Regression test (review finding, fixed): fanout_sync (src/client.rs) reads the nodes one after
# another, each with a full SOCKET_TIMEOUT: a sync set_many over k stalled primaries takes k
# timeouts (async: one)
def test_cluster_sync_fanout_over_two_stalled_primaries_costs_one_timeout(own: Cluster) -> None:
    timeout = 1.0
    cache = cluster_cache(own.urls, SOCKET_TIMEOUT=1.002, SOCKET_CONNECT_TIMEOUT=timeout)
    names = [f"fan-stall-{i}" for i in range(30)]
    cache.set_many(dict.fromkeys(names, 1))
    ports = sorted({owner_port(cache, name) for name in names})
    victims = [own.node_for_port(port) for port in ports[:2]]
    for victim in victims:
        victim.pause()
    try:
        start = time.monotonic()
        with pytest.raises(CacheTimeout):
            cache.set_many(dict.fromkeys(names, 2))
        took = time.monotonic() - start
    finally:
        for victim in victims:
            victim.resume()
    assert took < 1.5 * timeout, f"set_many took {took:.2f} s for a {timeout} s timeout"


# Review finding: under fail-open, one stalled primary turned a whole get_many into {}, so
# keys on healthy nodes missed too (every multi-slot read went to the database during a
# failover). Now only the stalled node's keys miss, within one timeout.
def test_fail_open_get_many_with_a_stalled_primary_returns_the_other_nodes_keys(
    own: Cluster, mode: str
) -> None:
    timeout = 1.003 if mode == "sync" else 1.004
    cache = cluster_cache(
        own.urls, SOCKET_TIMEOUT=timeout, SOCKET_CONNECT_TIMEOUT=timeout, IGNORE_EXCEPTIONS=True
    )
    names = [f"gm-open-{i}" for i in range(30)]
    cache.set_many({name: name for name in names})
    victim_port = owner_port(cache, names[-1])
    healthy = {name: name for name in names if owner_port(cache, name) != victim_port}
    assert healthy and len(healthy) < len(names)
    victim = own.node_for_port(victim_port)
    before = cache.stats()["fail_open_misses"]
    victim.pause()
    try:
        got = cache.get_many(names) if mode == "sync" else asyncio.run(cache.aget_many(names))
    finally:
        victim.resume()
    assert got == healthy
    assert cache.stats()["fail_open_misses"] >= before + 1
