"""ASGI soak: the example project under uvicorn, many keep-alive HTTP clients, for a minute.

    .venv/bin/python benchmarks/soak.py                  # 60 s, 64 connections (make soak)
    .venv/bin/python benchmarks/soak.py --seconds 10     # a quick look

Starts a throwaway redis-server and examples/demo_site under uvicorn (one worker process,
uvloop when installed), each on a free loopback port, then keeps `--connections` HTTP/1.1
keep-alive connections busy on ``/soak/`` (an async view doing six cache calls: aincr,
aget_or_set, a 10-key aget_many, aset, aget, adelete). Every second it samples the uvicorn
process' RSS (``/proc/<pid>/status``), the server's ``connected_clients`` (INFO, on one
observer connection that is not counted), and the requests finished and their status codes.

Targets: server connections per worker process <= 2 throughout; RSS growth after
the warm-up < 5%; no 5xx while Redis is healthy. The summary prints each with PASS/FAIL,
results go to benchmarks/results/soak.json, and the exit status is 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servers import RedisServer, free_port, redis_server_version

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RESULTS = Path(__file__).resolve().parent / "results"
BACKEND = os.environ.get("REDOXIDE_BACKEND", "redoxide.RedisCache")
PATH = "/soak/"
KEY_PREFIX = "demo"  # examples/demo_site/settings.py
START_TIMEOUT = 30.0
TARGET_CONNECTIONS = 2
TARGET_RSS_GROWTH = 5.0  # percent
RSS_WINDOW = 5  # samples averaged (median) at each end of the RSS comparison

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in requirements-dev.txt
    uvloop = None


@dataclass
class Stats:
    """What the load generator has seen so far."""

    latencies: list[float] = field(default_factory=list)  # seconds, after the warm-up
    statuses: Counter[int] = field(default_factory=Counter)
    done: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    measuring: bool = False


# -- HTTP/1.1 keep-alive client ----------------------------------------------------------------


async def read_response(reader: asyncio.StreamReader) -> int:
    """Read one response (Content-Length or chunked body); return its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def client(port: int, stats: Stats, deadline: float) -> None:
    """Send requests one after another on one keep-alive connection until the deadline."""
    request = f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.monotonic() < deadline:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert reader is not None
            started = time.perf_counter()
            writer.write(request)
            status = await read_response(reader)
            elapsed = time.perf_counter() - started
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            stats.errors[type(exc).__name__] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.05)
            continue
        stats.done += 1
        stats.statuses[status] += 1
        if stats.measuring:
            stats.latencies.append(elapsed)
    if writer is not None:
        writer.close()


# -- sampling ------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def info_clients(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Return connected_clients, not counting this observer connection."""
    writer.write(b"*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n")
    size = int((await reader.readuntil(b"\r\n"))[1:-2])
    body = (await reader.readexactly(size + 2)).decode()
    for line in body.splitlines():
        if line.startswith("connected_clients:"):
            return int(line.partition(":")[2]) - 1
    raise RuntimeError("INFO clients has no connected_clients")


