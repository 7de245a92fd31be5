"""Reliability under faults, sync and async: a server killed and restarted under load, stalled
under load, out of memory, connections killed by the server, cancelled and timed-out async
calls.

test_faults.py covers the single-call cases (dead, unreachable, stalled, restarted servers);
test_processes.py fork, pre-fork workers and interpreter exit. This file adds load, fail-open,
and what must hold afterwards. Each fault call is timed against the timeout that should bound
it plus MARGIN (an upper bound that turns a hang into a failure, not a performance assertion),
and each test checks the cache works afterwards with no reset. Run with -s to see the measured
figures (lines starting "measured:").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.backend import backend_errors, build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, Sleeper

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's fault behaviour")

CONNECT_TIMEOUT = 0.3
RESPONSE_TIMEOUT = 0.3
# Scheduling slack on a shared 2-core machine: a bound, not a performance target.
MARGIN = 0.75
RECOVERY_TARGET = 1.0  # the first success within 1 s of the server being back


#: The error fail-open last turned into a miss in this thread or task (see `ignored`).
IGNORED: contextvars.ContextVar[BaseException | None] = contextvars.ContextVar("ignored")


def ignored(cache: Any, exc: BaseException) -> None:
    """EXCEPTION_HANDLER of the fail-open caches: keep the error (then ignore it, as fail-open
    does), so the load can tell what a miss was."""
    IGNORED.set(exc)


def cache_on(location: str, *, fail_open: bool = False, **options: Any) -> Any:
    opts: dict[str, Any] = {
        "SOCKET_CONNECT_TIMEOUT": CONNECT_TIMEOUT,
        "SOCKET_TIMEOUT": RESPONSE_TIMEOUT,
        "IGNORE_EXCEPTIONS": fail_open,
        **options,
    }
    if fail_open:
        opts.setdefault("EXCEPTION_HANDLER", ignored)
    return build_cache(location, {"OPTIONS": opts})


def measured(text: str) -> None:
    print(f"measured: {text}")


def timed(call: Callable[[], Any]) -> tuple[Any, BaseException | None, float]:
    """Return (result, exception, seconds) of one call."""
    start = time.monotonic()
    try:
        return call(), None, time.monotonic() - start
    except Exception as exc:
        return None, exc, time.monotonic() - start


@pytest.fixture
def debug_server() -> Iterator[RedisServer]:
    """A throwaway server that accepts DEBUG SLEEP, resumed whatever the test does."""
    server = RedisServer("--enable-debug-command", "local")
    with server:
        try:
            yield server
        finally:
            with contextlib.suppress(ProcessLookupError, RuntimeError):
                server.resume()


# -- killed and restarted under load ------------------------------------------------------------


@dataclass
class Event:
    start: float
    end: float
    op: str  # "add" or "get"
    key: str
    outcome: str  # "ok", "miss" (fail-open / not stored), "error", or "wrong"
    error: BaseException | None = None


class Recorder:
    """Collects the outcome of every call of the load."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def add(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)


def _outcome(op: str, value: str, result: Any) -> str:
    if op == "add":
        # add() of a fresh key is True once stored; False is fail-open's "not stored".
        return "ok" if result is True else "miss"
    if result is None:
        return "miss"
    return "ok" if result == value else "wrong"


def sync_load(cache: Any, prefix: str, rec: Recorder) -> None:
    """Write a fresh key, read it back, repeat, until told to stop."""
    i = 0
    while not rec.stop.is_set():
        key, value = f"{prefix}-{i}", f"value-{prefix}-{i}"
        i += 1
        calls: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("add", lambda: cache.add(key, value)),  # noqa: B023 - called in this iteration
            ("get", lambda: cache.get(key)),  # noqa: B023
        )
        for op, call in calls:
            start = time.monotonic()
            IGNORED.set(None)
            try:
                outcome, error = _outcome(op, value, call()), IGNORED.get()
            except Exception as exc:
                outcome, error = "error", exc
            rec.add(Event(start, time.monotonic(), op, key, outcome, error))
        time.sleep(0.002)


