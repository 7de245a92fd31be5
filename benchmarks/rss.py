"""Check that redoxide's memory stays flat: 1,000,000 mixed sync + async cache calls.

    .venv/bin/python benchmarks/rss.py              # redoxide, 1,000,000 calls
    .venv/bin/python benchmarks/rss.py --ops 200000 # shorter

RSS (from /proc/self/statm) is read after the first 10% of the calls and at the end; the
growth between the two must stay within 10%. Each block of 1,000
calls mixes sync get / set / get_many / incr / delete, serial awaits, and 50-in-flight
gathers on one long-lived event loop; every 10% a short-lived extra event loop
(asyncio.run) also uses the cache, so per-loop state that is never freed shows up too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import harness
from servers import RedisServer

PAGE = os.sysconf("SC_PAGE_SIZE")
KEYS = 5_000  # rotating key space
VALUE: dict[str, Any] = {"id": 1, "name": "user", "email": "user@example.com", "tags": ["a"]}
BIG_VALUE = [dict(VALUE, id=i) for i in range(80)]  # a few KiB
BLOCK = 1_000  # calls per block; the block below adds up to exactly this
LIMIT_PERCENT = 10.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def sync_block(cache: Any, base: int) -> int:
    """Run 200 sync calls; return how many."""
    for i in range(40):
        k = f"k{(base + i) % KEYS}"
        cache.set(k, VALUE)
        cache.get(k)
        cache.get(f"miss{i}")
        cache.incr("ctr")
        cache.delete(f"k{(base + i + 7) % KEYS}")
    return 200


async def async_block(cache: Any, base: int) -> int:
    """Run 100 serial awaits and 700 calls 50 in flight; return how many."""
    for i in range(20):
        k = f"a{(base + i) % KEYS}"
        await cache.aset(k, BIG_VALUE if i == 0 else VALUE)
        await cache.aget(k)
        await cache.aget_many([f"a{(base + i + j) % KEYS}" for j in range(10)])
        await cache.aincr("actr")
        await cache.adelete(f"a{(base + i + 3) % KEYS}")
    for j in range(14):
        keys = [f"c{(base + j * 50 + n) % KEYS}" for n in range(50)]
        if j % 2:
            await asyncio.gather(*(cache.aget(k) for k in keys))
        else:
            await asyncio.gather(*(cache.aset(k, VALUE) for k in keys))
    return 800


async def other_loop_block(cache: Any) -> None:
    await cache.aset("other-loop", VALUE)
    await asyncio.gather(*(cache.aget("other-loop") for _ in range(50)))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", type=int, default=1_000_000, help="total calls (default 1,000,000)")
    p.add_argument("--backend", default="redoxide.RedisCache", help="cache BACKEND to check")
    args = p.parse_args(argv)
    blocks = max(10, args.ops // BLOCK)
    checkpoint = blocks // 10

    with RedisServer() as server:
        harness.setup_django(
            CACHES={"default": {"BACKEND": args.backend, "LOCATION": server.url, "TIMEOUT": 300}}
        )
        from django.core.cache import caches

        cache = caches["default"]
        cache.set("ctr", 0)
        cache.set("actr", 0)
        loop = asyncio.new_event_loop()
        rss_start = rss_bytes()
        rss_first = 0
        ops = 0
        started = time.perf_counter()
        try:
            for b in range(blocks):
                base = b * 97
                ops += sync_block(cache, base)
                ops += loop.run_until_complete(async_block(cache, base))
                if (b + 1) % checkpoint == 0:
                    asyncio.run(other_loop_block(cache))
                if b + 1 == checkpoint:
                    rss_first = rss_bytes()
                    print(f"after {ops:,} calls: RSS {rss_first / 2**20:.1f} MiB", flush=True)
        finally:
            loop.close()
        elapsed = time.perf_counter() - started
        rss_end = rss_bytes()
        clients = server_clients(server.port)

    growth = (rss_end - rss_first) / rss_first * 100
    print(f"after {ops:,} calls: RSS {rss_end / 2**20:.1f} MiB")
    print(
        f"RSS at start {rss_start / 2**20:.1f} MiB; growth after the first {ops // 10:,} calls: "
        f"{growth:+.1f}% (limit {LIMIT_PERCENT:.0f}%); {ops / elapsed:,.0f} calls/s; "
        f"server connections at the end: {clients}"
    )
    ok = growth <= LIMIT_PERCENT
    print("OK" if ok else "FAIL: RSS grew more than the limit")
    return 0 if ok else 1


def server_clients(port: int) -> int:
    """Return the server's connected_clients, minus the connection asking."""
    import redis

    with redis.Redis(host="127.0.0.1", port=port) as r:
        return int(r.info("clients")["connected_clients"]) - 1


if __name__ == "__main__":
    sys.exit(main())
