"""A task waiting for a reply parks on the awaitable itself (future-like), and the drain wakes it
directly, in its own context, as the loop would call its handle.

Each wait here is made certain by construction: the server is paused (SIGSTOP), so a command
sent meanwhile cannot be answered, and the task is observed parked (its ``_fut_waiter``) before
anything else happens. Every wake-up path is covered: eventfd, self-pipe and
call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from redoxide._bridges import bridge
from support.backend import build_cache
from support.servers import RedisServer
from support.wakeups import ENV, MODES

pytestmark = pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide") != "redoxide",
    reason="redoxide internals",
)

# Loop iterations a task may take to park (a lone command polls before it parks).
MAX_TICKS = 100_000

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")


@pytest.fixture(params=MODES)
def wakeup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every loop made in the test wakes as the parameter says (read per bridge)."""
    monkeypatch.setenv(ENV, request.param)
    return str(request.param)


@pytest.fixture
def paused_cache(fresh_redis_server: RedisServer) -> Iterator[tuple[Any, RedisServer]]:
    cache = build_cache(fresh_redis_server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 60}})
    cache.set("k", "v")
    try:
        yield cache, fresh_redis_server
    finally:
        fresh_redis_server.resume()


async def parked(task: asyncio.Task[Any]) -> Any:
    """Run the loop until `task` waits on something; return what it waits on."""
    for _ in range(MAX_TICKS):
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is not None:
            return waiter
        assert not task.done(), task
        await asyncio.sleep(0)
    raise AssertionError(f"{task} never parked")


def test_a_parked_wait_is_future_like_only_while_parked(
    wakeup: str, paused_cache: tuple[Any, RedisServer]
) -> None:
    cache, server = paused_cache

    async def run() -> None:
        loop = asyncio.get_running_loop()
        assert bridge().wakeup == wakeup
        raw = cache._client.get(cache.make_key("k"), bridge())
        # Not a future to asyncio until a task waits on it: gather wraps it in a task.
        assert not asyncio.isfuture(raw)
        server.pause()
        task = asyncio.ensure_future(cache.aget("k"))
        gathered = asyncio.gather(raw)
        waiter = await parked(task)
        assert type(waiter).__name__ == "Pending"
        assert asyncio.isfuture(waiter)
        assert waiter.get_loop() is loop
        assert not waiter.done() and not waiter.cancelled()
        with pytest.raises(asyncio.InvalidStateError):
            waiter.result()
        server.resume()
        assert await task == "v"
        assert [pickle.loads(data) for data in await gathered] == ["v"]
        assert waiter.done() and waiter.result() is None

    asyncio.run(run())


def test_a_parked_wait_cancels_at_once_and_the_late_reply_is_dropped(
    wakeup: str, paused_cache: tuple[Any, RedisServer]
) -> None:
    cache, server = paused_cache

    async def run() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        server.pause()
        task = asyncio.ensure_future(cache.aget("k"))
        waiter = await parked(task)
        assert task.cancel("client went away")
        # Woken without the server: it is still paused.
        with pytest.raises(asyncio.CancelledError) as cancelled:
            await task
        assert "client went away" in str(cancelled.value.args)
        assert waiter.cancelled() and waiter.done()
        assert not waiter.cancel()  # once only
        server.resume()
        # The reply of the cancelled wait arrives and is dropped; the connection goes on.
        assert await cache.aget("k") == "v"
        assert await asyncio.gather(*(cache.aget("k") for _ in range(20))) == ["v"] * 20
        return errors

    assert asyncio.run(run()) == []


def test_a_woken_task_runs_in_its_own_context(
    wakeup: str, paused_cache: tuple[Any, RedisServer]
) -> None:
    cache, server = paused_cache

    async def request(n: int) -> tuple[str, Any]:
        request_id.set(f"request {n}")
        got = await cache.aget("k")
        return request_id.get(), got

    async def run() -> list[tuple[str, Any]]:
        server.pause()
        tasks = [asyncio.ensure_future(request(n)) for n in range(5)]
        for task in tasks:
            await parked(task)
        server.resume()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(run()) == [(f"request {n}", "v") for n in range(5)]


def test_a_failing_done_callback_is_reported_and_wakes_the_others(
    wakeup: str, paused_cache: tuple[Any, RedisServer]
) -> None:
    cache, server = paused_cache

    def boom(_: Any) -> None:
        raise RuntimeError("boom")

    async def run() -> tuple[list[Any], list[dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        server.pause()
        # Answered in the same read as the tasks' commands behind it: their wake-ups follow
        # the failing callback in the drain.
        raw = cache._client.get(cache.make_key("k"), bridge())
        raw.add_done_callback(boom)
        tasks = [asyncio.ensure_future(cache.aget("k")) for _ in range(10)]
        for task in tasks:
            await parked(task)
        server.resume()
        # Bounded: a wake-up lost behind the failing callback would hang here, not fail.
        return list(await asyncio.wait_for(asyncio.gather(*tasks), 60)), errors

    got, errors = asyncio.run(run())
    assert got == ["v"] * 10
    assert [type(e.get("exception")) for e in errors] == [RuntimeError]
