"""redoxide.metrics: the Prometheus collector's output, parsed as a scraper parses it, carries
cache.stats()' numbers under conventional names and labels."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.cache import caches
from django.test import override_settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redoxide.metrics import RedoxideCollector, register
from support.backend import is_redoxide
from support.near import near_options, warm
from support.servers import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own counters")


def scrape(registry: CollectorRegistry) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Return {sample name: {sorted labels: value}} from the registry's text exposition."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def labels(**kwargs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kwargs.items()))


@pytest.fixture
def two_caches(fresh_redis_server: RedisServer) -> Any:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = {
        "default": {"BACKEND": "redoxide.RedisCache", "LOCATION": fresh_redis_server.url},
        "down": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": dead,
            "OPTIONS": {"IGNORE_EXCEPTIONS": True},
        },
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    with override_settings(CACHES=settings):
        yield caches["default"], caches["down"]


def test_the_exposition_carries_every_counter(two_caches: Any) -> None:
    cache, down = two_caches
    cache.set("a", 1)
    cache.get("a")
    cache.get("missing")
    asyncio.run(cache.aget_many(["a", "b"]))
    assert down.get("k", "fallback") == "fallback"
    registry = CollectorRegistry()
    register(registry)
    samples = scrape(registry)
    stats = cache.stats()
    (node,) = stats["nodes"]
    default = {"alias": "default", "node": node}
    counts = stats["nodes"][node]
    assert samples["redoxide_commands_total"][labels(**default, command="GET")] == 2
    assert samples["redoxide_commands_total"][labels(**default, command="MGET")] == 1
    assert samples["redoxide_cache_hits_total"][labels(**default)] == counts["hits"] == 2
    assert samples["redoxide_cache_misses_total"][labels(**default)] == counts["misses"] == 2
    assert samples["redoxide_sent_bytes_total"][labels(**default)] == counts["bytes_sent"]
    assert samples["redoxide_received_bytes_total"][labels(**default)] == counts["bytes_received"]
    assert samples["redoxide_connections"][labels(**default)] == counts["connections"] == 2
    assert samples["redoxide_fail_open_misses_total"][labels(alias="down")] == 1
    (down_node,) = down.stats()["nodes"]
    failed = labels(alias="down", node=down_node, command="GET", error="ConnectionInterrupted")
    assert samples["redoxide_command_errors_total"][failed] == 1
    # The histogram: cumulative buckets in seconds, +Inf equal to the count.
    hist = counts["latency"]["GET"]
    get = {**default, "command": "GET"}
    assert samples["redoxide_command_duration_seconds_count"][labels(**get)] == hist["count"] == 2
    assert samples["redoxide_command_duration_seconds_bucket"][labels(**get, le="+Inf")] == 2
    assert samples["redoxide_command_duration_seconds_sum"][labels(**get)] == pytest.approx(
        hist["sum_us"] / 1e6
    )
    buckets = [
        (float(dict(k)["le"]), v)
        for k, v in samples["redoxide_command_duration_seconds_bucket"].items()
        if dict(k)["command"] == "GET" and dict(k)["le"] != "+Inf" and dict(k)["alias"] == "default"
    ]
    assert [b for b, _ in sorted(buckets)][:2] == [4e-6, 8e-6]
    values = [v for _, v in sorted(buckets)]
    assert values == sorted(values) and values[-1] <= 2
    # Only redoxide caches are exported, and the others are not even instantiated.
    assert not hasattr(caches._connections, "local")
    assert {dict(k)["alias"] for k in samples["redoxide_fail_open_misses_total"]} == {
        "default",
        "down",
    }


def test_a_scrape_reads_the_counters_as_they_are_then(two_caches: Any) -> None:
    cache, _ = two_caches
    registry = CollectorRegistry()
    registry.register(RedoxideCollector())  # type: ignore[arg-type]
    (node,) = cache.stats()["nodes"]
    key = labels(alias="default", node=node, command="SET")
    cache.set("k", 1)
    assert scrape(registry)["redoxide_commands_total"][key] == 1
    cache.set("k", 2)
    assert scrape(registry)["redoxide_commands_total"][key] == 2
    cache.reset_stats()
    assert key not in scrape(registry).get("redoxide_commands_total", {})


def test_lists_sets_hashes_and_sorted_sets_are_exported_under_their_commands(
    two_caches: Any,
) -> None:
    cache, _ = two_caches
    cache.reset_stats()
    cache.lpush("l", "a", "b")
    cache.lrange("l", 0, -1)
    cache.sadd("s", "a")
    cache.hset("h", "f", 1)
    cache.zadd("z", {"a": 1})
    cache.client.get_client().rpush("raw", "x")
    registry = CollectorRegistry()
    register(registry)
    commands = {
        dict(k)["command"]: v
        for k, v in scrape(registry)["redoxide_commands_total"].items()
        if dict(k)["alias"] == "default"
    }
    assert commands == {"LPUSH": 1, "LRANGE": 1, "SADD": 1, "HSET": 1, "ZADD": 1, "RPUSH": 1}


def test_near_cache_hits_are_exported(fresh_redis_server: RedisServer) -> None:
    # A near-cache hit sends nothing: without its own series a hit ratio built from
    # redoxide_cache_hits_total drops when the near cache serves more.
    near = near_options()
    settings = {
        "default": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": fresh_redis_server.url,
            "OPTIONS": {"NEAR_CACHE": near},
        },
        "plain": {"BACKEND": "redoxide.RedisCache", "LOCATION": fresh_redis_server.url},
    }
    with override_settings(CACHES=settings):
        cache = caches["default"]
        cache.set("cfg:k", 1)
        assert warm(cache, "cfg:k") == 1
        kept = cache.near_cache_stats()
        assert kept["hits"] >= 1
        registry = CollectorRegistry()
        register(registry)
        samples = scrape(registry)
    default = labels(alias="default")
    for key in ("hits", "misses", "installs", "invalidations", "evictions", "fills_dropped"):
        assert samples[f"redoxide_near_cache_{key}_total"][default] == kept[key], key
    assert samples["redoxide_near_cache_bytes"][default] == kept["bytes"] > 0
    assert samples["redoxide_near_cache_hits_total"][default] >= 1
    assert samples["redoxide_near_cache_entries"][default] == kept["entries"]
    flushes = samples["redoxide_near_cache_flushes_total"]
    assert {dict(k)["reason"]: v for k, v in flushes.items()} == kept["flushes"]
    # A cache without NEAR_CACHE has no near-cache series.
    assert all(dict(k)["alias"] == "default" for k in samples["redoxide_near_cache_hits_total"])
