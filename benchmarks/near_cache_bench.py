"""The near cache: hit latency beside LocMemCache and redoxide without it, the miss-path
overhead, and the staleness of reads after another client's writes.

    .venv/bin/python benchmarks/near_cache_bench.py              # latency table (~1 min)
    .venv/bin/python benchmarks/near_cache_bench.py --staleness 100000

Latency: ``cache.get`` / ``await cache.aget`` of one hot key (Django key making and
unpickling included) for 100 B, 1 KiB and 10 KiB values, per target, in rounds interleaved
target by target; the median of the rounds, in microseconds per call, and ratios from the
same run. Miss path: a key under a near-cached prefix that does not exist (every call goes to
the server: the lookup, the fill's GET + PTTL), and a key outside the prefixes.

Staleness: another client (redis-py) writes value i and, once acknowledged, this process
reads until it sees i; the delay from the acknowledgement to the first fresh read is
recorded, and any stale value read later than MAX_STALE_MS after the acknowledgement is a
violation (there must be none).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import harness
from servers import RedisServer

MAX_STALE_MS = 500
SIZES = {"100B": 100, "1KiB": 1024, "10KiB": 10 * 1024}


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


def time_sync(call: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


def time_async(call: Callable[[], Any], n: int) -> float:
    async def loop() -> float:
        await call()  # the loop's bridge is made on the first call
        start = time.perf_counter()
        for _ in range(n):
            await call()
        return (time.perf_counter() - start) / n * 1e6

    return asyncio.run(loop())


def wait_serving(cache: Any) -> None:
    deadline = time.monotonic() + 10
    cache.get("hot:probe")
    while not cache.near_cache_stats()["serving"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the near cache did not start serving")
        time.sleep(0.01)


def latency(url: str, rounds: int, n: int) -> None:
    caches = targets(url)
    wait_serving(caches["redoxide+near"])
    rows: dict[tuple[str, str, str], list[float]] = {}
    for size_name, size in SIZES.items():
        value = {"blob": b"x" * size}
        for cache in caches.values():
            cache.set("hot:key", value, None)
        for cache in caches.values():  # warm: the near cache installs on the first read
            for _ in range(3):
                cache.get("hot:key")
        for _ in range(rounds):
            for name, cache in caches.items():
                key = ("hit", size_name, name)
                rows.setdefault((*key, "sync"), []).append(
                    time_sync(lambda c=cache: c.get("hot:key"), n)
                )
                if name != "locmem":
                    rows.setdefault((*key, "async"), []).append(
                        time_async(lambda c=cache: c.aget("hot:key"), n)
                    )
    miss_n = max(200, n // 20)
    for _ in range(rounds):
        for name in ("redoxide", "redoxide+near"):
            cache = caches[name]
            for what, key in (("miss-tracked", "hot:absent"), ("miss-untracked", "cold:absent")):
                rows.setdefault((what, "-", name, "sync"), []).append(
                    time_sync(lambda c=cache, k=key: c.get(k), miss_n)
                )
                rows.setdefault((what, "-", name, "async"), []).append(
                    time_async(lambda c=cache, k=key: c.aget(k), miss_n)
                )
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"{'case':<16}{'size':<7}{'mode':<7}{'target':<15}{'us/call':>9}  ratios (same run)")
    for (what, size, name, mode), us in sorted(med.items()):
        ratio = ""
        if name == "redoxide+near":
            base = med.get((what, size, "redoxide", mode))
            loc = med.get((what, size, "locmem", "sync"))
            ratio = f"x{base / us:.1f} vs redoxide" if base else ""
            if loc and what == "hit":
                ratio += f", {us / loc:.2f} of locmem's time"
        print(f"{what:<16}{size:<7}{mode:<7}{name:<15}{us:>9.2f}  {ratio}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--staleness", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    setup_django()
    with RedisServer() as server:
        if args.staleness:
            staleness(server.url, server.port, args.staleness)
        else:
            latency(server.url, args.rounds, args.ops)


if __name__ == "__main__":
    main()
