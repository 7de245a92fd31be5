"""Coherence of process-local caches under writes: how often, how far and how long a read returns
a value older than one already acknowledged before the read began.

    .venv-bench312/bin/python benchmarks/coherence_bench.py                 # every topology
    .venv-bench312/bin/python benchmarks/coherence_bench.py --topologies standalone --seconds 5

Method. One writer process and READERS reader processes of THREADS threads each share the hot
keys. The writer stores version v (1, 2, 3...) of every hot key, by `set` (one key at a time) or
by `set_many` (all of them in one call), and once the call has returned (the server acknowledged
it) publishes v and the moment it was acknowledged in shared memory. Each reader notes the
newest acknowledged version of a key, then reads the key through its cache: a read that returns
an older version is stale. Recorded per target: reads, stale reads (count and share), how many
versions behind, how long after the first newer version was acknowledged (milliseconds, the
worst and the 99th percentile), and the longest run of consecutive stale reads of one thread.
The first second is warm-up (connections, tracking, the near cache filling) and not counted.

Targets: redoxide's near cache (NEAR_CACHE on the hot keys' prefix, MAX_STALE_MS 500), plain
redoxide (the control: every read goes to the server), django-vcache's client-side cache
(CLIENT_SIDE_CACHE), which it offers on one server and Sentinel only (not on a cluster; run here
on one server), and plain django-vcache (its control). Topologies: one
server, a primary with replicas (redoxide reads from the replicas), Sentinel, Cluster.

A read can be stale for as long as the server's invalidation takes to arrive; past MAX_STALE_MS
it is a bug in redoxide's near cache (its staleness bound), reported as a violation.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from servers import Cluster, RedisServer

MAX_STALE_MS = 500
KEYS = 10
RING = 1 << 16  # acknowledgement times kept per key (a run writes far fewer versions)
WARMUP = 1.0
TOPOLOGIES = ("standalone", "replicas", "sentinel", "cluster")
KINDS = ("set", "set_many")


def target_params(target: str, topology: str, where: dict[str, Any]) -> tuple[str, Any, dict]:
    """(BACKEND, LOCATION, params) of `target` on `topology`, or raise KeyError if it has no
    such setup."""
    prefix = f"coh{uuid.uuid4().hex[:6]}"
    if target.startswith("vcache"):
        if topology != "standalone":
            raise KeyError(topology)  # its client-side cache: one server (or Sentinel) only
        options = {}
        if target == "vcache-csc":
            options["CLIENT_SIDE_CACHE"] = {"ENABLED": True, "MAX_SIZE": 10_000, "TTL": 300}
        return (
            "django_vcache.backend.ValkeyCache",
            where["url"],
            {
                "KEY_PREFIX": prefix,
                "OPTIONS": options,
            },
        )
    options: dict[str, Any] = {}
    if target == "redoxide-near":
        options["NEAR_CACHE"] = {"PREFIXES": ["hot:"], "MAX_STALE_MS": MAX_STALE_MS}
    elif target == "redoxide-use":  # admission by use
        options["NEAR_CACHE"] = {"ADMIT_AFTER_READS": 2, "MAX_STALE_MS": MAX_STALE_MS}
    location: Any = where["url"]
    if topology == "replicas":
        location = where["urls"]  # the primary first, then the replicas reads go to
    elif topology == "sentinel":
        location = f"redis://{where['service']}/0"
        options["SENTINELS"] = where["sentinels"]
    elif topology == "cluster":
        location = where["urls"]
        options["CLUSTER"] = True
    return "redoxide.RedisCache", location, {"KEY_PREFIX": prefix, "OPTIONS": options}


def build(backend: str, location: Any, params: dict[str, Any]) -> Any:
    import harness
    from django.utils.module_loading import import_string

    harness.setup_django(SECRET_KEY="bench")
    return import_string(backend)(location, params)


def writer(spec: tuple, kind: str, acked: Any, acked_at: Any, start: float, end: float) -> None:
    cache = build(*spec)
    keys = [f"hot:{i}" for i in range(KEYS)]
    cache.set_many(dict.fromkeys(keys, 0), timeout=None)
    version = 0
    while time.monotonic() < end:
        version += 1
        if kind == "set":
            for i, key in enumerate(keys):
                cache.set(key, version, timeout=None)
                acked_at[i * RING + version % RING] = time.monotonic()
                acked[i] = version
        else:
            cache.set_many(dict.fromkeys(keys, version), timeout=None)
            now = time.monotonic()
            for i in range(KEYS):
                acked_at[i * RING + version % RING] = now
                acked[i] = version
        if version % 64 == 0:
            time.sleep(0)  # let the readers' threads run on a busy host


def reader(spec: tuple, threads: int, pause: float, acked: Any, acked_at: Any, start: float,
           end: float, out: Any) -> None:  # fmt: skip
    cache = build(*spec)
    keys = [f"hot:{i}" for i in range(KEYS)]
    results: list[dict[str, Any]] = []

    def run() -> None:
        reads = stale = longest = current = behind_max = 0
        late: list[float] = []
        counting = False
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if not counting and now >= start + WARMUP:
                counting = True
            for i, key in enumerate(keys):
                before = acked[i]
                value = cache.get(key)
                if not counting or value is None:
                    continue
                reads += 1
                if value < before:
                    stale += 1
                    current += 1
                    longest = max(longest, current)
                    behind_max = max(behind_max, before - value)
                    first_newer = acked_at[i * RING + (value + 1) % RING]
                    late.append((time.monotonic() - first_newer) * 1000)
                else:
                    current = 0
            if pause:
                time.sleep(pause)  # a request's other work, between rounds of reads
        results.append(
            {"reads": reads, "stale": stale, "longest": longest, "behind": behind_max, "late": late}
        )

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(results)


def measure(
    spec: tuple, kind: str, readers: int, threads: int, seconds: float, pause: float
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    acked = ctx.Array("q", KEYS, lock=False)
    acked_at = ctx.Array("d", KEYS * RING, lock=False)
    out = ctx.Queue()
    start = time.monotonic() + 3.0  # the processes' imports and Django set-up
    end = start + WARMUP + seconds
    procs = [ctx.Process(target=writer, args=(spec, kind, acked, acked_at, start, end))]
    procs += [
        ctx.Process(target=reader, args=(spec, threads, pause, acked, acked_at, start, end, out))
        for _ in range(readers)
    ]
    for p in procs:
        p.start()
    threads_results: list[dict[str, Any]] = []
    for _ in range(readers):
        threads_results.extend(out.get(timeout=seconds + 120))
    for p in procs:
        p.join(timeout=60)
    late = sorted(ms for r in threads_results for ms in r["late"])
    reads = sum(r["reads"] for r in threads_results)
    stale = sum(r["stale"] for r in threads_results)
    return {
        "reads": reads,
        "stale": stale,
        "stale_share": stale / reads if reads else 0.0,
        "behind_max": max((r["behind"] for r in threads_results), default=0),
        "late_max_ms": late[-1] if late else 0.0,
        "late_p99_ms": late[int(len(late) * 0.99)] if late else 0.0,
        "longest_run": max((r["longest"] for r in threads_results), default=0),
    }


@contextlib.contextmanager
def topology(name: str) -> Iterator[dict[str, Any]]:
    from support.servers import ReplicaSet, SentinelSet

    if name == "standalone":
        with RedisServer() as server:
            yield {"url": server.url}
    elif name == "replicas":
        with ReplicaSet() as rs:
            urls = [rs.primary.url, *(r.url for r in rs.replicas)]
            yield {"url": rs.primary.url, "urls": urls}
    elif name == "sentinel":
        with SentinelSet() as sset:
            yield {"url": sset.primary.url, "service": sset.service,
                   "sentinels": sset.sentinel_addresses}  # fmt: skip
    else:
        with Cluster() as cluster:
            yield {"url": cluster.urls[0], "urls": cluster.urls}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topologies", default=",".join(TOPOLOGIES))
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--targets", default="redoxide-near,redoxide-use,vcache-csc,redoxide,vcache")
    p.add_argument("--seconds", type=float, default=4.0, help="counted seconds per cell")
    p.add_argument("--readers", type=int, default=2, help="reader processes")
    p.add_argument("--threads", type=int, default=2, help="threads per reader process")
    p.add_argument(
        "--pause-ms", type=float, default=0.0, help="readers sleep this long after each round"
    )
    args = p.parse_args()
    rows = []
    for name in args.topologies.split(","):
        with topology(name) as where:
            for kind in args.kinds.split(","):
                for target in args.targets.split(","):
                    try:
                        spec = target_params(target, name, where)
                    except KeyError:
                        continue
                    try:
                        got = measure(
                            spec, kind, args.readers, args.threads, args.seconds,
                            args.pause_ms / 1000,
                        )  # fmt: skip
                    except Exception as exc:  # a peer that cannot run here: say so, go on
                        print(f"  {name} {kind} {target}: failed: {exc!r}", flush=True)
                        continue
                    rows.append((name, kind, target, got))
                    print(f"  {name} {kind} {target}: {got}", flush=True)
    print()
    print(f"{args.readers} reader processes x {args.threads} threads, 1 writer, {KEYS} hot keys, "
          f"{args.seconds:g} s counted per cell after {WARMUP:g} s warm-up, readers pausing "
          f"{args.pause_ms:g} ms after each round of {KEYS} reads")  # fmt: skip
    print()
    print("| topology | writes | target | reads | stale | stale share | most versions behind "
          "| worst ms | p99 ms (stale reads) | longest stale run |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, kind, target, got in rows:
        flag = " (past MAX_STALE_MS)" if target.startswith("redoxide") and (
            got["late_max_ms"] > MAX_STALE_MS
        ) else ""  # fmt: skip
        print(
            f"| {name} | {kind} | {target} | {got['reads']:,} | {got['stale']:,} "
            f"| {got['stale_share']:.1%} | {got['behind_max']} | {got['late_max_ms']:.1f}{flag} "
            f"| {got['late_p99_ms']:.1f} | {got['longest_run']} |"
        )


if __name__ == "__main__":
    main()
