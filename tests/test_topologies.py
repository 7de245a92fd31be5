"""Read replicas, Sentinel and Cluster: the same cache API, sync and async, on each topology.

The session's cluster (3 primaries, 3 replicas) and sentinel set (a primary, 2 replicas, 3
sentinels) come from conftest; tests that kill or reshape servers start their own. Django's own
contract runs on each topology with REDOXIDE_TEST_TOPOLOGY=cluster|sentinel (make
test-topologies).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import build_cache, is_redoxide, topology_settings
from redis_server import RedisServer
from redoxide._redoxide import key_slot
from redoxide.exceptions import CacheError, ConfigurationError, ResponseError
from topologies import Cluster

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")

TOPOLOGIES = ["cluster", "sentinel", "replicas"]


@pytest.fixture(scope="module")
def replica_set() -> Iterator[tuple[RedisServer, list[RedisServer]]]:
    """A primary and two replicas (no sentinels), for LOCATION lists."""
    primary = RedisServer().start()
    replicas = [RedisServer("--replicaof", "127.0.0.1", str(primary.port)) for _ in range(2)]
    try:
        for replica in replicas:
            replica.start()
        deadline = time.monotonic() + 20
        while any(r.info("replication").get("master_link_status") != "up" for r in replicas):
            assert time.monotonic() < deadline, "replicas did not sync"
            time.sleep(0.05)
        yield primary, replicas
    finally:
        for server in [*replicas, primary]:
            server.stop()


def make_topology_cache(topology: str, request: pytest.FixtureRequest, **options: Any) -> Any:
    if topology == "replicas":
        primary, replicas = request.getfixturevalue("replica_set")
        settings: dict[str, Any] = {
            "LOCATION": [primary.url] + [r.url for r in replicas],
            # Reads stay on the primary here, so a read right after a write sees it; reads
            # from replicas have tests of their own below.
            "OPTIONS": {"READ_FROM_REPLICAS": False},
        }
    else:
        settings = topology_settings(topology, request)
    settings["OPTIONS"] = {**settings.get("OPTIONS", {}), **options}
    return build_cache(settings.pop("LOCATION"), settings)


def wait_replicated(cache: Any) -> None:
    """Wait until every replica has what the primary has (WAIT on the primary)."""
    cache.client.execute("WAIT", 2, 2000)


def exercise_sync(cache: Any) -> None:
    """Call every cache method once and check what it returns."""
    cache.clear()
    cache.set("a", 1)
    cache.set("b", {"x": [1, 2]}, timeout=60)
    assert cache.get("a") == 1 and cache.get("b") == {"x": [1, 2]}
    assert cache.get("missing", "dflt") == "dflt"
    assert cache.add("a", 5) is False and cache.add("c", 3) is True
    assert cache.set("nx", 1, nx=True) is True and cache.set("nx", 2, nx=True) is False
    keys = [f"k{i}" for i in range(30)]
    assert cache.set_many({k: i for i, k in enumerate(keys)}, timeout=60) == []
    assert cache.get_many(keys) == {k: i for i, k in enumerate(keys)}
    cache.delete_many(keys[:10])
    assert cache.get_many(keys) == {k: i for i, k in enumerate(keys) if i >= 10}
    assert cache.has_key("a") and not cache.has_key("k0")
    assert cache.incr("a", 10) == 11 and cache.decr("a") == 10
    assert cache.touch("b", 100) is True
    assert 99 <= cache.ttl("b") <= 100
    assert cache.persist("b") is True and cache.ttl("b") is None
    assert cache.expire("b", 50) is True and 0 < cache.pttl("b") <= 50_000
    assert cache.incr_version("b") == 2
    assert cache.get("b") is None and cache.get("b", version=2) == {"x": [1, 2]}
    assert cache.get_or_set("g", lambda: "made") == "made"
    assert cache.get_or_set("g", "other") == "made"
    assert cache.delete("g") is True and cache.delete("g") is False
    assert sorted(cache.keys("k1*")) == sorted(k for k in keys[10:] if k.startswith("k1"))
    assert sorted(cache.iter_keys("k2*", itersize=3)) == [f"k2{i}" for i in range(10)]
    assert cache.delete_pattern("k2*") == 10
    assert cache.keys("k2*") == []
    with cache.lock("L", timeout=5) as held:
        assert held.locked()
    assert cache.client.execute("PING") in (True, "PONG", b"PONG")
    assert cache.clear() is True
    assert cache.get("a") is None and cache.keys("*") == []


async def exercise_async(cache: Any) -> None:
    """exercise_sync with the async twins."""
    await cache.aclear()
    await cache.aset("a", 1)
    await cache.aset("b", {"x": [1, 2]}, timeout=60)
    assert await cache.aget("a") == 1 and await cache.aget("b") == {"x": [1, 2]}
    assert await cache.aadd("a", 5) is False and await cache.aadd("c", 3) is True
    keys = [f"k{i}" for i in range(30)]
    await cache.aset_many({k: i for i, k in enumerate(keys)}, timeout=60)
    assert await cache.aget_many(keys) == {k: i for i, k in enumerate(keys)}
    await cache.adelete_many(keys[:10])
    assert await cache.aget_many(keys) == {k: i for i, k in enumerate(keys) if i >= 10}
    assert await cache.ahas_key("a") and not await cache.ahas_key("k0")
    assert await cache.aincr("a", 10) == 11 and await cache.adecr("a") == 10
    assert await cache.atouch("b", 100) is True
    assert 99 <= await cache.attl("b") <= 100
    assert await cache.aincr_version("b") == 2
    assert await cache.aget("b", version=2) == {"x": [1, 2]}
    assert await cache.aget_or_set("g", "made") == "made"
    assert await cache.adelete("g") is True
    found = sorted([k async for k in cache.aiter_keys("k2*")])
    assert found == [f"k2{i}" for i in range(10)]
    assert await cache.adelete_pattern("k2*") == 10
    assert await cache.akeys("k2*") == []
    async with cache.alock("L", timeout=5) as held:
        assert await held.locked()
    assert await cache.client.aexecute("PING") in (True, "PONG", b"PONG")
    assert await cache.aclear() is True
    assert await cache.aget("a") is None


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_method_works_sync(topology: str, request: pytest.FixtureRequest) -> None:
    exercise_sync(make_topology_cache(topology, request))


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_method_works_async(topology: str, request: pytest.FixtureRequest) -> None:
    asyncio.run(exercise_async(make_topology_cache(topology, request)))


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_server_errors_are_the_same_typed_errors(
    topology: str, request: pytest.FixtureRequest
) -> None:
    cache = make_topology_cache(topology, request)
    cache.client.execute("HSET", cache.make_key("h"), "f", "v")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        cache.incr("h")

    async def main() -> None:
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await cache.aincr("h")

    asyncio.run(main())
    cache.delete("h")


# -- cluster ----------------------------------------------------------------------------------


def node_keys(node: RedisServer) -> set[str]:
    return set(node.cli("--scan").split())


def test_cluster_keys_live_on_the_node_serving_their_slot(
    cluster: Cluster, request: pytest.FixtureRequest
) -> None:
    cache = make_topology_cache("cluster", request)
    cache.clear()
    keys = [f"spread{i}" for i in range(40)]
    cache.set_many(dict.fromkeys(keys, "v"))
    for key in keys:
        made = cache.make_key(key)
        assert made in node_keys(cluster.primary_of_slot(key_slot(made)))
    assert len({key_slot(cache.make_key(k)) for k in keys}) > 30  # many slots, all primaries
    assert all(node_keys(node) for node in cluster.primaries())


def test_cluster_multi_key_calls_span_every_primary(
    cluster: Cluster, request: pytest.FixtureRequest
) -> None:
    cache = make_topology_cache("cluster", request)
    keys = [f"multi{i}" for i in range(20)]
    cache.set_many({k: i for i, k in enumerate(keys)})
    assert cache.client.execute("EXISTS", *[cache.make_key(k) for k in keys]) == 20
    assert cache.client.execute("DBSIZE") >= 20
    got = cache.client.execute("MGET", *[cache.make_key(k) for k in keys[:3]])
    assert got == [b"0", b"1", b"2"]
    replies = cache.client.pipeline(
        ("SET", cache.make_key("p1"), "x"),
        ("GET", cache.make_key("p1")),
        ("DEL", cache.make_key("p1"), cache.make_key(keys[0])),
    )
    assert replies == [True, b"x", 2]
    cache.delete_many(keys)
    assert cache.get_many(keys) == {}


def test_cluster_incr_version_and_hash_tags(request: pytest.FixtureRequest) -> None:
    cache = make_topology_cache("cluster", request)
    cache.set("plain", "v", timeout=100)
    assert cache.incr_version("plain") == 2  # two slots: copied, TTL kept, old removed
    assert cache.get("plain", version=2) == "v" and cache.get("plain") is None
    assert 99 <= cache.ttl("plain", version=2) <= 100
    cache.set("{user1}.a", 1)
    assert cache.incr_version("{user1}.a") == 2  # one slot: one atomic script
    assert cache.get("{user1}.a", version=2) == 1
    with pytest.raises(ValueError):
        cache.incr_version("never-set")


def test_cluster_stampede_protection(request: pytest.FixtureRequest) -> None:
    cache = make_topology_cache("cluster", request, STAMPEDE_PROTECTION=True)
    calls = []
    assert cache.get_or_set("sp", lambda: calls.append(1) or "x", 60) == "x"
    assert cache.get_or_set("sp", lambda: calls.append(1) or "y", 60) == "x"
    assert calls == [1]


def test_cluster_50_concurrent_agets_hold_one_connection_per_node(cluster: Cluster) -> None:
    # Its own configuration (a distinct timeout), so its node clients are new ones.
    cache = build_cache(cluster.urls[:1], {"OPTIONS": {"CLUSTER": True, "SOCKET_TIMEOUT": 2.25}})
    keys = [f"c{i}" for i in range(200)]
    cache.set_many(dict.fromkeys(keys, 1))
    before = {node.port: node.client_count() for node in cluster.primaries()}

    async def main() -> None:
        for _ in range(5):
            got = await asyncio.gather(*(cache.aget(k) for k in keys[:50]))
            assert got == [1] * 50

    asyncio.run(main())
    after = {node.port: node.client_count() for node in cluster.primaries()}
    for port, count in after.items():
        # One multiplexed connection per node for all async traffic (+1 sync, made above).
        assert count - before[port] <= 1, (port, before, after)


def test_cluster_reads_from_replicas(cluster: Cluster) -> None:
    cache = build_cache(
        cluster.urls[:1], {"OPTIONS": {"CLUSTER": True, "READ_FROM_REPLICAS": True}}
    )
    cache.set("rr", "value")
    cache.client.execute("WAIT", 1, 2000)
    replicas = [node for node in cluster.live_nodes() if cluster.role(node) == "slave"]

    def replica_gets() -> int:
        total = 0
        for node in replicas:
            stats = node.info("commandstats").get("cmdstat_get", "calls=0")
            total += int(stats.split(",")[0].split("=")[1])
        return total

    before = replica_gets()
    assert [cache.get("rr") for _ in range(5)] == ["value"] * 5

    async def main() -> list[Any]:
        return [await cache.aget("rr") for _ in range(5)]

    assert asyncio.run(main()) == ["value"] * 5
    assert replica_gets() - before >= 10


def migrate_slot(cluster: Cluster, slot: int, keys: list[str], finish: bool) -> None:
    """Move `slot` (holding `keys`) to another primary; with finish=False stop half-way
    (source MIGRATING, target IMPORTING, keys moved): clients then get ASK redirects."""
    source = cluster.primary_of_slot(slot)
    target = next(node for node in cluster.primaries() if node is not source)
    source_id = source.cli("cluster", "myid")
    target_id = target.cli("cluster", "myid")
    target.cli("cluster", "setslot", str(slot), "importing", source_id)
    source.cli("cluster", "setslot", str(slot), "migrating", target_id)
    for key in keys:
        source.cli("migrate", "127.0.0.1", str(target.port), key, "0", "5000")
    if finish:
        for node in cluster.primaries():
            node.cli("cluster", "setslot", str(slot), "node", target_id)


def test_cluster_follows_moved_and_ask_redirects() -> None:
    with Cluster() as own:
        cache = build_cache(own.urls[:1], {"OPTIONS": {"CLUSTER": True}})
        cache.set("moving", "before")
        made = cache.make_key("moving")
        slot = key_slot(made)
        # Half-way: the key is on the target, the source answers ASK.
        migrate_slot(own, slot, [made], finish=False)
        assert cache.get("moving") == "before"
        assert asyncio.run(cache.aget("moving")) == "before"
        # Done: the source answers MOVED; the client learns the new owner.
        source = own.primary_of_slot(slot)
        target_id = next(n.cli("cluster", "myid") for n in own.primaries() if n is not source)
        for node in own.primaries():
            node.cli("cluster", "setslot", str(slot), "node", target_id)
        cache.set("moving", "after")
        assert cache.get("moving") == "after"
        assert asyncio.run(cache.aget("moving")) == "after"
        assert made in node_keys(own.primary_of_slot(slot))


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


# -- read replicas (LOCATION list) ---------------------------------------------------------------


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


@pytest.mark.parametrize("mode", ["sync", "async"])
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


# -- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "options", "message"),
    [
        ("redis://127.0.0.1:1/1", {"CLUSTER": True}, "only database 0"),
        ("redis://127.0.0.1:1", {"CLUSTER": "yes"}, "True or False"),
        ("redis://svc/0", {"SENTINELS": "127.0.0.1:26379"}, "list of"),
        ("redis://svc/0", {"SENTINELS": [("127.0.0.1", "x")]}, "pairs"),
        ("redis://svc/0", {"SENTINEL_KWARGS": {"password": "p"}}, "needs SENTINELS"),
        (
            "redis://svc/0",
            {"SENTINELS": [("127.0.0.1", 1)], "SENTINEL_KWARGS": {"ssl": True}},
            "unsupported",
        ),
        ("redis://127.0.0.1:1", {"READ_FROM_REPLICAS": True}, "needs replicas"),
        ("redis://127.0.0.1:1", {"CLUSTER": True, "SENTINELS": [("h", 1)]}, "cannot be combined"),
    ],
)
def test_bad_topology_settings_fail_at_startup(
    location: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build_cache(location, {"OPTIONS": options})


def test_sentinel_with_no_reachable_sentinel_is_a_typed_error() -> None:
    from redis_server import free_port

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


def test_sentinel_password_never_shown(sentinel_set: Any) -> None:
    cache = build_cache(
        "redis://mymaster/0",
        {
            "OPTIONS": {
                "SENTINELS": sentinel_set.sentinel_addresses,
                "SENTINEL_KWARGS": {"password": "sentinel-secret"},
            }
        },
    )
    assert "sentinel-secret" not in repr(cache) + repr(cache._client) + repr(cache._config)


# -- failover -----------------------------------------------------------------------------------


class Traffic:
    """A steady stream of sets and gets, from a thread (sync) and an event loop (async), that
    records each call's outcome and duration."""

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
    from topologies import SentinelSet

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
            deadline = time.monotonic() + 30
            while sset.current_primary_port() == old_port:
                assert time.monotonic() < deadline, "sentinels did not fail over"
                time.sleep(0.05)
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
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, "no replica was promoted"
                try:
                    own.wait_ok(timeout=0.2)
                    if len(own.primaries()) == 3:
                        break
                except RuntimeError:
                    pass
            promoted_at = time.monotonic()
            traffic.wait_ok(100, 15)
            recovered_at = time.monotonic()
        check_failover(traffic, killed_at, timeout, bound=30)
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
    from topologies import SentinelSet

    with SentinelSet() as sset:
        cache = build_cache(
            f"redis://{sset.service}/0",
            {"OPTIONS": {"SENTINELS": sset.sentinel_addresses, "SOCKET_TIMEOUT": 0.5}},
        )
        cache.set("before", 1)
        assert asyncio.run(cache.aget("before")) == 1
        old_port = sset.current_primary_port()
        sset.sentinels[0].cli("sentinel", "failover", sset.service)
        deadline = time.monotonic() + 30
        while sset.current_primary_port() == old_port:
            assert time.monotonic() < deadline, "no failover"
            time.sleep(0.05)
        new_primary = sset.node_for_port(sset.current_primary_port())
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


