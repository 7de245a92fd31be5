"""What SIGN_VALUES costs: get and set of a pickled value, signed vs unsigned, same run.

    .venv/bin/python benchmarks/signing_bench.py             # 10 rounds of 5,000 calls
    .venv/bin/python benchmarks/signing_bench.py --rounds 3

Two caches on one throwaway redis-server, the default pickle serializer, the ~150-byte
user-like dict of bench.py and a ~14 KiB list of 80 of them. Rounds interleave the two
caches (unsigned, signed, unsigned, ...); each figure is the median calls/s over the rounds,
and the ratio is signed / unsigned. Also times dumps + loads alone (no Redis), where the HMAC
is the whole difference. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import django
from django.conf import settings
from servers import RedisServer

VALUE: dict[str, Any] = {
    "id": 12345,
    "username": "someone",
    "email": "someone@example.com",
    "is_active": True,
    "groups": ["editors", "staff"],
    "score": 97.5,
}
BIG = [dict(VALUE, id=i) for i in range(80)]


def rate(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return calls / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    settings.configure(SECRET_KEY="signing-bench-" + "x" * 40)
    django.setup()
    from redoxide import RedisCache

    with RedisServer() as server:
        caches = {
            "unsigned": RedisCache(server.url, {"KEY_PREFIX": "u"}),
            "signed": RedisCache(server.url, {"KEY_PREFIX": "s", "OPTIONS": {"SIGN_VALUES": True}}),
        }
        results: dict[tuple[str, str], list[float]] = {}
        for cache in caches.values():
            cache.set("small", VALUE)
            cache.set("big", BIG)
        for _ in range(args.rounds):
            for name, cache in caches.items():
                cases: dict[str, Callable[[], Any]] = {
                    "get 150 B": lambda c=cache: c.get("small"),
                    "set 150 B": lambda c=cache: c.set("small", VALUE),
                    "get 14 KiB": lambda c=cache: c.get("big"),
                    "set 14 KiB": lambda c=cache: c.set("big", BIG),
                    "encode+decode 150 B (no I/O)": lambda c=cache: c._decode(
                        c._encode(VALUE), "k"
                    ),
                }
                for case, fn in cases.items():
                    results.setdefault((case, name), []).append(rate(fn, args.calls))
        print(f"\n{args.rounds} rounds of {args.calls:,} calls, median calls/s (pickle)\n")
        print(f"| {'case':<30} | unsigned | signed | signed / unsigned |")
        print(f"|{'-' * 32}|----------|--------|-------------------|")
        for case in dict.fromkeys(c for c, _ in results):
            unsigned = statistics.median(results[(case, "unsigned")])
            signed = statistics.median(results[(case, "signed")])
            print(
                f"| {case:<30} | {unsigned / 1000:7.1f}k | {signed / 1000:5.1f}k | "
                f"{signed / unsigned:17.2f} |"
            )


if __name__ == "__main__":
    main()
