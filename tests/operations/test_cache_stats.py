"""``manage.py cache_stats``: the backend's counters when it has stats(), and each data node's
INFO memory and keyspace, matching what the server itself reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import caches
from support.backend import is_redoxide
from support.operations import NoStatsCache, StatsCache, run
from support.servers import Cluster, RedisServer, SentinelSet, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's app")

Use = Callable[..., None]


def cache(location: Any, backend: str = "redoxide.RedisCache", **options: Any) -> dict[str, Any]:
    return {"BACKEND": backend, "LOCATION": location, "OPTIONS": options}


def test_stats_show_each_node_memory_and_keyspace(
    project: Use, server_cache: dict[str, Any], redis_server: RedisServer
) -> None:
    project({"default": server_cache})
    caches["default"].set_many({f"k{i}": i for i in range(5)})
    outcome = run("cache_stats", "default", "--json")
    assert outcome.code == 0
    [node] = outcome.json()["default"]["nodes"]
    assert node["address"] == f"127.0.0.1:{redis_server.port}"
    assert node["keyspace"]["db0"]["keys"] == 5
    memory = redis_server.info("memory")
    assert node["memory"]["maxmemory_policy"] == memory["maxmemory_policy"]
    assert isinstance(node["memory"]["used_memory"], int)
    assert set(node["server_stats"]) == {
        "keyspace_hits",
        "keyspace_misses",
        "expired_keys",
        "evicted_keys",
    }


def test_stats_without_a_stats_method_show_the_server_only(
    project: Use, redis_server: RedisServer
) -> None:
    backend = f"{NoStatsCache.__module__}.{NoStatsCache.__qualname__}"
    project({"default": cache(redis_server.url, backend=backend)})
    outcome = run("cache_stats", "--json")
    assert outcome.code == 0
    report = outcome.json()["default"]
    assert report["stats"] is None
    [node] = report["nodes"]
    assert "used_memory" in node["memory"]


def test_stats_print_whatever_stats_returns(project: Use, redis_server: RedisServer) -> None:
    backend = f"{StatsCache.__module__}.{StatsCache.__qualname__}"
    project({"default": cache(redis_server.url, backend=backend)})
    expected = StatsCache(redis_server.url, {}).stats()
    assert run("cache_stats", "--json").json()["default"]["stats"] == expected
    text = run("cache_stats").out.splitlines()
    # Nested dicts and lists, one "name: value" a line, indented by depth.
    assert text[:2] == ["default:", "  topology: standalone"]
    assert "  stats:" in text and "    calls:" in text and "      get: 3" in text
    assert "    nodes:" in text and "      -" in text and "        address: n1" in text


def test_stats_of_a_cluster_cover_every_data_node(project: Use, cluster: Cluster) -> None:
    project({"default": cache(cluster.urls[:1], CLUSTER=True)})
    cluster.flushall()
    caches["default"].set_many({f"k{i}": i for i in range(40)})
    nodes = run("cache_stats", "--json").json()["default"]["nodes"]
    assert len(nodes) == len(cluster.nodes)
    primaries = [n for n in nodes if n["kind"] == "primary"]
    assert sum(n["keyspace"].get("db0", {}).get("keys", 0) for n in primaries) == 40


def test_stats_of_sentinel_leave_the_sentinels_out(project: Use, sentinel_set: SentinelSet) -> None:
    location = f"redis://{sentinel_set.service}/0"
    project({"default": cache(location, SENTINELS=sentinel_set.sentinel_addresses)})
    nodes = run("cache_stats", "--json").json()["default"]["nodes"]
    assert sorted(n["kind"] for n in nodes) == ["primary", "replica", "replica"]


def test_stats_of_a_server_that_is_down_fail_naming_the_node(project: Use) -> None:
    port = free_port()
    project({"default": cache(f"redis://127.0.0.1:{port}/0")})
    outcome = run("cache_stats", "--json")
    assert outcome.code == 1
    [node] = outcome.json()["default"]["nodes"]
    assert node["address"] == f"127.0.0.1:{port}"
    assert node["error"].startswith("ConnectionInterrupted")
