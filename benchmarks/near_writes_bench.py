"""Process-local caches under writes, without an HTTP server: the full stack's read view body
(10 gets of hot keys and one 10-key get_many) with a set_many of the ten hot keys in 1% or 20%
of requests, run by PROCESSES worker processes of THREADS threads each at once.

    .venv-bench312/bin/python benchmarks/near_writes_bench.py
    .venv-bench312/bin/python benchmarks/near_writes_bench.py --variant before=../wt/python

Each worker process writes what the other keeps, as web workers do. Targets: redoxide's near
cache (NEAR_CACHE on the hot keys), django-vcache's client-side cache (CLIENT_SIDE_CACHE),
plain redoxide, and Django's LocMemCache (a floor: nothing is shared, nothing invalidated).
Every target runs SECONDS per cell after a second of warm-up, in rounds rotated so that none
always runs first; medians of the rounds. Reported: requests per second (all processes), the
ratios the near-cache issue sets targets on, and for redoxide the near cache's counters per
request (misses, fill waits, keys refreshed along with another fill). The coherence of what
is read is coherence_bench.py's: this one measures speed only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import VALUE  # the seeds' ~150-byte record, as the full stack's views store
from harness import median, rotated, setup_django
from servers import RedisServer

HERE = Path(__file__).resolve().parent
HOT = [f"hot:{i}" for i in range(10)]
TARGETS = ("redoxide-near", "redoxide-use", "vcache-csc", "redoxide", "locmem")


def cache_conf(target: str, url: str) -> dict[str, Any]:
    if target.startswith("redoxide-near"):
        return {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"NEAR_CACHE": {"PREFIXES": ["hot:"]}},
        }
    if target == "redoxide-use":
        # Admission by use: no prefixes named, keys kept once read twice lately.
        return {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"NEAR_CACHE": {"ADMIT_AFTER_READS": 2}},
        }
    if target.startswith("redoxide"):
        return {"BACKEND": "redoxide.RedisCache", "LOCATION": url}
    if target == "vcache-csc":
        return {
            "BACKEND": "django_vcache.backend.ValkeyCache",
            "LOCATION": url,
            "OPTIONS": {"CLIENT_SIDE_CACHE": {"ENABLED": True}},
        }
    if target == "locmem":
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    raise SystemExit(f"unknown target {target!r}")


def child(target: str, url: str, every: int, threads: int, start_at: float, seconds: float) -> Any:
    setup_django(CACHES={"default": cache_conf(target, url)})
    from django.core.cache import cache

    values = dict.fromkeys(HOT, VALUE)
    cache.set_many(values, None)
    counts = [0] * threads
    counting = threading.Event()
    stop = threading.Event()

    def worker(t: int) -> None:
        n = t
        while not stop.is_set():
            hits = sum(cache.get(key) is not None for key in HOT)
            got = cache.get_many(HOT)
            if hits != len(HOT) or len(got) != len(HOT):
                raise SystemExit(f"{target}: a hot key was missing")
            n += threads
            if n % every == 0:
                cache.set_many(values, None)
            if counting.is_set():
                counts[t] += 1

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    time.sleep(max(0.0, start_at - time.time()))
    for thread in pool:
        thread.start()
    time.sleep(1.0)  # warm-up: connections, tracking, the near cache filled
    before = near_stats(cache)
    counting.set()
    time.sleep(seconds)
    counting.clear()
    after = near_stats(cache)
    stop.set()
    for thread in pool:
        thread.join(timeout=5)
    done = sum(counts)
    per = {k: (after[k] - before[k]) / max(done, 1) for k in after}
    return {"requests": done, "near": per}


def near_stats(cache: Any) -> dict[str, float]:
    stats = getattr(cache, "near_cache_stats", lambda: None)()
    if not stats:
        return {}
    names = ("misses", "fill_waits", "refreshes", "hits", "installs", "own_writes_kept")
    names += ("fills_dropped", "invalidations")
    return {k: stats.get(k, 0) for k in names}


def cell(target: str, path: str | None, url: str, args: argparse.Namespace, every: int) -> Any:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
    start_at = time.time() + 1.5  # every process starts its threads at the same moment
    cmd = [sys.executable, __file__, "--child", target, "--url", url, "--every", str(every)]
    cmd += ["--threads", str(args.threads), "--seconds", str(args.seconds)]
    cmd += ["--start-at", repr(start_at)]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(args.processes)
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise SystemExit(f"{target} failed:\n{err.decode()[-3000:]}")
        outs.append(json.loads(out.decode().strip().splitlines()[-1]))
    requests = sum(o["requests"] for o in outs)
    near = {k: sum(o["near"].get(k, 0) for o in outs) / len(outs) for k in outs[0]["near"]}
    return requests / args.seconds, near


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--writes", default="1,20", help="percent of requests that write")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=PYTHONPATH")
    parser.add_argument("--child")
    parser.add_argument("--url")
    parser.add_argument("--every", type=int)
    parser.add_argument("--start-at", type=float)
    args = parser.parse_args()
    if args.child:
        out = child(args.child, args.url, args.every, args.threads, args.start_at, args.seconds)
        print(json.dumps(out))
        return 0
    targets: dict[str, str | None] = dict.fromkeys(args.targets.split(","))
    for variant in args.variant:
        name, _, path = variant.partition("=")
        targets[f"redoxide-near-{name}"] = path
    shares = [int(w) for w in args.writes.split(",")]
    results: dict[tuple[str, int], list[Any]] = {}
    with RedisServer() as server:
        url = server.url
        for round_ in range(args.rounds):
            for share in shares:
                for target in rotated(list(targets), round_):
                    server.flushall()
                    got = cell(target, targets[target], url, args, max(1, round(100 / share)))
                    results.setdefault((target, share), []).append(got)
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    report(results, list(targets), shares, args)
    if os.environ.get("NEAR_COUNTERS"):
        for (t, share), cells in results.items():
            print(t, share, {k: round(v, 2) for k, v in cells[-1][1].items()})
    return 0


def report(results: Any, targets: list[str], shares: list[int], args: argparse.Namespace) -> None:
    print(
        f"{args.processes} processes x {args.threads} threads, {args.seconds:g} s cells, "
        f"{args.rounds} rounds, medians; req/s (near cache per request: misses, fill waits, "
        "refreshed keys)"
    )
    for share in shares:
        rate = {t: median([r[0] for r in results[(t, share)]], 0) or 0.0 for t in targets}
        print(f"\n### set_many of the hot keys in {share}% of requests\n")
        head = "| target | req/s | / vcache-csc | / redoxide | / locmem |"
        print(head + " near misses, waits, refreshed |")
        print("|---|---:|---:|---:|---:|---|")
        for t in targets:
            near = results[(t, share)][-1][1]
            names = ("misses", "fill_waits", "refreshes")
            counters = ", ".join(f"{near.get(k, 0):.2f}" for k in names)
            ratios = [
                f"{rate[t] / rate[base]:.2f}" if rate.get(base) else "-"
                for base in ("vcache-csc", "redoxide", "locmem")
            ]
            cells = [t, f"{rate[t]:,.0f}", *ratios, counters if near else "-"]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
