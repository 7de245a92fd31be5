"""delete_pattern over 100,000 matching keys: redoxide against django-redis.

    .venv/bin/python benchmarks/delete_pattern_bench.py [--rounds N] [--keys N]

One throwaway redis-server. Each round fills it with the matching keys ("bench:1:doomed:<i>")
plus 10,000 keys under another pattern that must survive, then times one delete_pattern call:
redoxide at its default itersize, redoxide at itersize 100 / 1000 / 5000 (the figures behind
the default), and django-redis' delete_pattern with its defaults. Contenders are interleaved
round by round; the median is reported, with the ratio to django-redis.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
from harness import setup_django
from servers import RedisServer

SURVIVORS = 10_000
FILL_BATCH = 10_000


def _fill(raw: redis.Redis, matching: int) -> None:
    """Store the matching keys and the survivors, as Django's default key function makes them."""
    raw.flushall()
    names = [f"bench:1:doomed:{i}" for i in range(matching)]
    names += [f"bench:1:kept:{i}" for i in range(SURVIVORS)]
    pipe = raw.pipeline(transaction=False)
    for start in range(0, len(names), FILL_BATCH):
        pipe.mset({name: b"x" * 32 for name in names[start : start + FILL_BATCH]})
    pipe.execute()


def _check(raw: redis.Redis, deleted: int, matching: int, who: str) -> None:
    left = raw.dbsize()
    if deleted != matching or left != SURVIVORS:
        raise SystemExit(f"{who}: deleted {deleted} of {matching}, {left} keys left")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    setup_django()

    from django_redis.cache import RedisCache as DjangoRedisCache
    from redoxide import RedisCache
    from redoxide._patterns import DEFAULT_ITERSIZE

    Cache = RedisCache

    with RedisServer() as server:
        raw = redis.Redis(host="127.0.0.1", port=server.port)
        params: dict[str, Any] = {"KEY_PREFIX": "bench"}
        ours = Cache(server.url, params)
        theirs = DjangoRedisCache(server.url, params)
        contenders: dict[str, Callable[[], int]] = {
            f"redoxide (default, itersize={DEFAULT_ITERSIZE})": lambda: ours.delete_pattern(
                "doomed:*"
            ),
            "redoxide itersize=100": lambda: ours.delete_pattern("doomed:*", itersize=100),
            "redoxide itersize=1000": lambda: ours.delete_pattern("doomed:*", itersize=1000),
            "redoxide itersize=5000": lambda: ours.delete_pattern("doomed:*", itersize=5000),
            "django-redis (defaults)": lambda: theirs.delete_pattern("doomed:*"),
        }
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, run in contenders.items():
                _fill(raw, args.keys)
                start = time.perf_counter()
                deleted = run()
                times[name].append(time.perf_counter() - start)
                _check(raw, deleted, args.keys, name)
        raw.close()

    baseline = statistics.median(times["django-redis (defaults)"])
    print(
        f"delete_pattern of {args.keys:,} keys ({SURVIVORS:,} others kept), median of "
        f"{args.rounds} rounds"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:<38} {median:8.3f} s   {baseline / median:6.1f}x django-redis")


if __name__ == "__main__":
    main()
