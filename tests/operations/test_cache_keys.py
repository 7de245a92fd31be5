"""``manage.py cache_keys``: the keys of a cache (its KEY_PREFIX and VERSION) matching a glob,
on every primary of a cluster, at most --count of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import caches
from support.backend import is_redoxide
from support.operations import run
from support.servers import Cluster, RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's app")

Use = Callable[..., None]


def test_keys_lists_the_cache_keys_matching_a_pattern(
    project: Use, server_cache: dict[str, Any], redis_client: Any
) -> None:
    project({"default": {**server_cache, "KEY_PREFIX": "site"}})
    cache = caches["default"]
    cache.set_many({"user:1": 1, "user:2": 2, "page:1": 3})
    cache.set("user:3", 3, version=2)
    redis_client.set("user:4", "not the cache's")
    outcome = run("cache_keys", "user:*")
    assert outcome.code == 0
    assert sorted(outcome.out.split()) == ["user:1", "user:2"]
    assert sorted(run("cache_keys", "default", "user:*", "--version", "2").out.split()) == [
        "user:3"
    ]


def test_keys_stops_at_count_and_says_so(project: Use, server_cache: dict[str, Any]) -> None:
    project({"default": server_cache})
    caches["default"].set_many({f"k{i}": i for i in range(30)})
    outcome = run("cache_keys", "k*", "--count", "7")
    assert len(outcome.out.split()) == 7
    assert "more match" in outcome.err
    report = run("cache_keys", "k*", "--count", "7", "--json").json()
    assert report["truncated"] is True and len(report["keys"]) == 7
    report = run("cache_keys", "k*", "--count", "30", "--json").json()
    assert report["truncated"] is False
    assert sorted(report["keys"]) == sorted(f"k{i}" for i in range(30))


def test_keys_of_a_cluster_come_from_every_primary(project: Use, cluster: Cluster) -> None:
    entry = {"BACKEND": "redoxide.RedisCache", "LOCATION": cluster.urls[:1]}
    project({"default": {**entry, "OPTIONS": {"CLUSTER": True}}})
    cluster.flushall()
    caches["default"].set_many({f"c{i}": i for i in range(50)})
    keys = run("cache_keys", "c*", "--count", "1000", "--json").json()["keys"]
    assert sorted(keys) == sorted(f"c{i}" for i in range(50))


def test_keys_with_a_server_down_fails(project: Use) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    # Fail-open in the settings does not turn the outage into an empty answer.
    project({"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": url,
                         "OPTIONS": {"IGNORE_EXCEPTIONS": True}}})  # fmt: skip
    outcome = run("cache_keys", "*")
    assert outcome.code == 1
    assert outcome.out == "" and "ConnectionInterrupted" in outcome.err


def test_keys_rejects_a_count_below_one(project: Use, redis_server: RedisServer) -> None:
    project({"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url}})
    outcome = run("cache_keys", "*", "--count", "0")
    assert outcome.code != 0 and "must be at least 1, not 0" in outcome.err
