"""The throwaway servers of the benchmarks, and the redis-benchmark ceilings.

The servers are the test suite's (tests/support/servers.py: foreground processes on free
127.0.0.1 ports, persistence off, stopped by their own pid, REDOXIDE_SERVER_BIN honoured);
this module puts tests/ on sys.path and re-exports them, so a benchmark imports
``from servers import RedisServer`` like any module beside it.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from support.servers import Cluster, RedisServer, free_port, server_version  # noqa: E402

REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"

__all__ = [
    "Cluster",
    "RedisServer",
    "free_port",
    "redis_benchmark",
    "redis_benchmark_version",
    "redis_server_version",
]


def redis_benchmark(port: int, clients: int, requests: int, data_size: int) -> dict[str, float]:
    """Run ``redis-benchmark -P 1 -t get,set`` and return ops/s per command ("get", "set")."""
    out = subprocess.run(
        [
            REDIS_BENCHMARK,
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-c",
            str(clients),
            "-P",
            "1",
            "-n",
            str(requests),
            "-d",
            str(data_size),
            "-t",
            "get,set",
            "--csv",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    rates: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO(out.stdout)):
        rates[row["test"].lower()] = float(row["rps"])
    if set(rates) != {"get", "set"}:
        raise RuntimeError(f"unexpected redis-benchmark output: {out.stdout!r}")
    return rates


def redis_server_version() -> str:
    """Return ``redis-server --version`` of the binary the servers run."""
    return server_version()


def redis_benchmark_version() -> str:
    out = subprocess.run([REDIS_BENCHMARK, "--version"], capture_output=True, text=True)
    return out.stdout.strip()
