"""Cluster routing: keys live on the node serving their slot, multi-key calls span every
primary, hash tags and brace keys, stampede protection, one connection per node, reads from
replicas, the raw client and keyless commands.

Tests marked "Regression test" come from a review of the topology routers and showed a bug
(fixed since); the other review cases are controls that pin down the behaviour the bugs were
measured against.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redoxide._redoxide import key_slot
from support.backend import build_cache, is_redoxide, topology_cache
from support.servers import Cluster, RedisServer
from support.topology import cluster_cache, commandstat, node_keys, outcome

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


def test_cluster_keys_live_on_the_node_serving_their_slot(
    cluster: Cluster, request: pytest.FixtureRequest
) -> None:
    cache = topology_cache("cluster", request)
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
    cache = topology_cache("cluster", request)
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
    cache = topology_cache("cluster", request)
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
    cache = topology_cache("cluster", request, STAMPEDE_PROTECTION=True)
    calls = []
    assert cache.get_or_set("sp", lambda: calls.append(1) or "x", 60) == "x"
    assert cache.get_or_set("sp", lambda: calls.append(1) or "y", 60) == "x"
    assert calls == [1]


# Regression test (review finding, fixed): _same_slot returns key+suffix for a key with an
# unbalanced or empty brace; that name hashes to another slot, so the stampede script (2 keys)
# fails with CROSSSLOT
@pytest.mark.parametrize("key", ["a}b", "x{", "{}x"])
def test_cluster_stampede_get_or_set_with_braces_in_the_key(cluster: Cluster, key: str) -> None:
    cache = cluster_cache(cluster.urls[:1], STAMPEDE_PROTECTION=True)
    cache.delete(key)
    assert cache.get_or_set(key, "v", 60) == "v"


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
