"""How a finished command wakes its event loop: eventfd, self-pipe or call_soon_threadsafe.

The whole async suite runs under each path with ``REDOXIDE_ASYNC_WAKEUP=eventfd|pipe|
threadsafe``; these tests check each path directly: the mode a bridge really uses, a thousand
calls in flight all answered, the automatic fallback for a loop without ``add_reader``, and
that finished loops leave nothing behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from redoxide import _redoxide
from redoxide._bridges import bridge
from support.backend import build_cache
from support.servers import RedisServer
from support.wakeups import ENV, MODES

pytestmark = pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide") != "redoxide",
    reason="redoxide internals",
)

CALLS = 1_000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch descriptors, as Windows' proactor loop cannot; counts its
    thread-safe wake-ups."""

    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    def add_reader(self, fd: Any, callback: Callable[..., Any], *args: Any) -> None:
        raise NotImplementedError

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        self.posts += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def run_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


async def many_calls(cache: Any) -> tuple[str, list[Any]]:
    """Send CALLS reads at once (so most park and are woken), then a few one at a time."""
    await cache.aset_many({f"w{i}": i for i in range(CALLS)})
    got = list(await asyncio.gather(*(cache.aget(f"w{i}") for i in range(CALLS))))
    got += [await cache.aget(f"w{i}") for i in range(20)]
    got += [await cache.aincr("w1", 0)]
    return bridge().wakeup, got


@pytest.mark.parametrize("mode", MODES)
def test_each_wakeup_answers_a_thousand_calls_in_flight(
    mode: str, cache: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, mode)
    used, got = asyncio.run(many_calls(cache))
    assert used == mode
    assert got == [*range(CALLS), *range(20), 1]


@pytest.mark.parametrize("mode", MODES)
def test_the_private_argument_picks_the_wakeup(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "eventfd" if mode != "eventfd" else "pipe")
    loop = asyncio.new_event_loop()
    try:
        made = _redoxide.Bridge(loop, wakeup=mode)  # type: ignore[arg-type]
        assert made.wakeup == mode
        if mode == "threadsafe":
            assert made.fileno() is None
        else:
            assert isinstance(made.fileno(), int)
    finally:
        loop.close()


def test_the_platform_descriptor_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    expected = "eventfd" if sys.platform.startswith("linux") else "pipe"

    async def used() -> str:
        return bridge().wakeup

    assert asyncio.run(used()) == expected


def test_an_unknown_wakeup_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "carrier-pigeon")
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match=ENV):
            _redoxide.Bridge(loop)
    finally:
        loop.close()


@pytest.mark.parametrize("mode", [None, "pipe"])
def test_a_loop_without_add_reader_is_woken_thread_safely_once_per_batch(
    mode: str | None, cache: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if mode is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, mode)
    loop = NoReaderLoop()
    used, got = run_on(loop, many_calls(cache))
    assert used == "threadsafe"
    assert got == [*range(CALLS), *range(20), 1]
    # One post per batch of replies (the queue turning non-empty), not one per reply.
    assert 0 < loop.posts < CALLS // 4, loop.posts


@pytest.mark.parametrize("mode", MODES)
def test_finished_loops_leave_no_descriptors_or_loops_behind(
    mode: str, cache: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, mode)
    asyncio.run(cache.aset("k", 1))
    gc.collect()
    before = open_fds()
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def one() -> Any:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        assert bridge().wakeup == mode
        return await cache.aget("k")

    for _ in range(20):
        assert asyncio.run(one()) == 1
    gc.collect()
    assert open_fds() <= before + 1
    assert sum(ref() is not None for ref in loops) <= 1


def test_threadsafe_wakeups_after_the_loop_closed_are_dropped(
    fresh_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reply that lands after its loop closed must not raise on the I/O thread or hang.
    monkeypatch.setenv(ENV, "threadsafe")
    server = fresh_redis_server
    cache = build_cache(server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 5}})
    asyncio.run(cache.aset("k", 1))
    loop = asyncio.new_event_loop()
    abandoned: list[asyncio.Task[Any]] = []

    async def abandon() -> None:
        server.cli("CLIENT", "PAUSE", "10000", "WRITE")
        # A write waits out the pause; the loop stops before the reply comes.
        abandoned.append(loop.create_task(cache.aset("k", 2)))
        await asyncio.sleep(0.05)

    loop.run_until_complete(abandon())
    loop.close()
    assert not abandoned[0].done()
    server.cli("CLIENT", "UNPAUSE")  # the write is applied, its reply posted to no one
    deadline = time.monotonic() + 5
    while cache.get("k") != 2:
        assert time.monotonic() < deadline, "the paused write was never applied"
        time.sleep(0.01)
    assert asyncio.run(cache.aget("k")) == 2


EXIT_WHILE_A_WAKEUP_IS_POSTED = """
import asyncio, os, sys, threading, time
sys.setswitchinterval(1000)  # a thread waiting for the GIL gets it only when this one blocks
import django
from django.conf import settings
settings.configure()
django.setup()
from redoxide import RedisCache
from redoxide._bridges import bridge

cache = RedisCache(sys.argv[1], {})

class SlowPosts(asyncio.SelectorEventLoop):
    # A wake-up posted by the runtime blocks (the GIL released) inside call_soon_threadsafe,
    # long enough for the interpreter to exit meanwhile.
    def call_soon_threadsafe(self, callback, *args, context=None):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)
        return super().call_soon_threadsafe(callback, *args, context=context)

class Teardown:
    def __del__(self, sleep=time.sleep, write=os.write):
        write(1, b"torn down\\n")
        sleep(0.5)  # hands the GIL over after the interpreter began to finalize

kept_until_teardown = Teardown()

async def answered_later():
    await cache._client.pipeline([("BLPOP", "nothing", "0.1")], bridge())

loop = SlowPosts()
loop.run_until_complete(cache.aset("k", 1))
unfinished = loop.create_task(answered_later())
loop.call_later(0.2, loop.stop)  # its wake-up is being posted now, and the script ends
loop.run_forever()
print("stopped", flush=True)
"""


def test_an_exit_while_a_wakeup_is_being_posted_is_clean(redis_server: RedisServer) -> None:
    # A runtime thread attached to the interpreter when it finalizes is ended by CPython
    # (before 3.14) in a way that aborts the process, or the exit skips the interpreter's
    # teardown: the exit hook lets it finish, and stops runtime threads attaching, first.
    env = {**os.environ, ENV: "threadsafe"}
    result = subprocess.run(
        [sys.executable, "-c", EXIT_WHILE_A_WAKEUP_IS_POSTED, redis_server.url],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "stopped\ntorn down\n"), result.stderr
