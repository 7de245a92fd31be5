"""A Prometheus collector for redoxide's counters (``pip install redoxide[prometheus]``).

Register it once per process, e.g. in an AppConfig.ready()::

    from redoxide.metrics import register
    register()                    # into prometheus_client's default registry

and every scrape of that registry (django-prometheus' ``/metrics`` view, or
``prometheus_client.start_http_server``) reads ``cache.stats()`` of each redoxide cache in
settings.CACHES. The counters live in the Rust core; a scrape only reads them.

Metric families (labels: ``alias`` the CACHES alias, ``node`` host:port, ``command`` the
command family, ``error`` the exception class):

    redoxide_commands_total{alias,node,command}              counter
    redoxide_command_errors_total{alias,node,command,error}  counter
    redoxide_command_duration_seconds{alias,node,command}    histogram (PIPELINE: a pipeline)
    redoxide_cache_hits_total{alias,node}                    counter
    redoxide_cache_misses_total{alias,node}                  counter
    redoxide_sent_bytes_total{alias,node}                    counter
    redoxide_received_bytes_total{alias,node}                counter
    redoxide_reconnects_total{alias,node}                    counter
    redoxide_timeouts_total{alias,node}                      counter
    redoxide_connections{alias,node}                         gauge
    redoxide_fail_open_misses_total{alias}                   counter

and, for a cache with NEAR_CACHE (``cache.near_cache_stats()``: its hits send nothing, so the
counters above never see them):

    redoxide_near_cache_hits_total{alias}                    counter
    redoxide_near_cache_misses_total{alias}                  counter
    redoxide_near_cache_installs_total{alias}                counter
    redoxide_near_cache_invalidations_total{alias}           counter
    redoxide_near_cache_evictions_total{alias}               counter
    redoxide_near_cache_fills_dropped_total{alias}           counter
    redoxide_near_cache_flushes_total{alias,reason}          counter
    redoxide_near_cache_bytes{alias}                         gauge
    redoxide_near_cache_entries{alias}                       gauge

Caches that reach the same servers with the same settings share their node counters, so
their series are equal: sum over ``alias`` only across caches on different servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

try:
    from prometheus_client.core import (
        REGISTRY,
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import CollectorRegistry
except ImportError as exc:  # without the extra
    raise ImportError(
        "redoxide.metrics needs prometheus-client: pip install 'redoxide[prometheus]'"
    ) from exc

from redoxide._configured import redoxide_caches

__all__ = ["RedoxideCollector", "register"]

_NODE = ["alias", "node"]
_COMMAND = ["alias", "node", "command"]
# Per-node counters: (stats key, metric name, help).
_NODE_COUNTERS = (
    ("hits", "redoxide_cache_hits", "Keys found by get, get_many (per key) and has_key."),
    ("misses", "redoxide_cache_misses", "Keys not found by get, get_many and has_key."),
    ("bytes_sent", "redoxide_sent_bytes", "Bytes written to the server."),
    ("bytes_received", "redoxide_received_bytes", "Bytes read from the server."),
    ("reconnects", "redoxide_reconnects", "Connections made to replace one that broke."),
    ("timeouts", "redoxide_timeouts", "Calls that got no reply within SOCKET_TIMEOUT."),
)

# The near cache's counters: (near_cache_stats key, metric name, help).
_NEAR_COUNTERS = (
    ("hits", "redoxide_near_cache_hits", "Reads answered by the near cache (nothing sent)."),
    ("misses", "redoxide_near_cache_misses", "Reads of kept keys the near cache did not hold."),
    ("installs", "redoxide_near_cache_installs", "Values the near cache took in."),
    ("invalidations", "redoxide_near_cache_invalidations", "Keys dropped by the server's word."),
    ("evictions", "redoxide_near_cache_evictions", "Keys dropped to stay within MAX_BYTES."),
    ("fills_dropped", "redoxide_near_cache_fills_dropped", "Fills an invalidation overtook."),
)
_NEAR_GAUGES = (
    ("bytes", "redoxide_near_cache_bytes", "Bytes the near cache holds (keys and values)."),
    ("entries", "redoxide_near_cache_entries", "Keys the near cache holds."),
)


class RedoxideCollector:
    """Yield redoxide's counters as Prometheus metric families, read at each scrape.

    `caches` returns the (alias, cache) pairs to export; by default, every redoxide cache in
    settings.CACHES.
    """

    def __init__(self, caches: Callable[[], Iterable[tuple[str, Any]]] = redoxide_caches) -> None:
        self._caches = caches

    def describe(self) -> list[Metric]:
        """Return the families without samples (the registry checks names with these)."""
        return self._families()[1]

    def collect(self) -> list[Metric]:
        """Return every family with the current counters."""
        fill, families = self._families()
        for alias, cache in self._caches():
            fill(alias, cache.stats(), cache.near_cache_stats())
        return families

    def _families(
        self,
    ) -> tuple[Callable[[str, dict[str, Any], dict[str, Any] | None], None], list[Metric]]:
        calls = CounterMetricFamily(
            "redoxide_commands", "Commands sent, by command family.", labels=_COMMAND
        )
        errors = CounterMetricFamily(
            "redoxide_command_errors",
            "Commands that failed, by command family and exception class.",
            labels=[*_COMMAND, "error"],
        )
        latency = HistogramMetricFamily(
            "redoxide_command_duration_seconds",
            "Round trips, from sending to the whole reply read (PIPELINE: a pipeline's).",
            labels=_COMMAND,
        )
        counters = {
            key: CounterMetricFamily(name, text, labels=_NODE) for key, name, text in _NODE_COUNTERS
        }
        connections = GaugeMetricFamily(
            "redoxide_connections", "Connections open to the server.", labels=_NODE
        )
        fail_open = CounterMetricFamily(
            "redoxide_fail_open_misses",
            "Calls answered by their fallback under IGNORE_EXCEPTIONS.",
            labels=["alias"],
        )

        near = {
            key: CounterMetricFamily(name, text, labels=["alias"])
            for key, name, text in _NEAR_COUNTERS
        }
        near_flushes = CounterMetricFamily(
            "redoxide_near_cache_flushes",
            "Near-cache flushes (everything dropped), by reason.",
            labels=["alias", "reason"],
        )
        near_gauges = {
            key: GaugeMetricFamily(name, text, labels=["alias"]) for key, name, text in _NEAR_GAUGES
        }

        def fill(alias: str, stats: dict[str, Any], kept: dict[str, Any] | None) -> None:
            if kept is not None:
                for key, counter in near.items():
                    counter.add_metric([alias], kept[key])
                for key, gauge in near_gauges.items():
                    gauge.add_metric([alias], kept[key])
                for reason, n in kept["flushes"].items():
                    near_flushes.add_metric([alias, reason], n)
            fail_open.add_metric([alias], stats["fail_open_misses"])
            for node, counts in stats["nodes"].items():
                where = [alias, node]
                for family, n in counts["calls"].items():
                    calls.add_metric([*where, family], n)
                for family, classes in counts["errors"].items():
                    for cls, n in classes.items():
                        errors.add_metric([*where, family, cls], n)
                for family, hist in counts["latency"].items():
                    latency.add_metric(
                        [*where, family], _buckets(hist), sum_value=hist["sum_us"] / 1e6
                    )
                for key, family in counters.items():
                    family.add_metric(where, counts[key])
                connections.add_metric(where, counts["connections"])

        families = [
            calls, errors, latency, *counters.values(), connections, fail_open,
            *near.values(), near_flushes, *near_gauges.values(),
        ]  # fmt: skip
        return fill, families


def _buckets(hist: dict[str, Any]) -> list[tuple[str, float]]:
    """Cumulative Prometheus buckets (upper bounds in seconds) from the per-bucket counts."""
    out, running = [], 0
    for bound, n in zip(hist["bounds_us"], hist["counts"], strict=False):
        running += n
        out.append((repr(bound / 1e6), float(running)))
    out.append(("+Inf", float(hist["count"])))
    return out


def register(registry: CollectorRegistry = REGISTRY) -> RedoxideCollector:
    """Register a collector of every redoxide cache with `registry` and return it."""
    collector = RedoxideCollector()
    registry.register(collector)
    return collector
