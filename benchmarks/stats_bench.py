"""What the counters and tracing cost: a build with the counters against one without, and a
cache with TRACING against one without, same run.

    flock /tmp/redoxide-cargo.lock .venv/bin/python benchmarks/stats_bench.py --build
    flock /tmp/redoxide-bench.lock .venv/bin/python benchmarks/stats_bench.py

``--build`` makes the comparison build once: ``maturin build --release --no-default-features``
(the ``stats`` cargo feature off), unpacked into ``target/nostats`` (a ``redoxide`` package the
child processes import through PYTHONPATH). Each round then runs one child process per build,
alternating which goes first, against one throwaway redis-server: sync get (one caller, a hit
on a small value) and async get with 50 in flight on one event loop. The figures are medians
of calls/s over the rounds; "ratio" is counters / no counters of those medians, "paired" the
median of each round's own ratio. The tracing figures come from the child of
the default build: get with TRACING on (an SDK TracerProvider with a BatchSpanProcessor whose
exporter drops the spans, and with no SDK at all: the API's no-op tracer) against the same
cache without it, call by call; the cost is the median difference in microseconds, and
redoxide's own part is what is left after the same span made alone. Prints a table; writes
nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parent.parent
NOSTATS = ROOT / "target" / "nostats"


def build() -> None:
    """Build the wheel without the counters and unpack it into target/nostats."""
    wheels = NOSTATS / "wheel"
    subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "--no-default-features",
         "--out", str(wheels)],
        cwd=ROOT, check=True,
    )  # fmt: skip
    (wheel,) = sorted(wheels.glob("redoxide-*.whl"), key=lambda p: p.stat().st_mtime)[-1:]
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(NOSTATS / "site")
    print(f"unpacked {wheel.name} into {NOSTATS / 'site'}")


def child(port: int, calls: int, tracing: bool) -> dict[str, Any]:
    """Measure in this process (one build) and return the figures."""
    harness.setup_django()
    from redoxide import RedisCache, _redoxide

    url = f"redis://127.0.0.1:{port}/0"
    cache = RedisCache(url, {})
    cache.set("k", "a small value")
    out: dict[str, Any] = {"stats": _redoxide.STATS_ENABLED}
    harness.per_second(lambda i: cache.get("k"), calls // 5)  # warm-up
    out["get"] = harness.per_second(lambda i: cache.get("k"), calls)

    async def in_flight() -> float:
        await harness.run_concurrent(cache.aget, [("k",)] * 1000, 50)  # warm-up
        many = [("k",)] * (max(1, calls * 2 // 50) * 50)
        wall, _ = await harness.timed_async(harness.run_concurrent, cache.aget, many, 50)
        return len(many) / wall

    out["aget50"] = asyncio.run(in_flight())
    if tracing:
        out.update(tracing_cost(url, calls))
    return out


def tracing_cost(url: str, calls: int) -> dict[str, float]:
    """Microseconds a traced get costs beyond an untraced one, with the no-op API and with the
    SDK, and redoxide's own part of the latter (less the same span made alone). The three are
    timed call by call, interleaved, so the host's load falls on them alike."""
    from redoxide import RedisCache

    plain = RedisCache(url, {"KEY_PREFIX": "plain"})
    traced = RedisCache(url, {"KEY_PREFIX": "traced", "OPTIONS": {"TRACING": True}})
    plain.set("k", "a small value")
    traced.set("k", "a small value")
    clock = time.perf_counter_ns

    def cost(alone: Callable[[], None] | None = None) -> tuple[float, float]:
        """(traced - plain, traced - plain - alone), median ns of each, in us."""
        extra, own = [], []
        for _ in range(calls):
            t0 = clock()
            plain.get("k")
            t1 = clock()
            traced.get("k")
            t2 = clock()
            if alone is not None:
                alone()
            t3 = clock()
            extra.append((t2 - t1) - (t1 - t0))
            own.append((t2 - t1) - (t1 - t0) - (t3 - t2))
        return statistics.median(extra) / 1000, statistics.median(own) / 1000

    out = {"trace_noop_us": cost()[0]}
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    tracer, kind = provider.get_tracer("bench"), trace.SpanKind.CLIENT
    attributes = traced._span_attributes["get"]

    def span_alone() -> None:
        tracer.start_span("GET", kind=kind, attributes=attributes).end()

    out["trace_sdk_us"], out["trace_own_us"] = cost(span_alone)
    provider.shutdown()
    return out


def run_child(port: int, calls: int, nostats: bool, tracing: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if nostats:
        env["PYTHONPATH"] = os.pathsep.join([str(NOSTATS / "site"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, __file__, "--child", str(port), "--calls", str(calls)]
    if tracing:
        cmd.append("--tracing")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["stats"] == nostats:
        raise SystemExit(f"the {'no-' if nostats else ''}stats child imported the wrong build")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--build", action="store_true", help="make the build without counters")
    parser.add_argument("--child", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--tracing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build()
        return
    if args.child:
        print(json.dumps(child(args.child, args.calls, args.tracing)))
        return
    if not (NOSTATS / "site" / "redoxide").is_dir():
        raise SystemExit("no build without counters: run with --build first (see the docstring)")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from servers import RedisServer

    runs: dict[str, list[dict[str, Any]]] = {"stats": [], "nostats": []}
    with RedisServer() as server:
        for i in range(args.rounds):
            order = ("stats", "nostats") if i % 2 == 0 else ("nostats", "stats")
            for name in order:
                tracing = name == "stats" and i < 3
                runs[name].append(run_child(server.port, args.calls, name == "nostats", tracing))
    # The ratio of the medians, and the median of each round's own ratio (the two children
    # of a round ran back to back, so a change of the host's load hits them alike).
    print(f"{'':24}{'counters':>12}{'none':>12}{'ratio':>8}{'paired':>8}")
    for key, label in (("get", "sync get, calls/s"), ("aget50", "aget 50 in flight")):
        on = statistics.median(r[key] for r in runs["stats"])
        off = statistics.median(r[key] for r in runs["nostats"])
        pairs = [a[key] / b[key] for a, b in zip(runs["stats"], runs["nostats"], strict=True)]
        paired = statistics.median(pairs)
        print(f"{label:24}{on:12.0f}{off:12.0f}{on / off:8.3f}{paired:8.3f}")
    traced = [r for r in runs["stats"] if "trace_sdk_us" in r]
    noop, sdk, own = (
        statistics.median(r[key] for r in traced)
        for key in ("trace_noop_us", "trace_sdk_us", "trace_own_us")
    )
    print(f"tracing on, API only (no SDK): {noop:+.2f} us a get")
    print(f"tracing on, SDK + batch export: {sdk:+.2f} us a get")
    print(f"  of which redoxide's own (less the same span made alone): {own:+.2f} us")


if __name__ == "__main__":
    main()