async def async_load(cache: Any, prefix: str, rec: Recorder) -> None:
    i = 0
    while not rec.stop.is_set():
        key, value = f"{prefix}-{i}", f"value-{prefix}-{i}"
        i += 1
        calls: tuple[tuple[str, Callable[[], Awaitable[Any]]], ...] = (
            ("add", lambda: cache.aadd(key, value)),  # noqa: B023 - called in this iteration
            ("get", lambda: cache.aget(key)),  # noqa: B023
        )
        for op, call in calls:
            start = time.monotonic()
            IGNORED.set(None)
            try:
                outcome, error = _outcome(op, value, await call()), IGNORED.get()
            except Exception as exc:
                outcome, error = "error", exc
            rec.add(Event(start, time.monotonic(), op, key, outcome, error))
        await asyncio.sleep(0.002)


def run_async_load(cache: Any, rec: Recorder, tasks: int) -> None:
    async def main() -> None:
        await asyncio.gather(*(async_load(cache, f"task{n}", rec) for n in range(tasks)))

    asyncio.run(main())


@pytest.mark.parametrize("fail_open", [False, True], ids=["raise", "fail_open"])
def test_kill_and_restart_under_load_fails_fast_and_recovers(
    fresh_redis_server: RedisServer, mode: str, fail_open: bool
) -> None:
    """SIGKILL the server under a steady load, restart it 0.5 s later on the same port: calls
    fail fast while it is down, the first success comes within 1 s of it being back, with no
    reset, and every write acknowledged after the restart reads back."""
    server = fresh_redis_server
    errors = backend_errors()
    cache = cache_on(server.url, fail_open=fail_open)
    rec = Recorder()
    if mode == "sync":
        # Two threads, each with its own backend instance, as Django's `caches` gives them.
        workers = [
            threading.Thread(
                target=sync_load, args=(cache_on(server.url, fail_open=fail_open), f"t{n}", rec)
            )
            for n in range(2)
        ]
    else:
        workers = [threading.Thread(target=run_async_load, args=(cache, rec, 8))]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.3)
        t_kill = time.monotonic()
        server.kill()
        time.sleep(0.5)
        t_restart = time.monotonic()
        server.restart()  # returns once the new server answers PING
        t_up = time.monotonic()
        time.sleep(1.2)
    finally:
        rec.stop.set()
        for worker in workers:
            worker.join(10)
    assert not any(worker.is_alive() for worker in workers), "the load hung"
    events = sorted(rec.events, key=lambda e: e.start)

    # Nothing hangs: a call fails on a refused connect or a closed socket, both immediate.
    bound = max(CONNECT_TIMEOUT, RESPONSE_TIMEOUT) + MARGIN
    slowest = max(e.end - e.start for e in events)
    assert slowest < bound, f"slowest call {slowest:.3f} s, bound {bound} s"
    # No reply ever goes to the wrong caller.
    assert not [e for e in events if e.outcome == "wrong"]
    # Failures are typed: ConnectionInterrupted for a refused connect or a closed socket, or
    # CacheTimeout for a call sent while the new server starts or outlasting SOCKET_TIMEOUT
    # (0.3 s here) on a loaded host; under fail-open they are misses, whose ignored error the
    # handler kept. A get misses without an error only when its own write failed (or the
    # restart emptied the server).
    written = {e.key: e.end for e in events if e.op == "add" and e.outcome == "ok"}
    typed = (errors.ConnectionInterrupted, errors.CacheTimeout)
    unexpected = [
        e.error
        for e in events
        if (e.outcome == "error" and (fail_open or not isinstance(e.error, typed)))
        or (e.outcome == "miss" and e.error is not None and not isinstance(e.error, typed))
    ]
    assert not unexpected, unexpected
    misses = [
        e.key
        for e in events
        if e.outcome == "miss"
        and e.error is None
        and not (e.op == "get" and written.get(e.key, 0) < t_restart)
    ]
    assert not misses, misses
    before = [e for e in events if e.end < t_kill and e.outcome == "ok"]
    down = [e for e in events if t_kill + 0.05 < e.start and e.end < t_restart]
    assert len(before) >= 10, "the load did not run before the kill"
    assert len(down) >= 10, "too few calls while the server was down: do they fail fast?"
    assert all(e.outcome != "ok" for e in down)
    # Recovery: the first success on the new server, counted from its answering PING. (A call
    # that starts just after t_kill may still be answered by the old server before it dies.)
    first_ok = min(e.end for e in events if e.start > t_restart and e.outcome == "ok")
    recovery = max(0.0, first_ok - t_up)
    assert recovery < RECOVERY_TARGET, f"first success {recovery:.3f} s after the restart"
    # Once recovered it stays recovered: no failure starts after the first success but a
    # timeout (SOCKET_TIMEOUT is 0.3 s here, which a call on a loaded host can outlast; that
    # nothing hangs is the bound on the slowest call above).
    relapses = [
        e
        for e in events
        if e.start > first_ok
        and e.outcome != "ok"
        and not isinstance(e.error, errors.CacheTimeout)
        and not (e.op == "get" and e.error is None and e.key not in written)  # its add timed out
    ]
    assert not relapses
    # Everything acknowledged after the restart is there (the restart itself emptied the
    # server: there is no persistence, so earlier writes are gone by design).
    acked = {key: f"value-{key}" for key, end in written.items() if end > t_restart}
    assert len(acked) >= 20
    assert cache.get_many(list(acked)) == acked
    down_calls = [e.end - e.start for e in down]
    measured(
        f"kill/restart {mode} fail_open={fail_open}: {len(down)} calls while down, slowest "
        f"{max(down_calls) * 1000:.1f} ms; after the restart began, the server answered PING "
        f"at {(t_up - t_restart) * 1000:.0f} ms and the load's first success came at "
        f"{(first_ok - t_restart) * 1000:.0f} ms; slowest call overall {slowest * 1000:.0f} ms"
    )


