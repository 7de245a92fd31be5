"""The near cache: hit latency beside LocMemCache and redoxide without it, the miss-path
overhead, and the staleness of reads after another client's writes.

    .venv/bin/python benchmarks/near_cache_bench.py              # latency table (~1 min)
    .venv/bin/python benchmarks/near_cache_bench.py --staleness 100000
    .venv/bin/python benchmarks/near_cache_bench.py --cluster    # the miss path on a cluster

Latency: ``cache.get`` / ``await cache.aget`` of one hot key (Django key making and
unpickling included) for 100 B, 1 KiB and 10 KiB values, per target, in rounds interleaved
target by target (harness.py); the median of the rounds, in microseconds per call, and
ratios from the same run. Miss path: a key under a near-cached prefix that does not exist
(every call goes to the server: the lookup, the fill's GET + PTTL), a key outside the
prefixes, and get_many of ten kept keys that do not exist (ten fills in one round trip).

Staleness: another client (redis-py) writes value i and, once acknowledged, this process
reads until it sees i; the delay from the acknowledgement to the first fresh read is
recorded, and any stale value read later than MAX_STALE_MS after the acknowledgement is a
violation (there must be none).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any

import harness
from servers import Cluster, RedisServer

MAX_STALE_MS = 500
SIZES = {"100B": 100, "1KiB": 1024, "10KiB": 10 * 1024}
BATCH = 10


def setup_django() -> None:
    harness.setup_django(
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        SECRET_KEY="bench",
    )


def targets(url: str) -> dict[str, Any]:
    from django.core.cache.backends.locmem import LocMemCache
    from redoxide import RedisCache

    near = {"PREFIXES": ["hot:"], "MAX_STALE_MS": MAX_STALE_MS}
    prefix = uuid.uuid4().hex[:6]
    return {
        "locmem": LocMemCache("bench", {}),
        "redoxide": RedisCache(url, {"KEY_PREFIX": prefix}),
        "redoxide+near": RedisCache(url, {"KEY_PREFIX": prefix, "OPTIONS": {"NEAR_CACHE": near}}),
    }


def wait_serving(cache: Any) -> None:
    deadline = time.monotonic() + 10
    # Tracking starts on a lookup of a kept key (on a cluster, once the slots are known).
    while cache.get("hot:probe") is not None or not cache.near_cache_stats()["serving"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the near cache did not start serving")
        time.sleep(0.01)


def _us_per_call(call: Callable[[int], Any], n: int) -> float:
    return 1e6 / harness.per_second(call, n)


def _awaited(method: Callable[..., Any], *args: Any) -> Callable[[int], Any]:
    """A workload that awaits method(*args) (harness times coroutine functions on a loop)."""

    async def call(i: int) -> Any:
        return await method(*args)

    return call


def _workloads(cache: Any, name: str) -> dict[str, Callable[[int], Any]]:
    """What one target runs, by workload name (locmem: sync hits only)."""
    work: dict[str, Callable[[int], Any]] = {}
    for size in SIZES:
        work[f"hit {size} sync"] = lambda i, k=f"hot:{size}": cache.get(k)
        if name != "locmem":
            work[f"hit {size} async"] = _awaited(cache.aget, f"hot:{size}")
    return work


def _miss_workloads(cache: Any) -> dict[str, Callable[[int], Any]]:
    """Every call goes to the server: a kept key that does not exist (lookup, the fill's GET
    and PTTL, the token cancelled), one outside the prefixes, and get_many of ten kept keys
    that do not exist (ten fills in one round trip)."""
    many = [f"hot:absent{i}" for i in range(BATCH)]
    return {
        "miss-tracked sync": lambda i: cache.get("hot:absent"),
        "miss-tracked async": _awaited(cache.aget, "hot:absent"),
        "miss-untracked sync": lambda i: cache.get("cold:absent"),
        "miss-untracked async": _awaited(cache.aget, "cold:absent"),
        f"get_many {BATCH} misses sync": lambda i: cache.get_many(many),
        f"get_many {BATCH} misses async": _awaited(cache.aget_many, many),
    }


def _write_workloads(cache: Any) -> dict[str, Callable[[int], Any]]:
    """set of a kept key (near: through its primary's tracking connection, kept as written)
    and of a key outside the prefixes (the usual way, its drops made on the way)."""
    return {
        "set kept sync": lambda i: cache.set("hot:w", i),
        "set kept async": _awaited(cache.aset, "hot:w", 1),
        "set not kept sync": lambda i: cache.set("cold:w", i),
        "set not kept async": _awaited(cache.aset, "cold:w", 1),
    }


def latency(url: str, rounds: int, n: int) -> None:
    caches = targets(url)
    wait_serving(caches["redoxide+near"])
    for size_name, size in SIZES.items():
        for cache in caches.values():
            cache.set(f"hot:{size_name}", {"blob": b"x" * size}, None)
            for _ in range(3):  # warm: the near cache installs on the first read
                cache.get(f"hot:{size_name}")
    hits = harness.interleaved(
        {name: _workloads(cache, name) for name, cache in caches.items()},
        rounds,
        n,
        _us_per_call,
    )
    misses = harness.interleaved(
        {name: _miss_workloads(caches[name]) for name in ("redoxide", "redoxide+near")},
        rounds,
        max(200, n // 20),
        _us_per_call,
    )
    for results, reference in ((hits, "redoxide"), (misses, "redoxide")):
        print(
            harness.table(
                results, reference, unit="us/call", higher_is_better=False, fmt=lambda v: f"{v:.2f}"
            )
        )
        print()
    print(caches["redoxide+near"].near_cache_stats())


def staleness(url: str, port: int, rounds: int) -> None:
    import redis
    from redoxide import RedisCache

    cache = RedisCache(
        url,
        {
            "KEY_PREFIX": "s",
            "OPTIONS": {"NEAR_CACHE": {"PREFIXES": ["hot:"], "MAX_STALE_MS": MAX_STALE_MS}},
        },
    )
    writer = redis.Redis(port=port)
    wait_serving(cache)
    made = cache.make_and_validate_key("hot:n")
    writer.set(made, b"0")
    delays: list[float] = []
    violations = 0
    for i in range(1, rounds + 1):
        cache.get("hot:n")  # keep it local between writes
        writer.set(made, str(i).encode())
        acked = time.perf_counter()
        while True:
            seen = cache.get("hot:n")
            now = time.perf_counter()
            if seen == i:
                delays.append((now - acked) * 1e6)
                break
            if now - acked > MAX_STALE_MS / 1000:
                violations += 1
    delays.sort()
    q = lambda p: delays[min(len(delays) - 1, int(p * len(delays)))]  # noqa: E731
    print(
        f"{rounds} rounds: stale reads past MAX_STALE_MS ({MAX_STALE_MS} ms): {violations}; "
        f"delay to the fresh value p50 {q(0.5):.0f} us, p99 {q(0.99):.0f} us, "
        f"p99.9 {q(0.999):.0f} us, max {delays[-1]:.0f} us"
    )
    print(cache.near_cache_stats())


def cluster_misses(urls: list[str], rounds: int, n: int) -> None:
    """The miss workloads on a cluster: get_many's ten keys span the three primaries, so a
    near cache's fills go to each owner at once (all sent before any is waited for); and
    set, of a kept key and of one not kept."""
    from redoxide import RedisCache

    near = {"PREFIXES": ["hot:"], "MAX_STALE_MS": MAX_STALE_MS}
    options: dict[str, Any] = {"CLUSTER": True}
    caches = {
        "cluster": RedisCache(urls, {"KEY_PREFIX": "c", "OPTIONS": options}),
        "cluster+near": RedisCache(
            urls, {"KEY_PREFIX": "c", "OPTIONS": {**options, "NEAR_CACHE": near}}
        ),
    }
    wait_serving(caches["cluster+near"])
    caches["cluster"].get("hot:probe")  # learn the slots before timing
    results = harness.interleaved(
        {name: {**_miss_workloads(c), **_write_workloads(c)} for name, c in caches.items()},
        rounds,
        max(200, n // 20),
        _us_per_call,
    )
    print(
        harness.table(
            results, "cluster", unit="us/call", higher_is_better=False, fmt=lambda v: f"{v:.2f}"
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--staleness", type=int, default=0, metavar="ROUNDS")
    parser.add_argument("--cluster", action="store_true", help="the miss path on a cluster")
    args = parser.parse_args()
    setup_django()
    if args.cluster:
        with Cluster() as cluster:
            cluster_misses(cluster.urls[:1], args.rounds, args.ops)
        return
    with RedisServer() as server:
        if args.staleness:
            staleness(server.url, server.port, args.staleness)
        else:
            latency(server.url, args.rounds, args.ops)


if __name__ == "__main__":
    main()
