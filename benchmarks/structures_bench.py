"""Sets, hashes and sorted sets: redoxide's sync calls against django-redis', calls per second.

    .venv/bin/python benchmarks/structures_bench.py [--calls N] [--rounds N]

One throwaway redis-server, one thread, one call at a time (so this is per-call client cost
plus one loopback round trip). For each call (sadd, smembers, hset, hget, zadd, zrange) both
backends run it `--calls` times per round on a key of their own, interleaved round by round;
the best round is reported, with redoxide's rate as a multiple of django-redis'. The sets,
hashes and sorted sets read hold 10 members. PING (redoxide's raw ``cache.client.execute``,
redis-py's ``ping``) is the floor: a round trip with no cache logic. Takes about 10 s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import django
from django.conf import settings
from servers import RedisServer

PARAMS = {"KEY_PREFIX": "bench", "VERSION": 1}
MEMBERS = [f"member-{i}" for i in range(10)]


def _setup_django() -> None:
    if not settings.configured:
        settings.configure(CACHES={}, INSTALLED_APPS=[])
        django.setup()


def workloads(
    cache: Any, name: str, hget: Callable[[str, str], Any], ping: Callable[[], Any]
) -> dict[str, Callable[[int], Any]]:
    """The calls timed, each taking the call's number (for a changing member or score)."""
    s, h, z = f"{name}:s", f"{name}:h", f"{name}:z"
    cache.sadd(s, *MEMBERS)
    cache.hset(h, mapping={m: i for i, m in enumerate(MEMBERS)})
    cache.zadd(z, {m: i for i, m in enumerate(MEMBERS)})
    return {
        "sadd": lambda i: cache.sadd(f"{name}:sw", i % 1000),
        "smembers": lambda i: cache.smembers(s),
        "hset": lambda i: cache.hset(f"{name}:hw", "field", i),
        "hget": lambda i: hget(h, "member-3"),
        "zadd": lambda i: cache.zadd(f"{name}:zw", {"m": i}),
        "zrange": lambda i: cache.zrange(z, 0, -1, withscores=True),
        # The floor: one round trip with no cache logic at all (keys, encoding, decoding).
        "PING": lambda i: ping(),
    }


def rate(call: Callable[[int], Any], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        call(i)
    return calls / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per round (3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    args = parser.parse_args()
    _setup_django()
    from django_redis.cache import RedisCache as DjangoRedisCache
    from redoxide import RedisCache

    with RedisServer() as server:
        ours = RedisCache(server.url, dict(PARAMS))
        theirs = DjangoRedisCache(server.url, dict(PARAMS))
        # django-redis has no hget: a field is read with its redis-py client and its decoder.
        raw, client = theirs.client.get_client(), theirs.client

        def their_hget(key: str, field: str) -> Any:
            return client.decode(raw.hget(client.make_key(key), field))

        contenders = {
            "redoxide": workloads(ours, "rx", ours.hget, lambda: ours.client.execute("PING")),
            "django-redis": workloads(theirs, "dr", their_hget, raw.ping),
        }
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.rounds):
            for op in contenders["redoxide"]:
                for who, calls in contenders.items():
                    r = rate(calls[op], args.calls)
                    best[who, op] = max(best.get((who, op), 0.0), r)
        print(f"redis-server {server_version(server)}, {args.calls} calls x {args.rounds} rounds")
        print(f"{'call':<10}{'redoxide/s':>12}{'django-redis/s':>16}{'ratio':>8}")
        for op in contenders["redoxide"]:
            ours_rate, theirs_rate = best["redoxide", op], best["django-redis", op]
            print(
                f"{op:<10}{ours_rate:>12,.0f}{theirs_rate:>16,.0f}{ours_rate / theirs_rate:>7.2f}x"
            )


def server_version(server: RedisServer) -> str:
    return server.info("server").get("redis_version", "?")


if __name__ == "__main__":
    main()