# -- stalled under load ----------------------------------------------------------------------------


@pytest.mark.parametrize("fail_open", [False, True], ids=["raise", "fail_open"])
def test_stall_times_out_every_caller_in_flight_then_recovers(
    paused_guard: RedisServer, mode: str, fail_open: bool
) -> None:
    """SIGSTOP the server with many callers waiting: each one gets CacheTimeout (or its default
    under fail-open) within SOCKET_TIMEOUT + margin; after SIGCONT every value reads right."""
    server = paused_guard
    errors = backend_errors()
    cache = cache_on(server.url, fail_open=fail_open)
    values = {f"k{i}": f"v{i}" for i in range(40)}
    cache.set_many(values)
    assert asyncio.run(cache.aget("k0")) == "v0"  # async connection up before the stall

    results: list[tuple[Any, BaseException | None, float]] = []
    warm, stalled = threading.Barrier(9, timeout=10), threading.Barrier(9, timeout=10)

    def caller(key: str) -> None:
        cache.get(key)  # this thread's connection is up before the stall
        warm.wait()
        stalled.wait()
        results.append(timed(lambda: cache.get(key, "default")))

    async def aone(key: str) -> tuple[Any, BaseException | None, float]:
        start = time.monotonic()
        try:
            return await cache.aget(key, "default"), None, time.monotonic() - start
        except Exception as exc:
            return None, exc, time.monotonic() - start

    threads = [threading.Thread(target=caller, args=(k,)) for k in list(values)[:8]]
    if mode == "sync":
        for thread in threads:
            thread.start()
        warm.wait()
    server.pause()
    try:
        if mode == "sync":
            stalled.wait()
            for thread in threads:
                thread.join(RESPONSE_TIMEOUT + MARGIN + 2)
        else:

            async def storm() -> list[tuple[Any, BaseException | None, float]]:
                return await asyncio.gather(*(aone(k) for k in values))

            results = asyncio.run(storm())
    finally:
        server.resume()
    assert len(results) == (8 if mode == "sync" else 40)
    slowest = max(seconds for _, _, seconds in results)
    assert slowest < RESPONSE_TIMEOUT + MARGIN, f"slowest {slowest:.3f} s"
    for value, error, _ in results:
        if fail_open:
            assert error is None and value == "default"
        else:
            assert isinstance(error, errors.CacheTimeout), error
    ops = Ops(cache, mode)
    assert ops.get_many(list(values)) == values
    assert ops.get("k7") == "v7"
    measured(f"stall {mode} fail_open={fail_open}: {len(results)} callers, slowest {slowest:.3f} s")


