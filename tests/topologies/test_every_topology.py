"""Read replicas, Sentinel and Cluster: the same cache API, sync and async, on each topology.

The session's cluster (3 primaries, 3 replicas) and sentinel set (a primary, 2 replicas, 3
sentinels) come from conftest. Django's own contract runs on each topology with
REDOXIDE_TEST_TOPOLOGY=cluster|sentinel (make test-topologies), the async contract in
contract/test_async_contract.py. What is particular to one topology is in the other files
here: test_cluster.py (routing), test_cluster_resharding.py, test_cluster_outages.py,
test_failover.py, test_discovery.py, test_replicas.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redoxide.exceptions import ConfigurationError, ResponseError
from support.backend import build_cache, is_redoxide, topology_cache

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


TOPOLOGIES = ["cluster", "sentinel", "replicas"]


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
    exercise_sync(topology_cache(topology, request))


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_method_works_async(topology: str, request: pytest.FixtureRequest) -> None:
    asyncio.run(exercise_async(topology_cache(topology, request)))


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_server_errors_are_the_same_typed_errors(
    topology: str, request: pytest.FixtureRequest
) -> None:
    cache = topology_cache(topology, request)
    cache.client.execute("HSET", cache.make_key("h"), "f", "v")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        cache.incr("h")

    async def main() -> None:
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await cache.aincr("h")

    asyncio.run(main())
    cache.delete("h")


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
        build_cache(location, {"OPTIONS": options}).get("k")
