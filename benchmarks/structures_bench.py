"""Sets, hashes and sorted sets: redoxide's sync calls against django-redis', calls per second.

    .venv/bin/python benchmarks/structures_bench.py [--calls N] [--rounds N]

One throwaway redis-server, one thread, one call at a time (so this is per-call client cost
plus one loopback round trip). For each call (sadd, smembers, hset, hget, zadd, zrange) both
backends run it `--calls` times per round on a key of their own, interleaved round by round
(harness.py); the median of the rounds is reported, with redoxide's rate as a multiple of
django-redis'. The sets,
hashes and sorted sets read hold 10 members. PING (redoxide's raw ``cache.client.execute``,
redis-py's ``ping``) is the floor: a round trip with no cache logic. Takes about 10 s.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from harness import interleaved, setup_django, table
from servers import RedisServer

PARAMS = {"KEY_PREFIX": "bench", "VERSION": 1}
MEMBERS = [f"member-{i}" for i in range(10)]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per round (3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    args = parser.parse_args()
    setup_django()
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
        results = interleaved(contenders, args.rounds, args.calls)
        version = server.info("server").get("redis_version", "?")
        print(f"redis-server {version}, {args.calls} calls x {args.rounds} rounds, medians")
        print(table(results, reference="django-redis"))


if __name__ == "__main__":
    main()
