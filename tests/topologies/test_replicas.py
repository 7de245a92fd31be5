"""Read replicas (a LOCATION list, and the replicas of Sentinel): reads go to replicas unless
READ_FROM_REPLICAS is off, a replica that is down or answers an error is skipped for the
primary, and incr's fallback reads the primary.

Tests marked "Regression test" come from a review of the topology routers and showed a bug
(fixed since); the other review cases are controls that pin down the behaviour the bugs were
measured against.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.backend import build_cache, is_redoxide
from support.servers import RedisServer, ReplicaSet, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


def wait_replicated(cache: Any) -> None:
    """Wait until every replica has what the primary has (WAIT on the primary)."""
    cache.client.execute("WAIT", 2, 2000)


def test_location_list_reads_from_replicas(
    replica_set: tuple[RedisServer, list[RedisServer]],
) -> None:
    primary, replicas = replica_set
    cache = build_cache([primary.url] + [r.url for r in replicas], {})
    cache.set("rep", "v")
    wait_replicated(cache)

    def gets(server: RedisServer) -> int:
        stats = server.info("commandstats").get("cmdstat_get", "calls=0")
        return int(stats.split(",")[0].split("=")[1])

    before = [gets(s) for s in (primary, *replicas)]
    assert [cache.get("rep") for _ in range(6)] == ["v"] * 6
    assert asyncio.run(cache.aget_many(["rep"])) == {"rep": "v"}
    after = [gets(s) for s in (primary, *replicas)]
    assert after[0] == before[0]  # nothing read from the primary
    assert after[1] > before[1] and after[2] > before[2]  # both replicas used


def test_read_from_replicas_false_keeps_reads_on_the_primary(
    replica_set: tuple[RedisServer, list[RedisServer]],
) -> None:
    primary, replicas = replica_set
    cache = build_cache(
        [primary.url] + [r.url for r in replicas], {"OPTIONS": {"READ_FROM_REPLICAS": False}}
    )
    cache.set("rep2", "v")
    before = primary.info("commandstats").get("cmdstat_get", "calls=0")
    assert cache.get("rep2") == "v"
    assert primary.info("commandstats").get("cmdstat_get") != before


def test_a_replica_that_is_down_is_skipped(mode: str) -> None:
    primary = RedisServer().start()
    replica = RedisServer("--replicaof", "127.0.0.1", str(primary.port)).start()
    try:
        cache = build_cache(
            [primary.url, replica.url],
            {"OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}},
        )
        cache.set("k", "v")
        replica.stop()

        def get() -> Any:
            if mode == "sync":
                return cache.get("k")
            return asyncio.run(cache.aget("k"))

        start = time.monotonic()
        assert get() == "v"  # refused by the replica, answered by the primary
        assert time.monotonic() - start < 1.5
        start = time.monotonic()
        assert [get() for _ in range(5)] == ["v"] * 5  # the replica is left out for a while
        assert time.monotonic() - start < 1.0
    finally:
        replica.stop()
        primary.stop()


@pytest.fixture
def lagging_pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and one replica (replica-serve-stale-data off on request, see the tests)."""
    with ReplicaSet(replicas=1) as running:
        yield running.primary, running.replicas[0]


def cut_replica_link(replica: RedisServer) -> None:
    """The replica loses its primary (a network cut or a primary restart, as it sees it)."""
    replica.cli("replicaof", "127.0.0.1", str(free_port()))


# Regression test (review finding, fixed): ReplicaRouter._read falls back to the primary only on
# ConnectionInterrupted: a replica's error reply (MASTERDOWN with replica-serve-stale-data no,
# LOADING while it resyncs) reaches get()/get_many() as ResponseError, which IGNORE_EXCEPTIONS
# cannot hide
def test_replica_error_reply_falls_back_to_the_primary(
    lagging_pair: tuple[RedisServer, RedisServer], mode: str
) -> None:
    primary, replica = lagging_pair
    replica.cli("config", "set", "replica-serve-stale-data", "no")
    cache = build_cache([primary.url, replica.url], {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    cache.set("k", "v")
    cut_replica_link(replica)
    if mode == "sync":
        assert cache.get("k") == "v"
    else:
        assert asyncio.run(cache.aget("k")) == "v"


# Regression test (review finding, fixed): _incr's read-add-write fallback (a pickled float, a
# huge int) reads with c.get, which a router sends to a replica: a lagging replica's old value is
# added to and written to the primary
def test_incr_fallback_reads_the_primary_not_a_replica(
    lagging_pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = lagging_pair
    cache = build_cache([primary.url, replica.url], {})
    cache.set("n", 100.5)
    cache.client.execute("WAIT", 1, 2000)
    cut_replica_link(replica)  # from now on the replica lags
    cache.set("n", 1.5)
    assert cache.incr("n") == 2.5
