"""Review of the topology routers (_topology.py): cases a site moving from django-redis to a
Cluster, Sentinel or replica setup will meet. Each test marked "Regression test" showed a bug
(fixed since); the others are controls that pin down the behaviour the bugs were measured
against.

Servers are real (loopback, stopped by pid). Tests that reshape or pause servers use this
module's own cluster; the session's `cluster` / `sentinel_set` are only read and written.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from conftest import build_cache, is_redoxide
from redis_server import RedisServer, free_port
from redoxide._redoxide import key_slot
from redoxide._topology import RETRY_PAUSE
from redoxide.exceptions import CacheError, CacheTimeout, ResponseError
from topologies import Cluster

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


# -- helpers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own() -> Iterator[Cluster]:
    """A cluster of this module's own, safe to migrate slots on and pause (a long node timeout,
    so a primary paused for a second is not failed over)."""
    with Cluster(node_timeout_ms=4000) as running:
        yield running


def cluster_cache(urls: list[str], **options: Any) -> Any:
    """A cluster cache; a distinct SOCKET_TIMEOUT gives it a router (and node clients) of its
    own, with nothing learnt yet."""
    return build_cache(urls, {"OPTIONS": {"CLUSTER": True, **options}})


def owner_port(cache: Any, name: str) -> int:
    """The port of the primary the cache's router sends `name` to (table learnt first)."""
    router = cache._client
    router._table_now()
    return int(router._table[key_slot(cache.make_key(name))].address.rsplit(":", 1)[1])


def name_on(cache: Any, port: int, prefix: str, *, on: bool = True) -> str:
    """A key name whose slot the router maps to the node on `port` (or, on=False, elsewhere)."""
    for i in range(10_000):
        name = f"{prefix}{i}"
        if (owner_port(cache, name) == port) is on:
            return name
    raise AssertionError("no such key")


def node_id(node: RedisServer) -> str:
    return node.cli("cluster", "myid")


def migrate(cluster: Cluster, slot: int, keys: list[str], *, finish: bool) -> RedisServer:
    """Move `slot` (and `keys`) to another primary; finish=False stops half-way (source
    MIGRATING, target IMPORTING, keys moved: the source then answers ASK). Returns the target."""
    source = cluster.primary_of_slot(slot)
    target = next(node for node in cluster.primaries() if node is not source)
    target.cli("cluster", "setslot", str(slot), "importing", node_id(source))
    source.cli("cluster", "setslot", str(slot), "migrating", node_id(target))
    for key in keys:
        source.cli("migrate", "127.0.0.1", str(target.port), key, "0", "5000")
    if finish:
        finish_migration(cluster, slot, target)
    return target


def finish_migration(cluster: Cluster, slot: int, target: RedisServer) -> None:
    target_id = node_id(target)
    for node in cluster.primaries():
        node.cli("cluster", "setslot", str(slot), "node", target_id)


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


