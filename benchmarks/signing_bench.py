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
from collections.abc import Callable
from typing import Any

from harness import interleaved, setup_django, table
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


def cases(cache: Any) -> dict[str, Callable[[int], Any]]:
    cache.set("small", VALUE)
    cache.set("big", BIG)
    return {
        "get 150 B": lambda i: cache.get("small"),
        "set 150 B": lambda i: cache.set("small", VALUE),
        "get 14 KiB": lambda i: cache.get("big"),
        "set 14 KiB": lambda i: cache.set("big", BIG),
        "encode+decode 150 B (no I/O)": lambda i: cache._decode(cache._encode(VALUE), "k"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    setup_django(SECRET_KEY="signing-bench-" + "x" * 40)
    from redoxide import RedisCache

    with RedisServer() as server:
        contenders = {
            "unsigned": cases(RedisCache(server.url, {"KEY_PREFIX": "u"})),
            "signed": cases(
                RedisCache(server.url, {"KEY_PREFIX": "s", "OPTIONS": {"SIGN_VALUES": True}})
            ),
        }
        results = interleaved(contenders, args.rounds, args.calls)
        print(f"\n{args.rounds} rounds of {args.calls:,} calls, median calls/s (pickle)\n")
        print(table(results, reference="unsigned"))


if __name__ == "__main__":
    main()