async def sampler(
    redis_port: int, pid: int, stats: Stats, deadline: float, samples: list[dict[str, Any]]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", redis_port)
    start = time.monotonic()
    last_done, last_statuses = 0, Counter[int]()
    next_at = start + 1.0
    while next_at <= deadline + 0.01:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        now = time.monotonic()
        statuses = stats.statuses - last_statuses
        samples.append(
            {
                "t": round(now - start, 2),
                "rss_kib": rss_kib(pid),
                "redis_clients": await info_clients(reader, writer),
                "requests": stats.done - last_done,
                "statuses": {str(k): v for k, v in sorted(statuses.items())},
            }
        )
        last_done, last_statuses = stats.done, Counter(stats.statuses)
        next_at += 1.0
    writer.close()


async def run_load(
    http_port: int, redis_port: int, pid: int, args: argparse.Namespace
) -> tuple[Stats, list[dict[str, Any]], float]:
    stats = Stats()
    samples: list[dict[str, Any]] = []
    start = time.monotonic()
    deadline = start + args.seconds

    async def start_measuring() -> None:
        await asyncio.sleep(args.warmup)
        stats.measuring = True

    tasks = [asyncio.create_task(client(http_port, stats, deadline)) for _ in range(args.clients)]
    tasks.append(asyncio.create_task(sampler(redis_port, pid, stats, deadline, samples)))
    tasks.append(asyncio.create_task(start_measuring()))
    await asyncio.gather(*tasks)
    return stats, samples, time.monotonic() - start


# -- processes ----------------------------------------------------------------------------------


def seed(port: int) -> None:
    """Write the ten keys the view reads with aget_many, in Django's stored format."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for i in range(10):
            key = f"{KEY_PREFIX}:1:soak:page:{i}".encode()
            value = pickle.dumps({"id": i, "title": f"page {i}", "tags": ["a", "b"]}, 5)
            parts = [b"SET", key, value]
            sock.sendall(b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
            if not sock.recv(64).startswith(b"+OK"):
                raise RuntimeError("seeding the soak keys failed")


def http_ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# -- report -------------------------------------------------------------------------------------


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def summarize(
    stats: Stats, samples: list[dict[str, Any]], elapsed: float, args: argparse.Namespace
) -> dict[str, Any]:
    after = [s for s in samples if s["t"] > args.warmup]
    measured = after or samples
    latencies = sorted(stats.latencies)
    rss_base = statistics.median(s["rss_kib"] for s in measured[:RSS_WINDOW])
    rss_end = statistics.median(s["rss_kib"] for s in measured[-RSS_WINDOW:])
    statuses = Counter({int(k): v for k, v in stats.statuses.items()})
    five_xx = sum(v for k, v in statuses.items() if k >= 500)
    measured_requests = sum(s["requests"] for s in measured)
    measured_seconds = len(measured)
    summary = {
        "requests": stats.done,
        "requests_per_second": measured_requests / measured_seconds if measured_seconds else 0,
        "latency_ms": {
            "p50": percentile(latencies, 50) * 1000,
            "p90": percentile(latencies, 90) * 1000,
            "p99": percentile(latencies, 99) * 1000,
            "max": (latencies[-1] if latencies else float("nan")) * 1000,
        },
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "status_5xx": five_xx,
        "client_errors": dict(stats.errors),
        "redis_clients": {
            "max": max(s["redis_clients"] for s in samples),
            "min": min(s["redis_clients"] for s in samples),
            "max_after_warmup": max(s["redis_clients"] for s in measured),
        },
        "rss_kib": {
            "first_sample": samples[0]["rss_kib"],
            "after_warmup": rss_base,
            "end": rss_end,
            "max": max(s["rss_kib"] for s in samples),
            "growth_percent": (rss_end - rss_base) / rss_base * 100,
        },
        "elapsed_seconds": elapsed,
    }
    summary["targets"] = {
        "connections_per_worker_le_2": summary["redis_clients"]["max"] <= TARGET_CONNECTIONS,
        "rss_growth_lt_5_percent": summary["rss_kib"]["growth_percent"] < TARGET_RSS_GROWTH,
        "zero_5xx": five_xx == 0,
    }
    return summary


def print_summary(summary: dict[str, Any], args: argparse.Namespace) -> None:
    lat, rss, conns = summary["latency_ms"], summary["rss_kib"], summary["redis_clients"]
    targets = summary["targets"]

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    rows = [
        ("duration / warm-up", f"{args.seconds:.0f} s / {args.warmup:.0f} s", ""),
        ("HTTP connections", f"{args.clients} keep-alive", ""),
        ("requests", f"{summary['requests']:,}", ""),
        ("requests/s (after warm-up)", f"{summary['requests_per_second']:,.0f}", ""),
        (
            "latency p50 / p90 / p99",
            f"{lat['p50']:.1f} / {lat['p90']:.1f} / {lat['p99']:.1f} ms",
            "",
        ),
        ("latency max", f"{lat['max']:.1f} ms", ""),
        ("status codes", ", ".join(f"{k}: {v:,}" for k, v in summary["statuses"].items()), ""),
        ("5xx responses", str(summary["status_5xx"]), verdict(targets["zero_5xx"])),
        ("client errors", str(sum(summary["client_errors"].values())), ""),
        (
            "Redis connections (min / max)",
            f"{conns['min']} / {conns['max']} (1 worker)",
            verdict(targets["connections_per_worker_le_2"]),
        ),
        (
            "RSS after warm-up -> end",
            f"{rss['after_warmup'] / 1024:.1f} -> {rss['end'] / 1024:.1f} MiB "
            f"({rss['growth_percent']:+.1f}%)",
            verdict(targets["rss_growth_lt_5_percent"]),
        ),
        (
            "RSS first sample / max",
            f"{rss['first_sample'] / 1024:.1f} / {rss['max'] / 1024:.1f} MiB",
            "",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    print()
    for name, value, check in rows:
        print(f"  {name:<{width}}  {value:<{value_width}}  {check}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration (60)")
    parser.add_argument("--warmup", type=float, default=10.0, help="warm-up seconds (10)")
    parser.add_argument(
        "--connections", dest="clients", type=int, default=64, help="HTTP connections (64)"
    )
    parser.add_argument("--no-save", action="store_true", help="do not write results/soak.json")
    args = parser.parse_args(argv)
    if args.warmup + RSS_WINDOW >= args.seconds:
        parser.error("--seconds must exceed --warmup by more than 5")

    loop_name = "uvloop" if uvloop is not None else "asyncio"
    print(
        f"soak: {args.clients} connections for {args.seconds:.0f} s (warm-up {args.warmup:.0f} s)"
        f" on {PATH}, backend {BACKEND}, uvicorn loop {loop_name}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="redoxide-soak-"))
    with RedisServer() as redis:
        seed(redis.port)
        http_port = free_port()
        base = f"http://127.0.0.1:{http_port}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "demo_site.settings",
            "REDOXIDE_BACKEND": BACKEND,
            "REDOXIDE_URL": redis.url,
            "PYTHONUNBUFFERED": "1",
        }
        log = workdir / "uvicorn.log"
        uvicorn_args = [
            sys.executable, "-m", "uvicorn", "demo_site.asgi:application",
            "--app-dir", str(EXAMPLES),
            "--host", "127.0.0.1",
            "--port", str(http_port),
            "--workers", "1",
            "--loop", "uvloop" if uvloop is not None else "asyncio",
            "--lifespan", "off",
            "--no-access-log",
            "--log-level", "warning",
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                uvicorn_args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env
            )
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not http_ready(base):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"uvicorn did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
            runner = uvloop.run if uvloop is not None else asyncio.run
            stats, samples, elapsed = runner(run_load(http_port, redis.port, proc.pid, args))
        finally:
            stop(proc)
        server_log = log.read_text(errors="replace")
    summary = summarize(stats, samples, elapsed, args)
    print_summary(summary, args)
    if server_log.strip():
        print(f"\n  uvicorn log (last lines):\n{server_log[-2000:]}")
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {
            "seconds": args.seconds,
            "warmup": args.warmup,
            "connections": args.clients,
            "path": PATH,
            "backend": BACKEND,
            "loop": loop_name,
            "workers": 1,
            "python": platform.python_version(),
            "redis": redis_server_version(),
            "cpus": os.cpu_count(),
        },
        "summary": summary,
        "samples": samples,
    }
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / "soak.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\n  wrote {path.relative_to(ROOT)}")
    return 0 if all(summary["targets"].values()) else 1


if __name__ == "__main__":
    # Turn SIGTERM into SystemExit so the servers are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main())
