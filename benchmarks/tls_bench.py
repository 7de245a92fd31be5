"""TLS (rediss://) beside the peers: the seeds' calls over a verified TLS connection.

    .venv-bench312/bin/python benchmarks/tls_bench.py
    .venv-bench312/bin/python benchmarks/tls_bench.py --runs 5 \\
        --variant before=/work/wt-before/python          # a second build of redoxide beside
    .venv-bench312/bin/python benchmarks/tls_bench.py --plain   # the same over plain TCP

Method. One throwaway redis-server serves TLS (a CA and a certificate for 127.0.0.1 made here
with the openssl CLI; clients verify it with SSL_CA_CERTS). Each target runs in a child
process of its own (so two builds of redoxide can be measured in one run), round by round in
rotated order after a warm-up round; a child connects, warms its connections (the TLS
handshakes are not timed), then times OPS calls of each phase in each mode and reports calls
per second and its own CPU per call. Phases: get (a hit, a ~150-byte pickled dict), set, and
a 10-key get_many (per call). Modes: sync, async one call at a time, async with CONCURRENCY
calls in flight. django-redis runs sync only (its async methods are Django's sync_to_async
wrappers). Medians of the timed rounds; ratios against redoxide in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import median, rotated, setup_django
from servers import RedisServer, free_port

HERE = Path(__file__).resolve().parent
VALUE = {"id": 12345, "name": "a cached row", "tags": ["x", "y", "z"], "score": 0.5, "n": "x" * 40}
PHASES = ("get", "set", "mget")
MODES = ("sync", "async-serial", "async-concurrent")


def options_for(target: str, ca: str) -> tuple[str, dict[str, Any]]:
    """BACKEND and OPTIONS of a target, verifying the server with the CA at `ca` (none:
    plain TCP)."""
    if not ca:
        return options_for(target, "x")[0], {}
    if target.startswith("redoxide"):
        return "redoxide.RedisCache", {"SSL_CA_CERTS": ca}
    if target == "django-redis":
        return "django_redis.cache.RedisCache", {"CONNECTION_POOL_KWARGS": {"ssl_ca_certs": ca}}
    if target == "vcache":
        return "django_vcache.backend.ValkeyCache", {"ssl_ca_certs": ca}
    raise SystemExit(f"unknown target {target!r}")


def modes_of(target: str) -> tuple[str, ...]:
    return ("sync",) if target == "django-redis" else MODES


# -- the child: one target, one round ---------------------------------------------------------


def child(  # noqa: C901 - one timed loop per mode, side by side
    target: str, url: str, ca: str, ops: int, concurrency: int
) -> dict[str, list[float]]:
    backend, options = options_for(target, ca)
    setup_django(
        CACHES={"default": {"BACKEND": backend, "LOCATION": url, "OPTIONS": options}},
    )
    from django.core.cache import cache

    keys = [f"tls:{i}" for i in range(100)]
    cache.set_many(dict.fromkeys(keys, VALUE), 300)
    cache.get(keys[0])
    out: dict[str, list[float]] = {}

    def record(mode: str, phase: str, wall: float, cpu: float, calls: int) -> None:
        out[f"{mode}/{phase}"] = [calls / wall, cpu / calls * 1e6]

    def sync_call(phase: str, i: int) -> Any:
        if phase == "get":
            return cache.get(keys[i % 100])
        if phase == "set":
            return cache.set(keys[i % 100], VALUE, 300)
        return cache.get_many(keys[(i % 10) * 10 : (i % 10) * 10 + 10])

    async def async_call(phase: str, i: int) -> Any:
        if phase == "get":
            return await cache.aget(keys[i % 100])
        if phase == "set":
            return await cache.aset(keys[i % 100], VALUE, 300)
        return await cache.aget_many(keys[(i % 10) * 10 : (i % 10) * 10 + 10])

    for phase in PHASES:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for i in range(ops):
            sync_call(phase, i)
        record("sync", phase, time.perf_counter() - wall0, time.process_time() - cpu0, ops)
    if "async-serial" not in modes_of(target):
        return out

    async def async_modes() -> None:
        await cache.aget(keys[0])  # the async connection, handshake included, before timing
        for phase in PHASES:
            wall0, cpu0 = time.perf_counter(), time.process_time()
            for i in range(ops):
                await async_call(phase, i)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            record("async-serial", phase, wall, cpu, ops)

            async def worker(w: int, phase: str = phase) -> None:
                for i in range(w, ops, concurrency):
                    await async_call(phase, i)

            wall0, cpu0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(worker(w) for w in range(concurrency)))
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            record("async-concurrent", phase, wall, cpu, ops)

    asyncio.run(async_modes())
    return out


# -- the parent: server, rounds, report --------------------------------------------------------


def run_child(
    target: str, pythonpath: str | None, args: argparse.Namespace, url: str, ca: str
) -> Any:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    cmd = [sys.executable, __file__, "--child", target, "--url", url, "--ca", ca]
    cmd += ["--ops", str(args.ops), "--concurrency", str(args.concurrency)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=HERE)
    if done.returncode != 0:
        raise SystemExit(f"{target} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--targets", default="redoxide,vcache,django-redis")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=PYTHONPATH")
    parser.add_argument("--plain", action="store_true", help="plain TCP instead of TLS")
    parser.add_argument("--child")
    parser.add_argument("--url")
    parser.add_argument("--ca")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.url, args.ca, args.ops, args.concurrency)))
        return 0

    from support.tls import make_certs

    targets: dict[str, str | None] = dict.fromkeys(args.targets.split(","))
    for variant in args.variant:
        name, _, path = variant.partition("=")
        targets[f"redoxide-{name}"] = path
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp))
        tls_port = free_port()
        tls_args = (
            "--tls-port", str(tls_port),
            "--tls-cert-file", str(certs.server_cert),
            "--tls-key-file", str(certs.server_key),
            "--tls-ca-cert-file", str(certs.ca),
            "--tls-auth-clients", "no",
        )  # fmt: skip
        server = RedisServer(*tls_args).start()
        try:
            url = f"rediss://127.0.0.1:{tls_port}/0"
            ca = str(certs.ca)
            if args.plain:
                url, ca = f"redis://127.0.0.1:{server.port}/0", ""
            results: dict[str, dict[str, list[list[float]]]] = {t: {} for t in targets}
            for round_ in range(args.runs + 1):
                for target in rotated(list(targets), round_):
                    figures = run_child(target, targets[target], args, url, ca)
                    if round_ == 0:
                        continue  # warm-up
                    for cell, pair in figures.items():
                        results[target].setdefault(cell, []).append(pair)
                print(f"round {round_}/{args.runs} done", file=sys.stderr)
        finally:
            server.stop()
    report(results, args)
    return 0


def report(results: dict[str, dict[str, list[list[float]]]], args: argparse.Namespace) -> None:
    names = list(results)
    what = "plain TCP" if args.plain else "TLS"
    print(f"{what}, {args.ops} calls a phase, {args.runs} rounds, medians; calls/s (CPU us/call)")
    print(
        "| mode / phase | "
        + " | ".join(names)
        + " | "
        + " | ".join(f"{n} / redoxide" for n in names if n != "redoxide")
        + " |"
    )
    print("|---" * (len(names) * 2) + "|")
    for mode in MODES:
        for phase in PHASES:
            cell = f"{mode}/{phase}"
            rates = {}
            row = []
            for name in names:
                pairs = results[name].get(cell)
                if not pairs:
                    row.append("-")
                    continue
                rate = median([p[0] for p in pairs], 0) or 0.0
                cpu = median([p[1] for p in pairs], 1)
                rates[name] = rate
                row.append(f"{rate:,.0f} ({cpu})")
            base = rates.get("redoxide")
            ratios = [
                f"{rates[n] / base:.2f}" if base and n in rates else "-"
                for n in names
                if n != "redoxide"
            ]
            print(f"| {mode} {phase} | " + " | ".join(row) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
