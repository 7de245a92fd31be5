"""SYNC_CONNECTIONS "shared": every thread's sync calls on one connection, read by whichever
caller leads. What must hold whatever happens to the server: each caller gets its own reply,
a stalled server times every caller out within the response timeout, a killed one fails them
at once and the next calls reconnect, and a forked child makes its own connection."""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Any

from support.backend import backend_errors, build_cache
from support.netfakes import blackhole_port
from support.servers import RedisServer

RESPONSE_TIMEOUT = 0.3
MARGIN = 0.75  # scheduling slack on a shared 2-core machine: a bound, not a target


def shared_cache(server: RedisServer, **options: Any) -> Any:
    opts = {"SYNC_CONNECTIONS": "shared", "SOCKET_TIMEOUT": RESPONSE_TIMEOUT, **options}
    return build_cache(server.url, {"OPTIONS": opts})


def run_threads(count: int, work: Any) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a caller hung"
    return errors


def test_every_thread_reads_its_own_values_through_pipelines_and_plans(
    fresh_redis_server: RedisServer,
) -> None:
    cache = shared_cache(fresh_redis_server)

    def work(n: int) -> None:
        for i in range(150):
            key = f"t{n}:{i}"
            cache.set_many({key: [n, i], f"{key}:b": str(i) * (i % 7 + 1)})
            assert cache.get(key) == [n, i]
            assert cache.get_many([key, f"{key}:b", "missing"]) == {
                key: [n, i],
                f"{key}:b": str(i) * (i % 7 + 1),
            }
            assert cache.incr(f"count:{n}", 1) if i else cache.add(f"count:{n}", 0)
            assert cache.touch(key, 60)

    assert run_threads(6, work) == []
    assert [cache.get(f"count:{n}") for n in range(6)] == [149] * 6
    assert fresh_redis_server.client_count() == 1


def test_a_stalled_server_times_out_every_waiting_thread_then_recovers(
    paused_guard: RedisServer,
) -> None:
    server = paused_guard
    errors = backend_errors()
    cache = shared_cache(server)
    cache.set_many({f"k{i}": i for i in range(8)})
    ready = threading.Barrier(9, timeout=10)
    took: list[float] = []

    def work(n: int) -> None:
        ready.wait()
        start = time.monotonic()
        try:
            cache.get(f"k{n}")
        finally:
            took.append(time.monotonic() - start)

    server.pause()
    try:
        outcome: list[list[BaseException]] = []
        runner = threading.Thread(target=lambda: outcome.append(run_threads(8, work)))
        runner.start()
        ready.wait()
        runner.join(RESPONSE_TIMEOUT + MARGIN + 5)
    finally:
        server.resume()
    assert outcome, "the callers hung"
    assert len(outcome[0]) == 8
    assert all(isinstance(exc, errors.CacheTimeout) for exc in outcome[0]), outcome[0]
    assert max(took) < RESPONSE_TIMEOUT + MARGIN, took
    # The connection that timed out is out of step: the next calls get a new one and the
    # right values.
    assert cache.get_many([f"k{i}" for i in range(8)]) == {f"k{i}": i for i in range(8)}
    assert [cache.get(f"k{i}") for i in range(8)] == list(range(8))


def test_a_killed_server_fails_the_threads_at_once_and_a_restart_recovers(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    errors = backend_errors()
    cache = shared_cache(server, SOCKET_CONNECT_TIMEOUT=0.3)
    cache.set("k", "v")
    stop = threading.Event()
    outcomes: list[tuple[str, float]] = []

    def work(n: int) -> None:
        while not stop.is_set():
            start = time.monotonic()
            try:
                got = cache.get("k")
                outcomes.append(("ok" if got in ("v", None) else f"wrong {got!r}", start))
            except errors.ConnectionInterrupted:
                outcomes.append(("down", start))
                time.sleep(0.005)

    runner = threading.Thread(target=lambda: run_threads(4, work))
    runner.start()
    time.sleep(0.2)
    server.kill()
    time.sleep(0.3)
    server.restart()
    restarted = time.monotonic()
    time.sleep(0.5)
    stop.set()
    runner.join(10)
    assert not runner.is_alive()
    assert not [o for o, _ in outcomes if o.startswith("wrong")]
    assert any(o == "down" for o, _ in outcomes)
    # Recovered: every call that began a moment after the restart succeeded.
    late = [o for o, start in outcomes if start > restarted + 0.1]
    assert late and all(o == "ok" for o in late), late[:5]
    assert server.client_count() == 1


def test_a_forked_child_gets_a_connection_of_its_own(fresh_redis_server: RedisServer) -> None:
    cache = shared_cache(fresh_redis_server)
    cache.set("k", "parent")
    assert cache.get("k") == "parent"
    with warnings.catch_warnings():
        # Python 3.12+ warns when a process with threads forks (an earlier test's Sentinel
        # watcher, in this worker); the child here uses only what it builds itself.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        status = 1
        try:
            errs = run_threads(3, lambda n: cache.set(f"child{n}", n))
            ok = errs == [] and [cache.get(f"child{n}") for n in range(3)] == [0, 1, 2]
            status = 0 if ok and cache.get("k") == "parent" else 1
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's connection was never touched by the child: still in step.
    assert cache.get_many(["k", "child2"]) == {"k": "parent", "child2": 2}


def test_a_child_forked_during_a_connect_is_not_stuck_behind_it() -> None:
    """A thread is connecting (to a port that never accepts) when another forks: the child's
    calls must not wait for a connect that, in the child, nobody is making."""
    errors = backend_errors()
    with blackhole_port() as port:
        cache = build_cache(
            f"redis://127.0.0.1:{port}/0",
            {"OPTIONS": {"SYNC_CONNECTIONS": "shared", "SOCKET_CONNECT_TIMEOUT": 1.0}},
        )
        connecting = threading.Thread(target=lambda: run_threads(1, lambda _: cache.get("k")))
        connecting.start()
        time.sleep(0.3)  # well inside its 1 s connect
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            status = 1
            try:
                started = time.monotonic()
                try:
                    cache.get("k")
                except errors.CacheError:
                    # Its own connect, timed out: within the connect timeout, plus slack.
                    status = 0 if time.monotonic() - started < 1.0 + MARGIN else 2
            finally:
                os._exit(status)
        connecting.join(10)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung behind its parent's connect")
        assert os.waitstatus_to_exitcode(done[1]) == 0