# -- the async contract on each topology -------------------------------------------------------


@pytest.fixture(scope="module", params=["cluster", "sentinel"])
def topology_pair(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """A cache on a topology and a redis-py client that sees all of its keys."""
    import redis
    from redis.cluster import RedisCluster

    cache = make_topology_cache(request.param, request)
    if request.param == "cluster":
        running = request.getfixturevalue("cluster")
        raw: Any = RedisCluster(host="127.0.0.1", port=running.nodes[0].port)
    else:
        running = request.getfixturevalue("sentinel_set")
        raw = redis.Redis(host="127.0.0.1", port=running.current_primary_port())
    yield cache, raw
    raw.close()


def _contract_cases() -> list[Any]:
    import test_async_contract

    return list(test_async_contract.CASES)


@pytest.mark.parametrize("c", _contract_cases(), ids=lambda c: c.id)
def test_async_twin_matches_sync_on_topologies(topology_pair: tuple[Any, Any], c: Any) -> None:
    from test_async_contract import assert_same_state, run_async, run_sync

    cache, raw = topology_pair
    sync = run_sync(cache, raw, c)
    asynchronous = run_async(cache, raw, c)
    assert asynchronous.result == sync.result
    assert asynchronous.warnings == sync.warnings
    assert_same_state(sync.state, asynchronous.state)
