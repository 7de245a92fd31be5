"""Faults, one call at a time, sync and async: dead, unreachable, stalled and restarted servers,
corrupt stored bytes, unpicklable values, and Rust panics.

Timings are only upper bounds that turn a hang into a failure ("raised within the timeout
plus a margin"), never performance assertions. The same faults under load, and what must
hold afterwards, are in test_faults_under_load.py; processes (fork, pre-fork workers,
interpreter exit) in test_processes.py; fail-open in test_fail_open.py.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.backend import backend_errors, build_cache, is_redoxide
from support.dispatch import Ops
from support.netfakes import blackhole_port
from support.servers import RedisServer, Sleeper, free_port

CONNECT_TIMEOUT = 0.5
RESPONSE_TIMEOUT = 0.5
MARGIN = 1.0
TIMEOUTS = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": RESPONSE_TIMEOUT}


def cache_on(location: str, **params: Any) -> Any:
    return build_cache(location, {"OPTIONS": dict(TIMEOUTS), **params})


def raises_within(
    seconds: float, expected: type[BaseException], call: Callable[[], object]
) -> BaseException:
    """Call and return the exception it raised, failing if it did not raise `expected` in time."""
    start = time.monotonic()
    with pytest.raises(expected) as info:
        call()
    elapsed = time.monotonic() - start
    assert elapsed < seconds, f"raised after {elapsed:.2f} s, limit {seconds} s"
    return info.value


# -- dead and unreachable servers -----------------------------------------------------------


def test_dead_server_raises_connection_interrupted(mode: str) -> None:
    errors = backend_errors()
    ops = Ops(cache_on(f"redis://127.0.0.1:{free_port()}/0"), mode)
    calls: list[Callable[[], object]] = [
        lambda: ops.get("k"),
        lambda: ops.set("k", "v"),
        lambda: ops.get_many(["a", "b"]),
        lambda: ops.set_many({"a": 1}),
        lambda: ops.incr("n"),
        lambda: ops.delete("k"),
        lambda: ops.has_key("k"),
    ]
    for call in calls:
        error = raises_within(CONNECT_TIMEOUT + MARGIN, errors.ConnectionInterrupted, call)
        assert isinstance(error, ConnectionError)  # drop-in for `except ConnectionError`
        assert isinstance(error, errors.CacheError)


@pytest.fixture
def blackhole() -> Iterator[int]:
    with blackhole_port() as port:
        yield port


def test_unreachable_server_fails_within_the_connect_timeout(blackhole: int, mode: str) -> None:
    errors = backend_errors()
    ops = Ops(cache_on(f"redis://127.0.0.1:{blackhole}/0"), mode)
    raises_within(CONNECT_TIMEOUT + MARGIN, errors.ConnectionInterrupted, lambda: ops.get("k"))
    raises_within(CONNECT_TIMEOUT + MARGIN, errors.ConnectionInterrupted, lambda: ops.set("k", 1))


# -- stalled server ------------------------------------------------------------------------


def test_stalled_server_raises_cache_timeout_then_recovers(
    paused_guard: RedisServer, mode: str
) -> None:
    server = paused_guard
    errors = backend_errors()
    ops = Ops(cache_on(server.url), mode)
    ops.set_many({"a": "A", "x": "X"})
    server.pause()
    error = raises_within(RESPONSE_TIMEOUT + MARGIN, errors.CacheTimeout, lambda: ops.get("x"))
    assert isinstance(error, TimeoutError)  # drop-in for `except TimeoutError`
    assert isinstance(error, errors.CacheError)
    raises_within(RESPONSE_TIMEOUT + MARGIN, errors.CacheTimeout, lambda: ops.set("b", "B"))
    server.resume()
    # The late replies to the timed-out commands (b"X", OK) must not be read as the answers
    # to new ones: a desynchronised connection would answer get("a") with "X".
    ops.set("c", "C")
    assert ops.get("a") == "A"
    assert ops.get("c") == "C"
    assert ops.get_many(["a", "c", "zz"]) == {"a": "A", "c": "C"}


def test_stalled_server_on_first_connect_does_not_hang(
    paused_guard: RedisServer, mode: str
) -> None:
    server = paused_guard
    errors = backend_errors()
    ops = Ops(cache_on(server.url), mode)
    server.pause()  # the kernel accepts the TCP connection; the handshake never answers
    raises_within(
        CONNECT_TIMEOUT + RESPONSE_TIMEOUT + MARGIN, errors.CacheError, lambda: ops.get("a")
    )
    server.resume()
    ops.set("a", "A")
    assert ops.get("a") == "A"


def test_stalled_server_with_debug_sleep() -> None:
    """A server busy in a slow command (DEBUG SLEEP from another client) times out."""
    from concurrent.futures import ThreadPoolExecutor

    errors = backend_errors()
    with RedisServer("--enable-debug-command", "local") as server:
        cache = cache_on(server.url)
        cache.set("a", "A")
        asyncio.run(cache.aset("b", "B"))
        with ThreadPoolExecutor(1) as pool:
            # The worker thread's sync connection is up before the server goes busy.
            assert pool.submit(cache.get, "a").result() == "A"
            # Asleep for longer than both calls' timeouts plus the margin.
            sleeper = Sleeper(server, 2 * (RESPONSE_TIMEOUT + MARGIN))
            try:
                sync_call = pool.submit(
                    raises_within,
                    RESPONSE_TIMEOUT + MARGIN,
                    errors.CacheTimeout,
                    lambda: cache.get("a"),
                )
                raises_within(
                    RESPONSE_TIMEOUT + MARGIN,
                    errors.CacheTimeout,
                    lambda: asyncio.run(cache.aget("b")),
                )
                sync_call.result()
            finally:
                sleeper.wait()
        assert cache.get("a") == "A"
        assert asyncio.run(cache.aget("b")) == "B"


# -- restart and crash ---------------------------------------------------------------------


def succeeds_soon(call: Callable[[], object], within: float = 1.5) -> int:
    """Retry call until it succeeds (within `within` s); return the number of failed tries.

    Only ConnectionInterrupted may be raised meanwhile: anything else fails the test.
    """
    errors = backend_errors()
    deadline = time.monotonic() + within
    failures = 0
    while True:
        try:
            call()
            return failures
        except errors.ConnectionInterrupted:
            failures += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_server_restart_mid_use_recovers(fresh_redis_server: RedisServer, mode: str) -> None:
    server = fresh_redis_server
    ops = Ops(cache_on(server.url), mode)
    ops.set("before", 1)
    server.restart()  # same port, empty dataset
    succeeds_soon(lambda: ops.set("after", 2))
    assert ops.get("after") == 2
    assert ops.get("before") is None
    for i in range(10):
        ops.set(f"k{i}", i)
    assert ops.get_many([f"k{i}" for i in range(10)]) == {f"k{i}": i for i in range(10)}


def test_first_call_after_an_idle_restart_succeeds(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    # The restarted server closed the old connection while the cache sat idle, so the client
    # can see it is dead before sending: the next call must reconnect, not fail (the async
    # path and redis-py both manage this).
    server = fresh_redis_server
    ops = Ops(cache_on(server.url), mode)
    ops.set("before", 1)
    server.restart()
    time.sleep(0.1)
    ops.set("after", 2)
    assert ops.get("after") == 2


def test_server_restart_within_one_event_loop(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    cache = cache_on(server.url)
    errors = backend_errors()

    async def scenario() -> None:
        await cache.aset("before", 1)
        await asyncio.to_thread(server.restart)
        deadline = time.monotonic() + 1.5
        while True:
            try:
                await cache.aset("after", 2)
                break
            except errors.ConnectionInterrupted:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        assert await cache.aget("after") == 2
        results = await asyncio.gather(*(cache.aget("after") for _ in range(20)))
        assert results == [2] * 20

    asyncio.run(scenario())


def test_crashed_server_errors_fast_then_recovers(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    server = fresh_redis_server
    errors = backend_errors()
    ops = Ops(cache_on(server.url), mode)
    ops.set("k", "v")
    server.kill()  # SIGKILL: as a crash would
    raises_within(CONNECT_TIMEOUT + MARGIN, errors.ConnectionInterrupted, lambda: ops.get("k"))
    raises_within(CONNECT_TIMEOUT + MARGIN, errors.ConnectionInterrupted, lambda: ops.get("k"))
    server.restart()
    succeeds_soon(lambda: ops.set("k", "again"))
    assert ops.get("k") == "again"


# -- corrupt and unpicklable values ------------------------------------------------------------

GARBAGE = {
    "pickle_header_then_junk": b"\x80\x05junk that is not pickle",
    "truncated_pickle": pickle.dumps({"a": list(range(50))})[:-10],
    "plain_text": b"not a pickle at all",
    "non_utf8": b"\xff\xfe\xfd\x00\x01",
    "zlib_magic": b"\x78\x9cnot zlib data",
    "lz4_magic": b"\x04\x22\x4d\x18not lz4 data",
    "digits_then_text": b"12abc",
}


@pytest.mark.parametrize("raw", list(GARBAGE.values()), ids=list(GARBAGE))
def test_corrupt_stored_bytes_raise_serialization_error(
    cache: Any, redis_client: Any, mode: str, raw: bytes
) -> None:
    errors = backend_errors()
    ops = Ops(cache, mode)
    redis_client.set(":1:bad", raw)
    ops.set("good", "fine")
    with pytest.raises(errors.SerializationError) as info:
        ops.get("bad")
    assert isinstance(info.value, errors.CacheError)
    assert isinstance(info.value, ValueError)
    assert "bad" in str(info.value)  # names the key whose value cannot be decoded
    with pytest.raises(errors.SerializationError):
        ops.get_many(["good", "bad"])
    # The connection and the cache are still usable.
    assert ops.get("good") == "fine"
    assert redis_client.get(":1:bad") == raw


class UnpicklableError(Exception):
    pass


class Unpicklable:
    def __reduce__(self) -> Any:
        raise UnpicklableError("this object refuses to be pickled")


def test_unpicklable_value_raises_as_is_and_writes_nothing(
    cache: Any, redis_client: Any, mode: str
) -> None:
    ops = Ops(cache, mode)
    ops.set("existing", "old")
    with pytest.raises(UnpicklableError):
        ops.set("existing", Unpicklable())
    with pytest.raises(UnpicklableError):
        ops.set("new", Unpicklable())
    with pytest.raises(UnpicklableError):
        ops.add("added", Unpicklable())
    with pytest.raises(UnpicklableError):
        ops.set_many({"m1": "fine", "m2": Unpicklable(), "m3": 3})
    with pytest.raises(UnpicklableError):
        ops.get_or_set("gos", Unpicklable())
    with pytest.raises(TypeError):
        ops.set("lock", threading.Lock())
    assert ops.get("existing") == "old"
    assert sorted(redis_client.keys("*")) == [b":1:existing"]
    ops.set("after", "works")  # the cache is still usable
    assert ops.get("after") == "works"


# -- Rust panics ---------------------------------------------------------------------------------


def test_rust_panic_becomes_internal_error(cache: Any) -> None:
    if not is_redoxide():
        pytest.skip("redoxide-only: the Rust core's panic hook")
    from redoxide import _redoxide
    from redoxide.exceptions import CacheError, InternalError

    # Only in a build with the test-hooks feature (`make build`); wheels do not have it.
    panic = getattr(_redoxide, "_panic_for_tests", None)
    if panic is None:
        pytest.skip("the extension was built without the test-hooks feature")
    for _ in range(2):
        with pytest.raises(InternalError) as info:
            panic()
        assert isinstance(info.value, CacheError)
    # The interpreter and the cache keep working.
    cache.set("after_panic", 1)
    assert cache.get("after_panic") == 1
    assert asyncio.run(cache.aget("after_panic")) == 1
