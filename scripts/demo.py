"""Show redoxide serving a Django project: ``make demo`` runs this.

Start a throwaway redis-server (the test suite's, tests/support/servers.py) and the example
project (examples/demo_site) under uvicorn, each on a free loopback port; send requests to
the sync and the async view, first one at a time and then in a concurrent burst; print the
responses, the counters and how many connections the server saw; then stop both processes by
pid, also on error or Ctrl-C.

Set REDOXIDE_BACKEND to run the same project on another backend, for example
``REDOXIDE_BACKEND=django.core.cache.backends.redis.RedisCache``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "tests"))

from support.servers import REDIS_SERVER, RedisServer, free_port  # noqa: E402

BACKEND = os.environ.get("REDOXIDE_BACKEND", "redoxide.RedisCache")
SEQUENTIAL = 3  # requests per view, one at a time
BURST = 60  # requests in the concurrent burst, half per view
BURST_THREADS = 20
START_TIMEOUT = 30.0


class DemoError(Exception):
    pass


def stop(proc: subprocess.Popen[bytes], name: str) -> None:
    """Stop a child process by its pid: SIGTERM, then SIGKILL if it lingers."""
    # A SIGTERM to the demo itself waits until this child is gone (see __main__).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        print(f"  stopped {name} (pid {proc.pid}, exit code {proc.returncode})")
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


@contextmanager
def process(
    name: str, args: list[str], log: Path, **kwargs: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `args` in the foreground as a child, logging to `log`, and always stop it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, **kwargs)
    print(f"  started {name} (pid {proc.pid})")
    try:
        yield proc
    finally:
        stop(proc, name)


def wait_until(ready: Any, proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"{name} exited with code {proc.returncode}:\n{tail(log)}")
        if ready():
            return
        time.sleep(0.05)
    raise DemoError(f"{name} did not become ready in {START_TIMEOUT:.0f} s:\n{tail(log)}")


def tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """Run a throwaway redis-server and always stop it (by its pid)."""
    server = RedisServer()
    # A SIGTERM to the demo itself waits until the server is gone (see __main__).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        server.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    name = f"redis-server on 127.0.0.1:{server.port}"
    pid = server.pid
    print(f"  started {name} (pid {pid})")
    try:
        yield server
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            server.stop()
            print(f"  stopped {name} (pid {pid})")
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def connected_clients(server: RedisServer) -> int:
    """Return the server's client connections, not counting the redis-cli asking."""
    return server.client_count()


def fetch(base: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        data: dict[str, Any] = json.load(response)
        return data


def http_ready(base: str) -> bool:
    try:
        fetch(base, "/")
    except (OSError, ValueError):
        return False
    return True


def describe(response: dict[str, Any]) -> str:
    report = response["report"]
    return (
        f"{response['view']:>5} view  hits={response['hits']:<3} total={response['total']:<3} "
        f"report: {report['count']} primes below {report['primes_below']} "
        f"(computed at {report['computed_at']:.3f}) counters={response['counters']}"
    )


def run_requests(base: str, redis: RedisServer) -> int:
    """Exercise both views and check the results; return the number of problems found."""
    problems = 0
    responses: list[dict[str, Any]] = []

    print(f"\n== {SEQUENTIAL} sequential requests per view ==")
    for _ in range(SEQUENTIAL):
        for path in ("/sync/", "/async/"):
            response = fetch(base, path)
            responses.append(response)
            print("  " + describe(response))
    print(f"  server connections now: {connected_clients(redis)}")

    print(f"\n== burst: {BURST} concurrent requests ({BURST_THREADS} client threads) ==")
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, connected_clients(redis))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    paths = ["/sync/", "/async/"] * (BURST // 2)
    errors: list[str] = []

    def one(path: str) -> dict[str, Any] | None:
        try:
            return fetch(base, path)
        except (OSError, ValueError) as exc:
            errors.append(f"{path}: {exc}")
            return None

    started = time.perf_counter()
    with ThreadPoolExecutor(BURST_THREADS) as pool:
        burst = [r for r in pool.map(one, paths) if r is not None]
    elapsed = time.perf_counter() - started
    done.set()
    sampler.join()
    responses += burst
    by_view = Counter(r["view"] for r in burst)
    print(
        f"  {len(burst)}/{BURST} answered in {elapsed:.2f} s "
        f"({by_view['sync']} sync, {by_view['async']} async)"
    )
    for error in errors[:5]:
        print(f"  error: {error}")
    problems += len(errors)
    now = connected_clients(redis)
    print(f"  server connections: peak during the burst {peak}, now {now}")

    print("\n== results ==")
    stats = fetch(base, "/stats/")
    counters = stats["counters"]
    print(f"  backend: {stats['backend']}")
    print(f"  counters: {counters}")
    expected = {
        "hits:sync": sum(1 for r in responses if r["view"] == "sync"),
        "hits:async": sum(1 for r in responses if r["view"] == "async"),
    }
    expected["hits:total"] = expected["hits:sync"] + expected["hits:async"]
    lost = False
    for key, want in expected.items():
        if counters.get(key) != want:
            print(f"  PROBLEM: {key} is {counters.get(key)} after {want} requests")
            lost = True
    totals = sorted(r["total"] for r in responses)
    if totals != list(range(1, len(responses) + 1)):
        print("  PROBLEM: several requests were handed the same total")
        lost = True
    if lost:
        # Django's BaseCache.aincr is aget + aset: concurrent increments overwrite each other.
        print("  increments were lost: this backend's incr/aincr is not atomic on the server")
        problems += 1
    else:
        print(f"  every hit counted: {expected['hits:total']} requests, no increment lost")
    computed = {r["report"]["computed_at"] for r in responses}
    print(
        f"  report computed {len(computed)} time(s) for {len(responses)} requests "
        "(get_or_set served the rest from the cache)"
    )
    return problems


def main() -> int:
    if shutil.which(REDIS_SERVER) is None:
        print(f"{REDIS_SERVER} not found: run `make install` (Debian package redis-server)")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="redoxide-demo-"))
    print(f"redoxide demo: backend {BACKEND}")
    try:
        with redis_server() as redis:
            http_port = free_port()  # after the server has bound its own port
            base = f"http://127.0.0.1:{http_port}"
            env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "demo_site.settings",
                "REDOXIDE_BACKEND": BACKEND,
                "REDOXIDE_URL": redis.url,
                "PYTHONUNBUFFERED": "1",
            }
            uvicorn_log = workdir / "uvicorn.log"
            uvicorn_args = [
                sys.executable, "-m", "uvicorn", "demo_site.asgi:application",
                "--app-dir", str(EXAMPLES),
                "--host", "127.0.0.1",
                "--port", str(http_port),
                "--lifespan", "off",
                "--no-access-log",
                "--log-level", "warning",
            ]  # fmt: skip
            with process(f"uvicorn on {base}", uvicorn_args, uvicorn_log, env=env) as uvicorn:
                wait_until(lambda: http_ready(base), uvicorn, "uvicorn", uvicorn_log)
                try:
                    problems = run_requests(base, redis)
                except urllib.error.HTTPError as exc:
                    raise DemoError(f"{exc.url} answered {exc.code}:\n{tail(uvicorn_log)}") from exc
                if problems and tail(uvicorn_log).strip():
                    print(f"\n  uvicorn log:\n{tail(uvicorn_log)}")
        print()
        print("demo OK" if not problems else f"demo FAILED: {problems} problem(s)")
        return 1 if problems else 0
    except (DemoError, RuntimeError) as exc:
        print(f"demo FAILED: {exc}")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    # Turn SIGTERM into SystemExit so the finally blocks stop the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main())