# -- out of memory -------------------------------------------------------------------------------


def test_oom_is_a_typed_response_error_even_under_fail_open(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    """A server full up (maxmemory, noeviction) refuses writes with OOM: a ResponseError that
    fail-open does not hide; reads still work; writes work again once there is room."""
    server = fresh_redis_server
    errors = backend_errors()
    ops = Ops(cache_on(server.url), mode)
    open_ops = Ops(cache_on(server.url, fail_open=True), mode)
    ops.set("kept", "still here")
    used = int(server.info("memory")["used_memory"])
    server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    server.cli("CONFIG", "SET", "maxmemory", str(used + 2 * 1024 * 1024))
    chunk = b"x" * 64 * 1024
    stored = 0
    with pytest.raises(errors.ResponseError) as info:
        for i in range(200):  # 12.5 MB: far past the 2 MB of room
            ops.set(f"fill{i}", chunk)
            stored += 1
    assert 0 < stored < 200
    assert "OOM" in str(info.value)
    assert isinstance(info.value, errors.CacheError)
    assert not isinstance(info.value, (ConnectionError, TimeoutError))
    # Freeing the refused command's buffers can leave a little room: pin the limit under the
    # usage so that every write below is refused.
    used = int(server.info("memory")["used_memory"])
    server.cli("CONFIG", "SET", "maxmemory", str(used - 256 * 1024))
    # Every kind of write is refused the same way, and quickly; fail-open does not hide it.
    writes: list[Callable[[Ops], object]] = [
        lambda o: o.set("new", "v"),
        lambda o: o.add("new", "v"),
        lambda o: o.set_many({"a": 1, "b": 2}),
        lambda o: o.get_or_set("gos", "computed"),
    ]
    for write in writes:
        for which in (ops, open_ops):
            _, error, seconds = timed(lambda: write(which))  # noqa: B023
            assert isinstance(error, errors.ResponseError), error
            assert "OOM" in str(error)
            assert seconds < RESPONSE_TIMEOUT + MARGIN
    # Reads and deletes work.
    assert ops.get("kept") == "still here"
    assert open_ops.get("fill0") == chunk
    assert ops.delete(f"fill{stored - 1}") is True
    # Room again: writes succeed on the same connections.
    server.cli("CONFIG", "SET", "maxmemory", "0")
    ops.set("new", "v")
    assert open_ops.add("added", 1) is True
    assert ops.get_many(["new", "added", "kept"]) == {"new": "v", "added": 1, "kept": "still here"}


# -- connections killed by the server --------------------------------------------------------------


def kill_clients(server: RedisServer) -> int:
    """CLIENT KILL every normal connection (redis-cli's own is skipped); return how many."""
    return int(server.cli("CLIENT", "KILL", "TYPE", "normal"))


def test_connection_killed_between_calls_is_invisible(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    """The server closes idle connections (CLIENT KILL, a timeout, a proxy): the next call of
    any kind reconnects and succeeds, without an error reaching the caller (the race with the
    I/O thread seeing the close is test_killed_idle_connection.py's)."""
    server = fresh_redis_server
    ops = Ops(cache_on(server.url), mode)
    ops.set_many({"k": "v", "n": 0})
    count = 0

    def incr() -> None:
        nonlocal count
        count += 1
        assert ops.incr("n") == count

    calls: list[tuple[str, Callable[[], object]]] = [
        ("get", lambda: ops.get("k") == "v" or pytest.fail("get")),
        ("get_many", lambda: ops.get_many(["k", "zz"]) == {"k": "v"} or pytest.fail("get_many")),
        ("set", lambda: ops.set("k", "v")),
        ("incr", incr),
        ("delete", lambda: ops.delete("gone") is False or pytest.fail("delete")),
    ]
    for _ in range(3):
        for name, call in calls:
            ops.has_key("k")  # a live connection to kill
            assert kill_clients(server) >= 1
            _, error, seconds = timed(call)
            assert error is None, f"{name} after CLIENT KILL: {error!r}"
            assert seconds < CONNECT_TIMEOUT + MARGIN
    assert ops.get("n") == 3


def test_sync_connection_killed_during_a_call_raises_then_recovers(
    fresh_redis_server: RedisServer,
) -> None:
    """A call in flight when the server kills its connection raises ConnectionInterrupted at
    once (not after its timeout), and the next call reconnects."""
    server = fresh_redis_server
    errors = backend_errors()
    cache = cache_on(server.url, SOCKET_TIMEOUT=3.0)
    cache.set("k", "v")
    outcome: list[tuple[Any, BaseException | None, float]] = []
    # BLPOP waits on the server up to 2 s: a call in flight that we can kill.
    caller = threading.Thread(
        target=lambda: outcome.append(
            timed(lambda: cache.client.execute("BLPOP", cache.make_key("list"), 2))
        )
    )
    caller.start()
    deadline = time.monotonic() + 2
    while "cmd=blpop" not in server.cli("CLIENT", "LIST") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kill_clients(server) >= 1
    caller.join(5)
    ((_, error, seconds),) = outcome
    assert isinstance(error, errors.ConnectionInterrupted), error
    assert seconds < 1.0, f"raised after {seconds:.3f} s: waited for BLPOP's 2 s?"
    assert cache.get("k") == "v"
    cache.set("k2", "v2")
    assert cache.get("k2") == "v2"
    measured(f"sync call killed mid-flight raised after {seconds * 1000:.0f} ms")


def test_async_connection_killed_during_calls_fails_them_then_recovers(
    fresh_redis_server: RedisServer,
) -> None:
    """Every async call waiting on the multiplexed connection when the server kills it raises
    ConnectionInterrupted at once; the next calls use a new connection, replies in order."""
    server = fresh_redis_server
    errors = backend_errors()
    cache = cache_on(server.url, SOCKET_TIMEOUT=3.0)
    values = {f"k{i}": i for i in range(50)}
    cache.set_many(values)

    async def scenario() -> tuple[list[Any], float]:
        blpop = asyncio.ensure_future(cache.client.aexecute("BLPOP", cache.make_key("list"), 2))
        # GETs queued behind the BLPOP on the same connection (RESP replies are in order).
        behind = [asyncio.ensure_future(cache.aget(k)) for k in values]
        deadline = time.monotonic() + 2
        while "cmd=blpop" not in await asyncio.to_thread(server.cli, "CLIENT", "LIST"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        start = time.monotonic()
        await asyncio.to_thread(kill_clients, server)
        results = await asyncio.gather(blpop, *behind, return_exceptions=True)
        elapsed = time.monotonic() - start
        after = await asyncio.gather(*(cache.aget(k) for k in values))
        assert after == list(values.values())
        return results, elapsed

    results, elapsed = asyncio.run(scenario())
    assert all(isinstance(r, errors.ConnectionInterrupted) for r in results), results
    assert elapsed < 1.0, f"failed after {elapsed:.3f} s: waited for BLPOP's 2 s?"
    assert asyncio.run(cache.aget("k3")) == 3
    measured(f"async calls killed mid-flight ({len(results)}) failed after {elapsed * 1000:.0f} ms")


# -- cancelled and timed-out async calls: no off-by-one -------------------------------------------

N_AFTER = 1000


def distinct_values(cache: Any) -> dict[str, str]:
    values = {f"key{i}": f"value{i}" for i in range(N_AFTER)}
    cache.set_many(values)
    return values


async def check_replies_in_order(cache: Any, values: dict[str, str]) -> None:
    """1,000 gets of distinct keys, concurrent then serial: each caller gets its own value."""
    keys = list(values)
    got = await asyncio.gather(*(cache.aget(k) for k in keys))
    assert got == [values[k] for k in keys]
    for k in keys[:200]:
        assert await cache.aget(k) == values[k]


def test_cancelled_async_calls_leave_every_later_reply_to_its_caller(
    debug_server: RedisServer,
) -> None:
    """Cancel gets in flight (asyncio.wait_for and task.cancel) while the server is busy: their
    late replies are dropped, and the next 1,000 gets on the same connection each get their
    own value."""
    server = debug_server
    cache = cache_on(server.url, SOCKET_TIMEOUT=3.0)
    values = distinct_values(cache)
    keys = list(values)

    async def scenario() -> tuple[int, int]:
        conn_id = await cache.client.aexecute("CLIENT", "ID")
        sleeper = Sleeper(server, 1.5)  # past every cancel below, on a loaded host too
        try:
            # Cancelled by a timeout, the usual way in user code.
            for k in keys[:10]:
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(cache.aget(k), 0.01)
            # Cancelled explicitly, with others in flight in between that must still be right.
            tasks = [asyncio.ensure_future(cache.aget(k)) for k in keys[10:40]]
            await asyncio.sleep(0.02)
            for task in tasks[::2]:
                task.cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await asyncio.to_thread(sleeper.wait)
        cancelled = [isinstance(r, asyncio.CancelledError) for r in done]
        assert cancelled == [True, False] * 15
        assert done[1::2] == [values[k] for k in keys[11:40:2]]
        await check_replies_in_order(cache, values)
        return conn_id, await cache.client.aexecute("CLIENT", "ID")

    before, after = asyncio.run(scenario())
    assert before == after, "the connection was replaced: the test did not check in-order replies"


def test_timed_out_calls_leave_every_later_reply_to_its_caller(
    debug_server: RedisServer, mode: str
) -> None:
    """Calls that outlive SOCKET_TIMEOUT raise CacheTimeout in time; their late replies never
    reach a later caller: 1,000 gets after them each get their own value."""
    server = debug_server
    errors = backend_errors()
    cache = cache_on(server.url)
    values = distinct_values(cache)
    keys = list(values)
    if mode == "sync":
        assert cache.get(keys[0]) == values[keys[0]]
        # On the cache's own connection, and gets behind another client's DEBUG SLEEP whose
        # replies (values!) the server writes when it wakes up.
        _, error, seconds = timed(lambda: cache.client.execute("DEBUG", "SLEEP", "1"))
        assert isinstance(error, errors.CacheTimeout), error
        assert seconds < RESPONSE_TIMEOUT + MARGIN
        server.wait_answering()  # awake: the late reply is on the cache's connection
        sleeper = Sleeper(server, 2 * (RESPONSE_TIMEOUT + MARGIN))
        try:
            for k in keys[:2]:
                _, error, seconds = timed(lambda: cache.get(k))  # noqa: B023
                assert isinstance(error, errors.CacheTimeout), error
                assert seconds < RESPONSE_TIMEOUT + MARGIN
        finally:
            sleeper.wait()
        for k in keys:
            assert cache.get(k) == values[k]
        assert cache.get_many(keys) == values
        return

    async def scenario() -> float:
        assert await cache.aget(keys[0]) == values[keys[0]]  # the connection is up
        start = time.monotonic()
        results = await asyncio.gather(
            cache.client.aexecute("DEBUG", "SLEEP", "1"),
            *(cache.aget(k) for k in keys[:20]),
            return_exceptions=True,
        )
        elapsed = time.monotonic() - start
        assert all(isinstance(r, errors.CacheTimeout) for r in results), results
        await asyncio.to_thread(server.wait_answering)  # awake: the late replies are written
        await check_replies_in_order(cache, values)
        return elapsed

    elapsed = asyncio.run(scenario())
    assert elapsed < RESPONSE_TIMEOUT + MARGIN
    measured(f"async DEBUG SLEEP 1 with SOCKET_TIMEOUT 0.3: 21 calls timed out in {elapsed:.3f} s")
