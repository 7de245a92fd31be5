"""cache.lock() / cache.alock(): a distributed lock only its owner can release."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redoxide
from redoxide.lock import AsyncLock, LockError, LockNotOwnedError
from support.servers import RedisServer

LockingCache = redoxide.RedisCache


@pytest.fixture
def cache(redis_server: RedisServer) -> LockingCache:
    redis_server.flushall()
    return LockingCache(redis_server.url, {"KEY_PREFIX": "lk"})


def asynctest(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return run


class Overlap:
    """Count critical sections that ran at the same time as another one."""

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self.entries = 0
        self._guard = threading.Lock()

    def enter(self) -> None:
        with self._guard:
            self.inside += 1
            self.entries += 1
            if self.inside > 1:
                self.overlaps += 1

    def leave(self) -> None:
        with self._guard:
            self.inside -= 1


def test_lock_name_goes_through_the_key_function(cache: LockingCache, redis_client: Any) -> None:
    with cache.lock("job", version=3) as lock:
        assert lock.name == "lk:3:job"
        assert redis_client.exists("lk:3:job")
    assert not redis_client.exists("lk:3:job")


def test_lock_timeout_sets_the_ttl(cache: LockingCache, redis_client: Any) -> None:
    lock = cache.lock("job", timeout=5)
    assert lock.acquire()
    assert 4000 < redis_client.pttl("lk:1:job") <= 5000
    lock.release()
    forever = cache.lock("job")
    assert forever.acquire()
    assert redis_client.pttl("lk:1:job") == -1
    forever.release()


def test_eight_threads_hold_the_lock_one_at_a_time(cache: LockingCache) -> None:
    overlap = Overlap()

    def worker() -> None:
        for _ in range(5):
            with cache.lock("shared", timeout=10, sleep=0.001):
                overlap.enter()
                time.sleep(0.001)
                overlap.leave()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap.entries == 40
    assert overlap.overlaps == 0
    assert not cache.lock("shared").locked()


@asynctest
async def test_fifty_tasks_hold_the_lock_one_at_a_time(cache: LockingCache) -> None:
    overlap = Overlap()

    async def worker() -> None:
        for _ in range(2):
            async with cache.alock("shared", timeout=10, sleep=0.001):
                overlap.enter()
                await asyncio.sleep(0.001)
                overlap.leave()

    await asyncio.gather(*(worker() for _ in range(50)))
    assert overlap.entries == 100
    assert overlap.overlaps == 0
    assert not await cache.alock("shared").locked()


def test_an_expired_holder_cannot_release_the_next_owners_lock(cache: LockingCache) -> None:
    first = cache.lock("job", timeout=0.05)
    assert first.acquire()
    time.sleep(0.1)
    second = cache.lock("job", timeout=10)
    assert second.acquire(blocking=False)
    with pytest.raises(LockNotOwnedError, match="expired or is now held by someone else"):
        first.release()
    assert second.owned()
    assert second.locked()
    with pytest.raises(LockError):
        first.extend(10)
    assert not first.owned()
    second.release()
    assert not second.locked()


@asynctest
async def test_an_expired_async_holder_cannot_release_the_next_owners_lock(
    cache: LockingCache,
) -> None:
    first = cache.alock("job", timeout=0.05)
    assert await first.acquire()
    await asyncio.sleep(0.1)
    second = cache.alock("job", timeout=10)
    assert await second.acquire(blocking=False)
    with pytest.raises(LockNotOwnedError):
        await first.release()
    assert await second.owned()
    await second.release()


def test_releasing_a_lock_not_held_raises(cache: LockingCache) -> None:
    lock = cache.lock("job")
    with pytest.raises(LockError, match="not held"):
        lock.release()
    assert lock.acquire()
    lock.release()
    with pytest.raises(LockError, match="not held"):
        lock.release()


def test_another_thread_cannot_release_a_thread_local_lock(cache: LockingCache) -> None:
    lock = cache.lock("job")
    assert lock.acquire()
    errors: list[BaseException] = []

    def release() -> None:
        try:
            lock.release()
        except LockError as exc:
            errors.append(exc)

    t = threading.Thread(target=release)
    t.start()
    t.join()
    assert len(errors) == 1
    assert lock.owned()
    lock.release()


def test_a_shared_lock_can_be_released_by_another_thread(cache: LockingCache) -> None:
    lock = cache.lock("job", thread_local=False)
    assert lock.acquire()
    t = threading.Thread(target=lock.release)
    t.start()
    t.join()
    assert not lock.locked()


def test_extend_adds_to_or_replaces_the_ttl(cache: LockingCache, redis_client: Any) -> None:
    lock = cache.lock("job", timeout=10)
    assert lock.acquire()
    assert lock.extend(20) is True
    assert 29000 < redis_client.pttl("lk:1:job") <= 30000
    assert lock.extend(5, replace_ttl=True) is True
    assert 4000 < redis_client.pttl("lk:1:job") <= 5000
    assert lock.reacquire() is True
    assert 9000 < redis_client.pttl("lk:1:job") <= 10000
    lock.release()
    with pytest.raises(LockError, match="not held"):
        lock.extend(1)


@asynctest
async def test_async_extend_keeps_the_lock_alive(cache: LockingCache, redis_client: Any) -> None:
    lock = cache.alock("job", timeout=0.2)
    assert await lock.acquire()
    assert await lock.extend(10)
    await asyncio.sleep(0.3)
    assert await lock.owned()
    assert redis_client.pttl("lk:1:job") > 9000
    await lock.release()


def test_extend_needs_a_timeout(cache: LockingCache) -> None:
    lock = cache.lock("job")
    assert lock.acquire()
    with pytest.raises(LockError, match="no timeout"):
        lock.extend(1)
    lock.release()


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_invalid_timeouts_are_rejected(cache: LockingCache, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        cache.lock("job", timeout=timeout)


def test_non_blocking_acquire_returns_false(cache: LockingCache) -> None:
    holder = cache.lock("job")
    assert holder.acquire()
    assert cache.lock("job", blocking=False).acquire() is False
    assert cache.lock("job").acquire(blocking=False) is False
    holder.release()
    assert cache.lock("job", blocking=False).acquire() is True


@asynctest
async def test_async_non_blocking_acquire_returns_false(cache: LockingCache) -> None:
    holder = cache.alock("job")
    assert await holder.acquire()
    assert await cache.alock("job", blocking=False).acquire() is False
    await holder.release()


def test_blocking_timeout_bounds_the_wait(cache: LockingCache) -> None:
    holder = cache.lock("job")
    assert holder.acquire()
    waiter = cache.lock("job", sleep=0.05, blocking_timeout=0.2)
    started = time.monotonic()
    assert waiter.acquire() is False
    assert 0.2 <= time.monotonic() - started < 1.5  # not forever: the holder never lets go
    started = time.monotonic()
    with pytest.raises(LockError, match="could not acquire"), waiter:
        pass  # pragma: no cover
    assert time.monotonic() - started < 1.5
    assert holder.owned()
    holder.release()


@asynctest
async def test_async_blocking_timeout_bounds_the_wait(cache: LockingCache) -> None:
    holder = cache.alock("job")
    assert await holder.acquire()
    started = time.monotonic()
    with pytest.raises(LockError, match="could not acquire"):
        async with cache.alock("job", sleep=0.05, blocking_timeout=0.2):
            pass  # pragma: no cover
    assert 0.2 <= time.monotonic() - started < 1.5  # not forever: the holder never lets go
    await holder.release()


def test_blocking_acquire_gets_the_lock_once_released(cache: LockingCache) -> None:
    holder = cache.lock("job", thread_local=False)
    assert holder.acquire()
    threading.Timer(0.1, holder.release).start()
    lock = cache.lock("job", sleep=0.02, blocking_timeout=2)
    assert lock.acquire()
    lock.release()


def test_context_manager_releases_on_exception(cache: LockingCache) -> None:
    with pytest.raises(RuntimeError, match="boom"), cache.lock("job", timeout=10):
        raise RuntimeError("boom")
    assert not cache.lock("job").locked()


@asynctest
async def test_async_context_manager_releases_on_exception(cache: LockingCache) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with cache.alock("job", timeout=10) as lock:
            assert isinstance(lock, AsyncLock)
            assert await lock.owned()
            raise RuntimeError("boom")
    assert not await cache.alock("job").locked()


def _calls(redis_client: Any) -> dict[str, int]:
    stats = redis_client.info("commandstats")
    return {name: stats[name]["calls"] for name in stats}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_uncontended_acquire_and_release_take_two_commands(
    cache: LockingCache, redis_client: Any, mode: str
) -> None:
    async def async_cycle() -> None:
        async with cache.alock("job", timeout=10):
            pass

    def sync_cycle() -> None:
        with cache.lock("job", timeout=10):
            pass

    cycle: Callable[[], Any] = (
        (lambda: asyncio.run(async_cycle())) if mode == "async" else sync_cycle
    )
    cycle()  # warm up connections
    before = _calls(redis_client)
    cycle()
    delta = _delta(before, _calls(redis_client))
    delta.pop("cmdstat_info")
    # The script's own GET and DEL are counted too, but run inside the EVAL on the server;
    # where the server has one, the release is DELIFEQ (Valkey 9.0) or DELEX (Redis 8.4).
    assert delta.pop("cmdstat_set") == 1
    releases = {
        name: delta.pop(name, 0) for name in ("cmdstat_eval", "cmdstat_delifeq", "cmdstat_delex")
    }
    assert sorted(releases.values()) == [0, 0, 1], releases
    assert set(delta) <= {"cmdstat_get", "cmdstat_del"}