def stalled_listener() -> socket.socket:
    """A loopback port that takes connections (the kernel's backlog) and never answers: a
    node that is partitioned or frozen, as a client sees it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def commandstat(node: RedisServer, name: str) -> int:
    stats = node.info("commandstats").get(f"cmdstat_{name}", "calls=0")
    return int(stats.split(",")[0].split("=")[1])


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except Exception as exc:  # the type is what is compared
        return ("raised", type(exc).__name__)


# -- cluster: resharding -----------------------------------------------------------------------


# Regression test (review finding, fixed): ClusterRouter.pipeline treats ASK like MOVED: it re-
# learns the (unchanged) table and re-sends without ASKING, 6 times, then raises
# ResponseError('ASK ...'); set_many, multi-key delete_many and touch(timeout=None) all go through
# it, so they fail mid-resharding
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("op", ["set_many", "delete_many", "touch"])
def test_cluster_pipelined_calls_follow_ask_during_resharding(
    own: Cluster, op: str, mode: str
) -> None:
    cache = cluster_cache(own.urls[:1])
    name = f"ask-{op}-{mode}"
    cache.set(name, "before", timeout=60)
    made = cache.make_key(name)
    slot = key_slot(made)
    target = migrate(own, slot, [made], finish=False)
    try:
        assert cache.get(name) == "before"  # single-key calls do follow ASK (control)

        async def run() -> Any:
            if op == "set_many":
                return await cache.aset_many({name: "after"})
            if op == "delete_many":
                return await cache.adelete_many([name, f"{name}-elsewhere"])
            return await cache.atouch(name, None)

        if mode == "async":
            asyncio.run(run())
        elif op == "set_many":
            cache.set_many({name: "after"})
        elif op == "delete_many":
            cache.delete_many([name, f"{name}-elsewhere"])
        else:
            assert cache.touch(name, None) is True
        expected = {"set_many": "after", "delete_many": None, "touch": "before"}[op]
        assert cache.get(name) == expected
    finally:
        finish_migration(own, slot, target)


# Regression test (review finding, fixed): after a MOVED in one node's part,
# ClusterRouter.pipeline / _apipeline re-send every part, including those already applied: INCR
# counted twice, DEL's summed count too low
@pytest.mark.parametrize("what", ["incr", "del-count"])
def test_cluster_pipeline_retry_does_not_reapply_applied_commands(own: Cluster, what: str) -> None:
    cache = cluster_cache(own.urls[:1], SOCKET_TIMEOUT=2.11 if what == "incr" else 2.12)
    cache.get("warm-up")  # the router learns the slot table now
    first = f"reapply-{what}-a"
    port = owner_port(cache, first)
    moving = name_on(cache, port, f"reapply-{what}-b", on=False)
    a, b = cache.make_key(first), cache.make_key(moving)
    cache.client.execute("DEL", a)
    cache.client.execute("DEL", b)
    if what == "del-count":
        cache.set_many({first: 1, moving: 2})
    # The slot of `moving` changes owner behind the router's back (a finished resharding).
    migrate(own, key_slot(b), [b] if what == "del-count" else [], finish=True)
    if what == "incr":
        replies = cache.client.pipeline(("INCR", a), ("SET", b, "x"))
        assert replies == [1, True]
        assert cache.client.execute("GET", a) == b"1"
    else:
        assert cache.client.execute("DEL", a, b) == 2


# -- cluster: partitions, stalls, failover ------------------------------------------------------


# Regression test (review finding, fixed): re-discovery asks the known primaries in table order, a
# stalled one too, before any seed: after one call times out on a stalled primary, the next call
# for a HEALTHY slot waits out another full SOCKET_TIMEOUT inside CLUSTER SLOTS
def test_cluster_stalled_primary_does_not_slow_healthy_slots(own: Cluster) -> None:
    timeout = 0.33
    cache = cluster_cache(own.urls, SOCKET_TIMEOUT=timeout, SOCKET_CONNECT_TIMEOUT=timeout)
    router = cache._client
    router._table_now()
    victim_port = int(router._primaries[0].address.rsplit(":", 1)[1])
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
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cluster_get_many_with_a_stalled_primary_costs_one_timeout(own: Cluster, mode: str) -> None:
    timeout = 0.3 if mode == "sync" else 0.31
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
    timeout = 0.3
    cache = cluster_cache(own.urls, SOCKET_TIMEOUT=0.302, SOCKET_CONNECT_TIMEOUT=timeout)
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


# Regression test (review finding, fixed): the sync ClusterRouter.pipeline retries TRYAGAIN /
# CLUSTERDOWN with no pause (_call and _apipeline sleep RETRY_PAUSE): its 5 retries are spent in
# about a millisecond, so set_many / delete_many fail on a blip that set() and aset_many() wait
# out
def test_cluster_sync_pipeline_pauses_before_retrying_clusterdown(own: Cluster) -> None:
    cache = cluster_cache(own.urls[:1], SOCKET_TIMEOUT=2.16)
    name = "blip"
    slot = key_slot(cache.make_key(name))
    cache.set(name, 0)  # the router learns the table now
    owner = own.primary_of_slot(slot)
    for node in own.live_nodes():
        node.cli("cluster", "delslots", str(slot))  # nobody serves it: CLUSTERDOWN
    try:
        start = time.monotonic()
        with pytest.raises(ResponseError, match=r"(?i)clusterdown"):
            cache.set(name, 1)
        single = time.monotonic() - start
        start = time.monotonic()
        with pytest.raises(ResponseError, match=r"(?i)clusterdown"):
            cache.set_many({name: 1})
        many = time.monotonic() - start
    finally:
        owner.cli("cluster", "addslots", str(slot))
        own.wait_ok()
    assert single >= 4 * RETRY_PAUSE  # control: set() pauses between its retries
    assert many >= 4 * RETRY_PAUSE, f"set_many gave up after {many * 1000:.1f} ms"


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


# -- cluster: async discovery ------------------------------------------------------------------


# Regression test (review finding, fixed): keys/iter_keys/delete_pattern (and clear with
# CLEAR_PREFIX_ONLY) get their nodes from the sync scan_nodes(), whose first-use / after-failure
# discovery blocks the event loop (here for a seed's whole SOCKET_TIMEOUT)
def test_cluster_async_key_scan_does_not_block_the_event_loop(cluster: Cluster) -> None:
    with stalled_listener() as stall:
        seeds = [f"redis://127.0.0.1:{stall.getsockname()[1]}", cluster.urls[0]]
        cache = cluster_cache(seeds, SOCKET_TIMEOUT=0.4, SOCKET_CONNECT_TIMEOUT=0.4)
        gap = asyncio.run(max_loop_gap(cache.akeys("nothing-*")))
    assert gap < 0.2, f"the event loop was blocked for {gap:.2f} s"


def test_cluster_async_get_discovery_does_not_block_the_event_loop(cluster: Cluster) -> None:
    # Control for the test above: aget's discovery is awaited, so the loop keeps running.
    with stalled_listener() as stall:
        seeds = [f"redis://127.0.0.1:{stall.getsockname()[1]}", cluster.urls[0]]
        cache = cluster_cache(seeds, SOCKET_TIMEOUT=0.41, SOCKET_CONNECT_TIMEOUT=0.41)
        gap = asyncio.run(max_loop_gap(cache.aget("x")))
    assert gap < 0.2, f"the event loop was blocked for {gap:.2f} s"


# Regression test (review finding, fixed): async discovery (ClusterRouter._arelearn /
# SentinelRouter._aprimary_now) has no single-flight guard: every task that finds the table
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


# Regression test (review finding, fixed): SentinelRouter._aprimary_now has no single-flight
# guard: 50 concurrent first calls ask the sentinels 50 times
def test_sentinel_async_discovery_runs_once_for_concurrent_callers(sentinel_set: Any) -> None:
    with stalled_listener() as stall:
        sentinels = [stall.getsockname(), *sentinel_set.sentinel_addresses]
        cache = build_cache(
            f"redis://{sentinel_set.service}/0",
            {"OPTIONS": {"SENTINELS": sentinels, "SOCKET_TIMEOUT": 0.43}},
        )
        router = cache._client
        runs = []
        discover = router._discover

        def counted() -> Any:
            runs.append(1)
            return discover()

        router._discover = counted

        async def main() -> list[Any]:
            return await asyncio.gather(*(cache.aget(f"herd{i}") for i in range(50)))

        assert asyncio.run(main()) == [None] * 50
    assert len(runs) <= 2, f"{len(runs)} discoveries (each asking the sentinels) for one burst"


# -- cluster: same behaviour as one server -------------------------------------------------------


# Regression test (review finding, fixed): _same_slot returns key+suffix for a key with an
# unbalanced or empty brace; that name hashes to another slot, so the stampede script (2 keys)
# fails with CROSSSLOT
@pytest.mark.parametrize("key", ["a}b", "x{", "{}x"])
def test_cluster_stampede_get_or_set_with_braces_in_the_key(cluster: Cluster, key: str) -> None:
    cache = cluster_cache(cluster.urls[:1], STAMPEDE_PROTECTION=True)
    cache.delete(key)
    assert cache.get_or_set(key, "v", 60) == "v"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            ("MGET", 1, 2),
        ),
        pytest.param(
            ("EVAL", "return 1", "x", "k"),
        ),
        pytest.param(
            (),
        ),
        ("GET", 1),
    ],
    ids=["mget-int-keys", "eval-bad-numkeys", "empty-command", "get-int-key"],
)
def test_cluster_raw_client_behaves_like_one_server(
    cluster: Cluster, redis_server: RedisServer, args: tuple[Any, ...]
) -> None:
    one = build_cache(redis_server.url, {})
    many = cluster_cache(cluster.urls[:1])
    assert outcome(lambda: many.client.execute(*args)) == outcome(lambda: one.client.execute(*args))


# Regression test (review finding, fixed): _plan_pipeline sends keyless commands to the first
# primary only: DBSIZE, KEYS, FLUSHDB in cache.client.pipeline() see or touch one node (execute()
# visits every primary)
def test_cluster_keyless_commands_in_a_pipeline_cover_every_primary(cluster: Cluster) -> None:
    cache = cluster_cache(cluster.urls[:1])
    cache.set_many({f"dbsize{i}": i for i in range(30)})
    assert cache.client.pipeline(("DBSIZE",))[0] == cache.client.execute("DBSIZE")


# Regression test (review finding, fixed): ClusterRouter.mget over several slots always fans out
# to the primaries: READ_FROM_REPLICAS covers get() and single-slot get_many() only
def test_cluster_get_many_over_slots_reads_from_replicas(cluster: Cluster) -> None:
    cache = cluster_cache(cluster.urls[:1], READ_FROM_REPLICAS=True)
    names = [f"rr-many-{i}" for i in range(30)]
    cache.set_many(dict.fromkeys(names, 1))
    cache.client.execute("WAIT", 1, 2000)
    replicas = [node for node in cluster.live_nodes() if cluster.role(node) == "slave"]

    def replica_gets() -> int:
        return sum(commandstat(node, "get") + commandstat(node, "mget") for node in replicas)

    before = replica_gets()
    assert cache.get_many(names) == dict.fromkeys(names, 1)
    assert replica_gets() - before >= len(names)


# -- read replicas (also SentinelRouter, which inherits _read) ----------------------------------


@pytest.fixture
def lagging_pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and one replica (replica-serve-stale-data off on request, see the tests)."""
    primary = RedisServer().start()
    replica = RedisServer("--replicaof", "127.0.0.1", str(primary.port))
    try:
        replica.start()
        deadline = time.monotonic() + 10
        while replica.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.02)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def cut_replica_link(replica: RedisServer) -> None:
    """The replica loses its primary (a network cut or a primary restart, as it sees it)."""
    replica.cli("replicaof", "127.0.0.1", str(free_port()))


# Regression test (review finding, fixed): ReplicaRouter._read falls back to the primary only on
# ConnectionInterrupted: a replica's error reply (MASTERDOWN with replica-serve-stale-data no,
# LOADING while it resyncs) reaches get()/get_many() as ResponseError, which IGNORE_EXCEPTIONS
# cannot hide
@pytest.mark.parametrize("mode", ["sync", "async"])
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
