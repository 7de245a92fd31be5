"""redoxide on a local 6-node cluster against Django's builtin backend on one node.

    .venv/bin/python benchmarks/cluster_bench.py [--runs N] [--ops N] [--busy]

Starts a throwaway cluster (3 primaries, 3 replicas; tests/support/servers.py) and one standalone
redis-server, all on loopback. Contenders run interleaved, run by run; each figure is the
median over the runs, so the ratios compare measurements taken in the same minutes:

- async, 50 in flight: gathers of 50 aget calls. redoxide on the cluster, redoxide on the
  single node, the builtin RedisCache on the single node (the target: cluster >= 10x builtin).
- get_many of 10 keys spread over 10 slots (all three primaries) in one call, against 10
  single gets: keys per second, sync and async serial (the target: >= 3x).
- server-side connections per cluster node after the runs (CLIENT LIST, minus the observer).

--busy holds /dev/cpu_dma_latency at 0 (the busy-host regime: these VMs halt idle CPUs;
see benchmarks/README.md).
Results go to benchmarks/results/cluster[-busy].json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

import harness  # noqa: E402
import result_files  # noqa: E402

harness.setup_django()

from redoxide._redoxide import key_slot  # noqa: E402
from servers import Cluster, RedisServer  # noqa: E402

IN_FLIGHT = 50


def build(backend: str, location: Any, options: dict[str, Any] | None = None) -> Any:
    from django.utils.module_loading import import_string

    return import_string(backend)(location, {"OPTIONS": options or {}})


def concurrent_rate(cache: Any, keys: list[str], ops: int) -> float:
    """aget calls per second with IN_FLIGHT in flight."""

    async def main() -> float:
        async def batch() -> None:
            got = await asyncio.gather(*(cache.aget(k) for k in keys[:IN_FLIGHT]))
            assert got[0] == "v", got[0]

        await batch()  # connect, learn the slots
        batches = ops // IN_FLIGHT
        wall, _ = await harness.timed_async(harness.run_serial, batch, [()] * batches)
        return batches * IN_FLIGHT / wall

    return asyncio.run(main())


def spread_keys(cache: Any, count: int) -> list[str]:
    """`count` keys whose made keys fall in distinct slots."""
    keys, slots = [], set()
    i = 0
    while len(keys) < count:
        slot = key_slot(cache.make_key(f"m{i}"))
        if slot not in slots:
            slots.add(slot)
            keys.append(f"m{i}")
        i += 1
    return keys


def many_rates(cache: Any, keys: list[str], ops: int) -> dict[str, float]:
    """Keys per second: get_many(10 keys) against single gets, sync and async serial."""
    rounds = max(1, ops // len(keys))

    def sync_single(i: int) -> None:
        for k in keys:
            cache.get(k)

    async def async_many(i: int) -> None:
        await cache.aget_many(keys)

    async def async_single(i: int) -> None:
        for k in keys:
            await cache.aget(k)

    per_call = len(keys)  # keys per call of each workload
    return {
        "sync_many": per_call * harness.per_second(lambda i: cache.get_many(keys), rounds),
        "sync_single": per_call * harness.per_second(sync_single, rounds),
        "async_many": per_call * harness.per_second(async_many, rounds),
        "async_single": per_call * harness.per_second(async_single, rounds),
    }


def connections(node: RedisServer) -> int:
    """Client connections of type normal (not replication links), minus redis-cli's own."""
    return len(node.cli("client", "list", "type", "normal").splitlines()) - 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--ops", type=int, default=5000, help="calls per run (default 5000)")
    parser.add_argument("--busy", action="store_true", help="busy-host regime")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    with Cluster() as cluster, RedisServer() as single, harness.busy(args.busy):
        contenders = {
            "redoxide cluster": build("redoxide.RedisCache", cluster.urls[:1], {"CLUSTER": True}),
            "redoxide single node": build("redoxide.RedisCache", single.url),
            "builtin single node": build("django.core.cache.backends.redis.RedisCache", single.url),
        }
        keys = [f"k{i}" for i in range(IN_FLIGHT)]
        for cache in contenders.values():
            cache.set_many(dict.fromkeys(keys, "v"))
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        cluster_cache = contenders["redoxide cluster"]
        spread = spread_keys(cluster_cache, 10)
        cluster_cache.set_many(dict.fromkeys(spread, "v"))
        primaries_hit = {
            cluster.primary_of_slot(key_slot(cluster_cache.make_key(k))).port for k in spread
        }
        many: dict[str, list[float]] = {}
        for run in range(args.runs):
            for name, cache in contenders.items():
                ops = args.ops if "builtin" not in name else max(IN_FLIGHT * 4, args.ops // 10)
                rates[name].append(concurrent_rate(cache, keys, ops))
            for key, value in many_rates(cluster_cache, spread, args.ops).items():
                many.setdefault(key, []).append(value)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
        per_node = {node.port: connections(node) for node in cluster.primaries()}

    med = {name: statistics.median(values) for name, values in rates.items()}
    mmed = {name: statistics.median(values) for name, values in many.items()}
    regime = "busy" if args.busy else "idle"
    print(f"\n## Cluster benchmark ({regime} host, median of {args.runs} runs)\n")
    print("| async, 50 in flight | aget calls/s | vs builtin single node |")
    print("|---|---|---|")
    for name, rate in med.items():
        print(f"| {name} | {rate:,.0f} | {rate / med['builtin single node']:.1f}x |")
    print(
        f"\n| get_many of 10 keys over 10 slots ({len(primaries_hit)} primaries) "
        "| keys/s get_many | keys/s single gets | ratio |"
    )
    print("|---|---|---|---|")
    for mode in ("sync", "async"):
        a, b = mmed[f"{mode}_many"], mmed[f"{mode}_single"]
        print(f"| {mode} serial | {a:,.0f} | {b:,.0f} | {a / b:.1f}x |")
    print(
        "\nserver-side connections per cluster primary (minus the observer): "
        + ", ".join(f"{port}: {n}" for port, n in per_node.items())
        + "  (one async multiplexed connection + one sync connection of the main thread)"
    )
    data = {
        "regime": regime,
        "runs": args.runs,
        "ops": args.ops,
        "aget_50_in_flight": {"median": med, "all": rates},
        "get_many_10_over_slots": {"median": mmed, "all": many},
        "connections_per_primary": per_node,
    }
    if not args.no_save:
        summary = {"aget_50_in_flight": med, "get_many_10_over_slots": mmed}
        out = result_files.save(f"cluster{'-busy' if args.busy else ''}", data, summary)
        print(f"\nwrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
