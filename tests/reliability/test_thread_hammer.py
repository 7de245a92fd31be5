"""64 threads on one backend at once, released together by a barrier: what the GIL used to
serialise must hold without it too (free-threaded CPython). Each test asserts an outcome that
a lost update, a cross-talk between threads or a second client would break: exact counter
totals, each thread's own values, one winner per add(), one client per configuration, every
thread reading the final value through the near cache.

Iterations are bounded and nothing sleeps or assumes a timing: about 5 s for the file, 12 s
on a 2-core host with both cores busy elsewhere."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import caches, close_caches
from django.test.utils import override_settings
from support.backend import BACKEND, build_cache
from support.near import near_options, serving, stop_tracking
from support.servers import RedisServer, free_port

THREADS = 64
JOIN_TIMEOUT = 45.0  # a bound for a hung thread, far past what the work takes

#: SOCKET_TIMEOUTs no other test uses: each makes a client key (a process-wide client) of its
#: own, so "first use" is really the first.
_fresh_timeouts = itertools.count(1)


def _fresh_timeout() -> float:
    return 7.0 + next(_fresh_timeouts) / 1024


def hammer(
    work: Callable[[int], None],
    threads: int = THREADS,
    barriers: tuple[threading.Barrier, ...] = (),
) -> list[BaseException]:
    """Run work(0..threads-1), one thread each, released together; return what they raised.
    A thread that fails breaks `barriers` (the work's own), so the others stop waiting."""
    start = threading.Barrier(threads, timeout=30)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            start.wait()
            work(n)
        except BaseException as exc:  # reported by the caller, with its traceback
            errors.append(exc)
            for barrier in barriers:
                barrier.abort()

    pool = [threading.Thread(target=run, args=(n,), name=f"hammer-{n}") for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in pool), "a thread hung"
    return errors


def report(errors: list[BaseException]) -> str:
    """The first few errors with their tracebacks, for the assertion message."""
    # The barriers a failure broke are the others' symptom, not the cause: causes first.
    errors = sorted(errors, key=lambda e: isinstance(e, threading.BrokenBarrierError))
    shown = ["".join(traceback.format_exception(e)) for e in errors[:3]]
    return f"{len(errors)} thread(s) failed:\n" + "\n".join(shown)


#: SYNC_CONNECTIONS: a blocking connection per thread, or one shared by every thread.
SYNC_MODES = [{}, {"SYNC_CONNECTIONS": "shared"}]
SYNC_IDS = ["per-thread", "shared"]


@pytest.mark.parametrize("sync", SYNC_MODES, ids=SYNC_IDS)
def test_incr_from_64_threads_loses_no_update(
    make_cache: Callable[..., Any], sync: dict[str, str]
) -> None:
    cache = make_cache(**sync)
    per_thread = 40
    cache.set("counter", 0)
    seen: list[list[int]] = [[] for _ in range(THREADS)]

    def work(n: int) -> None:
        for _ in range(per_thread):
            seen[n].append(cache.incr("counter"))

    errors = hammer(work)
    assert not errors, report(errors)
    total = THREADS * per_thread
    assert cache.get("counter") == total
    # Every increment answered its own result: no two callers were handed the same reply.
    assert sorted(itertools.chain.from_iterable(seen)) == list(range(1, total + 1))


@pytest.mark.parametrize("sync", SYNC_MODES, ids=SYNC_IDS)
def test_each_thread_round_trips_its_own_keys(
    make_cache: Callable[..., Any], sync: dict[str, str]
) -> None:
    cache = make_cache(**sync)
    rounds = 10

    def value(n: int, j: int, part: str) -> dict[str, Any]:
        # Sizes differ by thread, so a reply handed to the wrong caller cannot pass for its own.
        return {"thread": n, "round": j, "part": part, "pad": "x" * ((n * 37 + j) % 1500)}

    def work(n: int) -> None:
        for j in range(rounds):
            key = f"own:{n}:{j}"
            cache.set(key, value(n, j, "one"))
            assert cache.get(key) == value(n, j, "one")
            many = {f"{key}:{p}": value(n, j, p) for p in ("a", "b", "c")}
            assert cache.set_many(many) == []
            assert cache.get_many([*many, f"{key}:missing"]) == many
            assert cache.delete_many(list(many)) == 3
            assert cache.get_many(list(many)) == {}
            assert cache.get(key) == value(n, j, "one")  # the others' deletes never reach it

    errors = hammer(work)
    assert not errors, report(errors)


def test_add_of_one_key_succeeds_exactly_once(make_cache: Callable[..., Any]) -> None:
    cache = make_cache()
    rounds = 10
    each_round = threading.Barrier(THREADS, timeout=30)
    won: list[list[int]] = [[] for _ in range(rounds)]

    def work(n: int) -> None:
        for r in range(rounds):
            each_round.wait()  # every thread adds round r's key at once
            if cache.add(f"once:{r}", n):
                won[r].append(n)

    errors = hammer(work, barriers=(each_round,))
    assert not errors, report(errors)
    for r in range(rounds):
        assert len(won[r]) == 1, f"round {r}: add() succeeded for threads {won[r]}"
        assert cache.get(f"once:{r}") == won[r][0]


def test_async_calls_from_64_event_loops_at_once(make_cache: Callable[..., Any]) -> None:
    # One event loop per thread: 64 bridges made and dropped at once, every loop's commands on
    # the client's one multiplexed connection.
    cache = make_cache()
    rounds = 8
    cache.set("acounter", 0)

    def work(n: int) -> None:
        async def main() -> None:
            for j in range(rounds):
                key = f"async:{n}:{j}"
                await cache.aset(key, (n, j))
                assert await cache.aget(key) == (n, j)
                await cache.aincr("acounter")
            keys = [f"async:{n}:{j}" for j in range(rounds)]
            assert await cache.aget_many(keys) == {k: (n, j) for j, k in enumerate(keys)}

        asyncio.run(main())

    errors = hammer(work)
    assert not errors, report(errors)
    assert cache.get("acounter") == THREADS * rounds


@pytest.fixture
def near_pair(make_cache: Callable[..., Any]) -> Iterator[tuple[Any, Any]]:
    """A cache with the near cache on (keys under cfg:), serving, and a plain cache over the
    same keys (the server's truth); tracking is stopped when the test ends."""
    prefix = f"h{uuid.uuid4().hex[:8]}"
    near = make_cache(KEY_PREFIX=prefix, NEAR_CACHE=near_options())
    plain = make_cache(KEY_PREFIX=prefix)
    try:
        serving(near)
        yield near, plain
    finally:
        stop_tracking(near)


def test_near_cache_every_thread_reads_the_final_value(near_pair: tuple[Any, Any]) -> None:
    cache, plain = near_pair
    writes = 10
    reads = 5
    cache.set("cfg:shared", "initial")
    filled = threading.Barrier(THREADS, timeout=30)
    written = threading.Barrier(THREADS, timeout=30)
    final_reads: list[list[Any]] = [[] for _ in range(THREADS)]

    def work(n: int) -> None:
        # Everyone fills the same key at once (one fill, the others wait for it or read).
        for _ in range(reads):
            assert cache.get("cfg:shared") == "initial"
        filled.wait()  # nobody writes before every thread has read
        # Everyone writes the shared key, and its own, reading its own writes back at once.
        for j in range(writes):
            cache.set("cfg:shared", (n, j))
            cache.set(f"cfg:t{n}", (n, j))
            assert cache.get(f"cfg:t{n}") == (n, j)
            many = {f"cfg:t{n}:a": j, f"cfg:t{n}:b": -j}
            cache.set_many(many)
            assert cache.get_many(list(many)) == many
        written.wait()  # every write has been answered
        for _ in range(reads):
            final_reads[n].append(cache.get("cfg:shared"))
        assert cache.get(f"cfg:t{n}") == (n, writes - 1)

    errors = hammer(work, barriers=(filled, written))
    assert not errors, report(errors)
    truth = plain.get("cfg:shared")
    assert truth is not None and truth != "initial"
    stale = {n: got for n, got in enumerate(final_reads) if any(v != truth for v in got)}
    assert not stale, f"the server holds {truth!r}; threads read {stale}"
    assert cache.near_cache_stats()["hits"] > 0  # the near cache took part


@pytest.mark.parametrize("near", [False, True], ids=["plain", "near"])
def test_first_use_of_a_fresh_alias_from_64_threads_makes_one_client(
    redis_server: RedisServer, near: bool
) -> None:
    redis_server.flushall()
    alias = f"hammer{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"SOCKET_TIMEOUT": _fresh_timeout()}
    if near:
        options["NEAR_CACHE"] = near_options()
    conf = {"BACKEND": BACKEND, "LOCATION": redis_server.url, "KEY_PREFIX": alias}
    conf["OPTIONS"] = options
    got: list[Any] = [None] * THREADS

    def work(n: int) -> None:
        mine = caches[alias]  # Django builds one backend per thread: all of them at once
        got[n] = mine
        mine.set(f"cfg:first:{n}", n)
        assert mine.get(f"cfg:first:{n}") == n

    locmem = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    try:
        with override_settings(CACHES={"default": locmem, alias: conf}):
            errors = hammer(work)
    finally:
        if near and got[0] is not None:
            stop_tracking(got[0])
    assert not errors, report(errors)
    assert len({id(instance) for instance in got}) == THREADS  # 64 constructions raced
    clients = {id(instance._client) for instance in got}
    assert len(clients) == 1, f"{len(clients)} clients for one configuration"
    if near:
        from redoxide import near as near_module

        store = got[0]._client
        assert len({id(instance._client._store) for instance in got}) == 1
        assert sum(1 for c in near_module._every if c is store) == 1


def test_close_racing_with_calls_breaks_nothing(make_cache: Callable[..., Any]) -> None:
    from redoxide.exceptions import CacheError

    cache = make_cache()
    rounds = 10
    allowed: list[BaseException] = []

    def work(n: int) -> None:
        for j in range(rounds):
            if n % 4 == 0:
                # What Django does at the end of every request, racing the others' calls.
                cache.close()
                close_caches()
                if j % 5 == 0:
                    asyncio.run(cache.aclose())
                continue
            key = f"close:{n}:{j}"
            try:
                cache.set(key, (n, j))
                read = cache.get(key)
            except CacheError as exc:  # any other exception fails the test at once
                allowed.append(exc)
                continue
            assert read == (n, j)

    errors = hammer(work)
    assert not errors, report(errors)
    # close() is documented to do nothing (the process' connections outlive requests): not
    # even a documented error may come of racing it.
    assert not allowed, report(allowed)
    cache.set("after-close", "alive")
    assert cache.get("after-close") == "alive"


def test_fail_open_misses_are_counted_once_per_call() -> None:
    # FailOpen.ignored is shared by every backend instance of a configuration: `+= 1` from 64
    # threads must not lose counts. With the GIL that statement is never interrupted; without
    # it, it can be.
    location = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    options = {
        "IGNORE_EXCEPTIONS": True,
        "SOCKET_CONNECT_TIMEOUT": 0.5,
        "SOCKET_TIMEOUT": _fresh_timeout(),
    }
    cache = build_cache(location, {"OPTIONS": options})
    per_thread = 10

    def work(n: int) -> None:
        for j in range(per_thread):
            assert cache.get(f"down:{n}:{j}", "fallback") == "fallback"

    errors = hammer(work)
    assert not errors, report(errors)
    assert cache.stats()["fail_open_misses"] == THREADS * per_thread


FIRST_USE_SCRIPT = """
import asyncio, glob, json, sys, threading, time

import django
from django.conf import settings

settings.configure()
django.setup()
from redoxide import RedisCache

location, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
cache = RedisCache(location, {})
start = threading.Barrier(count, timeout=30)
errors = []


def work(n):
    try:
        start.wait()
        if mode == "sync":
            # The cache's client itself: the least Python before the call leaves the GIL, so
            # that the threads reach the runtime together.
            assert cache._client.get(f"first:missing:{n}") is None
        else:
            assert asyncio.run(cache.aget(f"first:missing:{n}", n)) == n
    except BaseException as exc:
        errors.append(repr(exc))


threads = [threading.Thread(target=work, args=(n,)) for n in range(count)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(30)


def name(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:  # a thread that ended meanwhile
        return ""


def io_threads():
    return [name(path) for path in glob.glob("/proc/self/task/*/comm")].count("redoxide-io")


# A thread is born with its creator's name and takes its own once it runs: tokio's blocking
# threads (the name lookups), made by the I/O thread, show as "redoxide-io" until they start.
# A second runtime's I/O thread keeps the name for ever, so the count settles at the number of
# runtimes: read until it is 1, or for 10 s, and report the lowest.
deadline = time.monotonic() + 10
lowest = io_threads()
while lowest > 1 and time.monotonic() < deadline:
    time.sleep(0.01)
    lowest = min(lowest, io_threads())
print(json.dumps({"io_threads": lowest, "errors": errors}))
"""


#: Fresh interpreters per mode: a lost race shows in most runs, not all (the losers must
#: reach the runtime while the winner is still building it); once fixed, every run passes.
#: Async first calls reach the runtime holding the GIL, so only a free-threaded interpreter
#: can race them: fewer runs.
FIRST_USE_RUNS = {"sync": 8, "async": 3}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_first_calls_from_64_threads_start_one_io_runtime(
    redis_server: RedisServer, tmp_path: Path, mode: str
) -> None:
    """The process' I/O runtime is built on first use: 64 threads making the process' first
    calls at once must share one (one redoxide-io thread), not each build their own. Fresh
    interpreters, since this one's runtime exists already. The sync calls name the host
    (localhost): resolving it is what asks a sync call for the runtime."""
    script = tmp_path / "first_use.py"
    script.write_text(textwrap.dedent(FIRST_USE_SCRIPT))
    location = f"redis://localhost:{redis_server.port}/0"
    started: list[int] = []
    runs = FIRST_USE_RUNS[mode]
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, str(script), location, mode, str(THREADS)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        outcome = json.loads(proc.stdout.strip().splitlines()[-1])
        assert outcome["errors"] == []
        started.append(outcome["io_threads"])
        if started[-1] != 1:
            break  # shown below
    assert started == [1] * runs, f"I/O runtimes started in each run: {started}"


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="a free-threaded CPython only"
)
def test_importing_redoxide_leaves_the_gil_off() -> None:
    """On a free-threaded interpreter, importing the package (and its compiled core) must not
    turn the GIL back on: the module declares it does not need it (gil_used = false). A fresh
    interpreter, since other test dependencies may have turned it on in this one."""
    code = "import sys, redoxide, redoxide._redoxide; print(sys._is_gil_enabled())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", proc.stderr
