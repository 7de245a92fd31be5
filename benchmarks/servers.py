"""The throwaway redis-server and the redis-benchmark ceilings used by the benchmarks.

The server runs in the foreground (``subprocess.Popen``, never ``--daemonize``) on a free
127.0.0.1 port with persistence off, and is stopped by its own pid.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from types import TracebackType

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server process on a free loopback port, stopped by pid."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("redis-server is not running")
        return self._proc.pid

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING."""
        self.dir = tempfile.mkdtemp(prefix="redoxide-bench-")
        self._proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--logfile",
                os.path.join(self.dir, "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop the server by pid: SIGTERM, then SIGKILL if it does not exit."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True)
    return out.stdout.strip()


def redis_benchmark_version() -> str:
    out = subprocess.run([REDIS_BENCHMARK, "--version"], capture_output=True, text=True)
    return out.stdout.strip()
