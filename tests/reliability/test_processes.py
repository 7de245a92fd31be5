"""Processes: a child forked after the parent used the cache, pre-fork workers (gunicorn-style),
and interpreter exit with calls in flight. Each must neither hang nor share a connection with
another process. Run with -s to see the measured figures (lines starting "measured:").
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest
from support.backend import build_cache, is_redoxide
from support.servers import RedisServer

redoxide_only = pytest.mark.skipif(not is_redoxide(), reason="redoxide's fault behaviour")


def measured(text: str) -> None:
    print(f"measured: {text}")


# -- a forked child --------------------------------------------------------------------------


def _child_body(cache: Any) -> None:
    cache.set("child", "from child")
    assert cache.get("parent") == "from parent", cache.get("parent")
    assert cache.get("child") == "from child"
    assert asyncio.run(cache.aget("parent")) == "from parent"

    async def more() -> None:
        await cache.aset("child_async", [1, 2])
        assert await cache.aget_many(["child", "child_async"]) == {
            "child": "from child",
            "child_async": [1, 2],
        }

    asyncio.run(more())
    assert cache.incr("counter") == 2


def test_fork_child_uses_the_cache_after_the_parent(cache: Any) -> None:
    cache.set("parent", "from parent")
    cache.set("counter", 1)
    assert asyncio.run(cache.aget("parent")) == "from parent"  # runtime + async connection up

    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock: that hazard
        # is exactly what this test checks the backend handles.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: report through the pipe and exit, whatever happens
        status = 1
        try:
            os.close(read_end)
            _child_body(cache)
            status = 0
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        deadline = time.monotonic() + 15
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung using the cache")
            time.sleep(0.02)
        report = b""
        while select.select([read_end], [], [], 0)[0]:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            report += chunk
    finally:
        os.close(read_end)
    assert os.WIFEXITED(status), f"child died: status {status}"
    assert os.WEXITSTATUS(status) == 0, report.decode(errors="replace")
    # The parent still works, sync and async, and sees what the child wrote.
    assert cache.get("child") == "from child"
    assert asyncio.run(cache.aget("child_async")) == [1, 2]
    assert cache.incr("counter") == 3
    cache.set("parent_after", 1)
    assert asyncio.run(cache.aget("parent_after")) == 1


# -- pre-fork workers and interpreter exit ---------------------------------------------------


def _child(cache: Any, n: int, write_end: int) -> None:
    """A forked worker: use the cache sync and async, report connection ids through the pipe."""
    status = 1
    try:
        mine = {f"child{n}-{i}": [n, i] for i in range(20)}
        cache.set_many(mine)
        assert cache.get_many(list(mine)) == mine
        assert cache.get("parent") == "from parent"
        sync_id = cache.client.execute("CLIENT", "ID")

        async def work() -> int:
            await cache.aset(f"child{n}-async", {"n": n})
            assert await cache.aget(f"child{n}-async") == {"n": n}
            assert await cache.aget_many(list(mine)) == mine
            got = await asyncio.gather(*(cache.aget(k) for k in mine))
            assert got == list(mine.values())
            return int(await cache.client.aexecute("CLIENT", "ID"))

        async_id = asyncio.run(work())
        report = {"n": n, "sync": sync_id, "async": async_id}
        os.write(write_end, (json.dumps(report) + "\n").encode())
        status = 0
    except BaseException:
        os.write(write_end, json.dumps({"n": n, "error": traceback.format_exc()}).encode() + b"\n")
    finally:
        os._exit(status)  # never run the parent's atexit hooks (they stop the test servers)


@redoxide_only
def test_prefork_workers_use_their_own_connections(fresh_redis_server: RedisServer) -> None:
    """Gunicorn-style: the parent uses the cache sync and async, forks 3 workers that each use
    it sync and async; none hangs, each runs on new connections of its own, and the parent's
    connections are untouched (same ids, still in step)."""
    server = fresh_redis_server
    cache = build_cache(
        server.url,
        {
            "OPTIONS": {
                "SOCKET_CONNECT_TIMEOUT": 0.3,
                "SOCKET_TIMEOUT": 2.0,
                "IGNORE_EXCEPTIONS": False,
            }
        },
    )
    cache.set("parent", "from parent")
    parent_sync = cache.client.execute("CLIENT", "ID")
    parent_async = asyncio.run(cache.client.aexecute("CLIENT", "ID"))
    connections_before = server.client_count()

    read_end, write_end = os.pipe()
    pids = []
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a threaded process may deadlock: that is the point.
        warnings.simplefilter("ignore", DeprecationWarning)
        for n in range(3):
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                _child(cache, n, write_end)
            pids.append(pid)
    os.close(write_end)
    statuses: dict[int, int] = {}
    start = time.monotonic()
    try:
        while len(statuses) < len(pids):
            for pid in pids:
                if pid not in statuses:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        statuses[pid] = status
            if time.monotonic() - start > 15:
                break
            time.sleep(0.02)
        output = b""
        while select.select([read_end], [], [], 0)[0]:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            output += chunk
    finally:
        for pid in pids:
            if pid not in statuses:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(read_end)
    elapsed = time.monotonic() - start
    assert len(statuses) == 3, f"{3 - len(statuses)} forked workers hung"
    reports = [json.loads(line) for line in output.decode().splitlines()]
    assert not [r["error"] for r in reports if "error" in r]
    assert all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in statuses.values())
    assert len(reports) == 3
    ids = [r["sync"] for r in reports] + [r["async"] for r in reports]
    assert len(set(ids)) == 6, f"workers shared connections: {reports}"
    assert parent_sync not in ids and parent_async not in ids
    # The parent's own connections survived its children, in step.
    assert cache.client.execute("CLIENT", "ID") == parent_sync
    assert asyncio.run(cache.client.aexecute("CLIENT", "ID")) == parent_async
    assert cache.get("parent") == "from parent"
    for n in range(3):
        assert cache.get(f"child{n}-19") == [n, 19]
        assert asyncio.run(cache.aget(f"child{n}-async")) == {"n": n}
    # The workers' connections closed with them: none left behind on the server.
    deadline = time.monotonic() + 2
    while server.client_count() > connections_before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.client_count() == connections_before
    measured(f"3 forked workers (sync + async each) done in {elapsed:.2f} s")


EXIT_SCRIPT = """
import asyncio, sys, threading, time

