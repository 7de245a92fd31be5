"""The asyncio bridge and the multiplexed connection under the awaitables."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from typing import Any

import pytest
from support.backend import build_cache
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide") != "redoxide",
    reason="redoxide internals",
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_finished_event_loops_leave_no_descriptors_behind(cache: Any) -> None:
    asyncio.run(cache.aset("k", 1))
    gc.collect()
    before = open_fds()
    for _ in range(30):
        assert asyncio.run(cache.aget("k")) == 1
    gc.collect()
    assert open_fds() <= before + 1


def test_loops_in_many_threads_share_one_connection(cache: Any, redis_server: RedisServer) -> None:
    asyncio.run(cache.aset("k", "v"))
    baseline = redis_server.client_count()
    results: list[Any] = []

    def worker() -> None:
        async def run() -> list[Any]:
            return list(await asyncio.gather(*(cache.aget("k") for _ in range(50))))

        results.extend(asyncio.run(run()))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == ["v"] * 200
    assert redis_server.client_count() == baseline


def test_pipelined_replies_reach_the_right_awaiters(cache: Any) -> None:
    async def run() -> None:
        await cache.aset_many({f"k{i}": i * 7 for i in range(300)})
        got = await asyncio.gather(*(cache.aget(f"k{i}") for i in range(300)))
        assert got == [i * 7 for i in range(300)]
        many = await asyncio.gather(
            *(cache.aget_many([f"k{i}", f"k{i + 1}"]) for i in range(0, 298, 3))
        )
        assert many == [{f"k{i}": i * 7, f"k{i + 1}": (i + 1) * 7} for i in range(0, 298, 3)]

    asyncio.run(run())


def test_large_values_cross_the_read_buffer(cache: Any) -> None:
    big = os.urandom(300_000)

    async def run() -> None:
        await cache.aset("big", big)
        values = await asyncio.gather(*(cache.aget("big") for _ in range(8)))
        assert all(v == big for v in values)

    asyncio.run(run())
    assert cache.get("big") == big


def test_unix_socket_async(tmp_path: Any) -> None:
    sock = tmp_path / "redis.sock"
    with RedisServer("--unixsocket", str(sock), "--unixsocketperm", "700"):
        cache = build_cache(f"unix://{sock}?db=3")
        cache.set("k", "sync")

        async def run() -> Any:
            await cache.aset("a", "async")
            return await cache.aget("k"), await cache.aget("a")

        assert asyncio.run(run()) == ("sync", "async")


def test_broken_async_connections_are_released(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    cache = build_cache(server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 0.5}})
    asyncio.run(cache.aset("k", 1))
    gc.collect()
    before = open_fds()
    for _ in range(5):
        # The server drops every client; the idle connection's tasks must end and let go.
        server.cli("CLIENT", "KILL", "TYPE", "normal")
        for _ in range(3):
            try:
                assert asyncio.run(cache.aget("k")) == 1
                break
            except ConnectionError:
                continue
    gc.collect()
    assert open_fds() <= before + 2


def test_large_multi_key_replies_sync_and_async(cache: Any) -> None:
    values = {f"big{i}": os.urandom(256 * 1024) for i in range(12)}
    cache.set_many(values)
    assert cache.get_many(list(values)) == values

    async def run() -> None:
        got = await asyncio.gather(*(cache.aget_many(list(values)) for _ in range(3)))
        assert all(g == values for g in got)

    asyncio.run(run())


def test_awaiting_a_command_twice_is_an_error_not_a_hang(cache: Any) -> None:
    from redoxide._bridges import bridge as _bridge

    async def run() -> None:
        pending = cache._client.get(cache.make_key("k"), _bridge())
        assert await pending is None
        with pytest.raises(RuntimeError, match="already awaited"):
            await pending

    asyncio.run(run())


def test_a_task_abandoned_on_a_closed_loop_is_collected(fresh_redis_server: RedisServer) -> None:
    # A task parked on a reply that never comes, on a loop closed without cancelling it: the
    # cycle Pending -> asyncio future -> task -> coroutine -> Pending must be collectable.
    import weakref

    cache = build_cache(fresh_redis_server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 30}})
    asyncio.run(cache.aset("k", 1))
    fresh_redis_server.pause()
    try:
        loop = asyncio.new_event_loop()
        task = loop.create_task(cache.aget("k"))
        loop.run_until_complete(asyncio.sleep(0.05))  # the task is parked on its future
        assert not task.done()
        task_ref, loop_ref = weakref.ref(task), weakref.ref(loop)
        loop.close()
        del task, loop
        for _ in range(3):
            gc.collect()
        assert task_ref() is None
        assert loop_ref() is None
    finally:
        fresh_redis_server.resume()


def test_replies_for_cancelled_awaiters_are_dropped_without_an_error_on_the_loop(
    cache: Any,
) -> None:
    # The wake-up of a cancelled task finds its future done (set_result refused): that reply
    # is simply dropped; nothing reaches the loop's exception handler, later calls go on.
    async def run() -> list[Any]:
        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        await cache.aset("k", "v")
        cancelled = 0
        for _ in range(20):
            tasks = [asyncio.ensure_future(cache.aget("k")) for _ in range(20)]
            await asyncio.sleep(0)  # every command is sent; most are not answered yet
            for task in tasks[::2]:
                task.cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            cancelled += sum(isinstance(r, asyncio.CancelledError) for r in done[::2])
            assert all(isinstance(r, asyncio.CancelledError) or r == "v" for r in done[::2])
            assert done[1::2] == ["v"] * 10
        await asyncio.sleep(0.05)  # the last replies of cancelled awaiters are drained
        assert await cache.aget("k") == "v"
        assert cancelled > 0
        return errors

    assert asyncio.run(run()) == []