import django
from django.conf import settings

settings.configure()
django.setup()
from redoxide import RedisCache

url, mode = sys.argv[1], sys.argv[2]
# Timeouts far longer than the test's bound: exit must not wait for them.
cache = RedisCache(url, {"OPTIONS": {"SOCKET_TIMEOUT": 30, "SOCKET_CONNECT_TIMEOUT": 30}})


async def start_many():
    tasks = [asyncio.ensure_future(cache.aget(f"k{i}")) for i in range(200)]
    await asyncio.sleep(0.2)
    assert not any(task.done() for task in tasks)
    return tasks


if mode == "asyncio_run":
    # asyncio.run() cancels the pending gets when main returns.
    asyncio.run(start_many())
elif mode == "open_loop":
    # The loop is left open with 200 gets pending: the interpreter tears it down at exit.
    loop = asyncio.new_event_loop()
    pending = loop.run_until_complete(start_many())
elif mode == "threads":
    for i in range(8):
        threading.Thread(target=cache.get, args=(f"k{i}",), daemon=True).start()
    time.sleep(0.2)
print("exiting with calls in flight", flush=True)
"""


@redoxide_only
@pytest.mark.parametrize("mode", ["asyncio_run", "open_loop", "threads"])
def test_interpreter_exit_with_calls_in_flight(
    paused_guard: RedisServer, tmp_path: Path, mode: str
) -> None:
    """The server is frozen, so every call is still waiting when the script ends: the
    interpreter exits normally, at once, with no crash, hang or panic."""
    server = paused_guard
    script = tmp_path / "exit_with_calls_in_flight.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT))
    server.pause()
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), server.url, mode],
        capture_output=True,
        text=True,
        timeout=15,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    elapsed = time.monotonic() - start
    assert "exiting with calls in flight" in proc.stdout, proc.stderr
    assert proc.returncode == 0, proc.stderr
    for sign in ("Fatal Python error", "panicked", "Traceback", "Segmentation"):
        assert sign not in proc.stderr, proc.stderr
    assert elapsed < 5, f"exit took {elapsed:.2f} s"
    measured(f"interpreter exit ({mode}) with calls in flight: {elapsed:.2f} s, rc 0")
