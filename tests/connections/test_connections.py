"""Server connections and round trips.

Async traffic multiplexes on one connection per server per process; sync traffic uses one
connection per thread that used the cache; backend instances (Django makes one per thread /
async context) share them, and close() keeps them. get_many / set_many / delete_many each
cost one round trip. Connection counts are read on the server (CLIENT LIST) on a server of
the test's own, so no other test's connections are counted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import CacheHandler
from support.backend import BACKEND, build_cache
from support.dispatch import Ops
from support.netfakes import CountingProxy
from support.servers import RedisServer


def client_ids(server: RedisServer) -> set[str]:
    """Return the ids of the server's client connections, except the observer's own."""
    ids = set()
    for line in server.cli("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("cmd") != "client|list":
            ids.add(fields["id"])
    return ids


def command_calls(server: RedisServer) -> dict[str, int]:
    """Return {command: calls} from INFO commandstats."""
    calls = {}
    for name, value in server.info("commandstats").items():
        stats = dict(f.split("=", 1) for f in value.split(","))
        calls[name.removeprefix("cmdstat_")] = int(stats["calls"])
    return calls


class ConnectionSampler:
    """Sample the server's client count in a thread; `peak` is the largest count seen."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.server.client_count())
            self.samples += 1
            time.sleep(0.01)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.peak = max(self.peak, self.server.client_count())


# -- async: one multiplexed connection ---------------------------------------------------------


def test_50_concurrent_agets_hold_at_most_two_connections(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    cache = build_cache(server.url, {})
    keys = [f"k{i}" for i in range(50)]
    cache.set_many({key: key.upper() for key in keys})

    async def storm() -> int:
        rounds = 0
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            results = await asyncio.gather(*(cache.aget(key) for key in keys))
            assert results == [key.upper() for key in keys]
            rounds += 1
        return rounds

    with ConnectionSampler(server) as sampler:
        rounds = asyncio.run(storm())
        asyncio.run(storm())  # a second event loop: still the same connection
    assert rounds > 0
    assert sampler.samples > 0
    assert 1 <= sampler.peak <= 2, f"{sampler.peak} connections for 50 concurrent agets"


def test_several_event_loops_share_the_async_connection(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    cache = build_cache(server.url, {})
    asyncio.run(cache.aset("k", 1))
    before = client_ids(server)
    for _ in range(5):
        assert asyncio.run(cache.aget("k")) == 1
    assert client_ids(server) == before


# -- instances share connections ----------------------------------------------------------


def test_many_instances_in_one_thread_share_connections(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    caches = [build_cache(server.url, {"KEY_PREFIX": f"p{i % 3}"}) for i in range(20)]
    for i, cache in enumerate(caches):
        cache.set("k", i)
        cache.get("k")
    assert len(client_ids(server)) <= 1, "sync connections grew with backend instances"

    async def use_all() -> None:
        await asyncio.gather(*(cache.aget("k") for cache in caches))

    asyncio.run(use_all())
    assert len(client_ids(server)) <= 2, "async connections grew with backend instances"


def test_thread_instances_share_connections_bounded_by_threads(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    config = {"BACKEND": BACKEND, "LOCATION": server.url}
    # Three aliases with one configuration: 20 threads x 3 = 60 backend instances.
    handler = CacheHandler({"default": config, "other": dict(config), "third": dict(config)})
    n_threads = 20
    barrier = threading.Barrier(n_threads + 1)
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for alias in ("default", "other", "third"):
                cache = handler[alias]
                cache.set(f"{alias}{i}", i)
                assert cache.get(f"{alias}{i}") == i
            if i % 4 == 0:
                asyncio.run(handler["default"].aget(f"default{i}"))
        except BaseException as exc:
            failures.append(exc)
        finally:
            barrier.wait(30)  # all threads alive while the server counts connections
            barrier.wait(30)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait(30)
        count = len(client_ids(server))
    finally:
        barrier.wait(30)
        for thread in threads:
            thread.join(30)
    assert not failures, failures
    assert count <= n_threads + 1, f"{count} connections for {n_threads} threads"


def test_short_lived_threads_do_not_accumulate_connections(
    fresh_redis_server: RedisServer,
) -> None:
    # Django's runserver and sync_to_async pools use the cache from threads that come and go.
    server = fresh_redis_server
    cache = build_cache(server.url, {})
    cache.set("k", 1)
    for _ in range(30):
        thread = threading.Thread(target=cache.get, args=("k",))
        thread.start()
        thread.join(10)
    deadline = time.monotonic() + 2
    while len(client_ids(server)) > 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(client_ids(server)) <= 3


def test_event_loops_do_not_leak_file_descriptors(fresh_redis_server: RedisServer) -> None:
    import os

    cache = build_cache(fresh_redis_server.url, {})
    asyncio.run(cache.aset("k", 1))

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for _ in range(200):
        assert asyncio.run(cache.aget("k")) == 1
    assert open_fds() <= before + 5


def test_close_keeps_the_shared_connections(fresh_redis_server: RedisServer) -> None:
    server = fresh_redis_server
    cache = build_cache(server.url, {})
    cache.set("k", 1)
    asyncio.run(cache.aset("a", 2))
    before = client_ids(server)
    assert before
    cache.close()
    asyncio.run(cache.aclose())
    assert cache.get("k") == 1
    assert asyncio.run(cache.aget("a")) == 2
    assert client_ids(server) == before  # nothing was closed and reopened
    fresh_instance = build_cache(server.url, {})
    assert fresh_instance.get("k") == 1
    assert client_ids(server) == before


# -- round trips ------------------------------------------------------------------------------


@pytest.fixture
def proxy(redis_server: RedisServer) -> Any:
    redis_server.cli("flushall")
    with CountingProxy(redis_server.port) as proxy:
        yield proxy


def test_bulk_calls_take_one_round_trip_each(proxy: CountingProxy, mode: str) -> None:
    ops = Ops(build_cache(proxy.url, {}), mode)
    keys = [f"key{i}" for i in range(10)]
    data = {key: {"value": i} for i, key in enumerate(keys)}

    def turns(call: Callable[[], object]) -> int:
        proxy.reset()
        call()
        return proxy.turns

    ops.set("warm", 1)  # connect and handshake outside the counted calls
    ops.get("warm")
    assert turns(lambda: ops.set_many(data, 100)) == 1
    assert turns(lambda: ops.get_many(keys)) == 1
    assert ops.get_many(keys) == data
    assert turns(lambda: ops.set_many(data, None)) == 1
    assert turns(lambda: ops.delete_many(keys)) == 1
    assert ops.get_many(keys) == {}
    assert turns(lambda: ops.get("warm")) == 1
    assert turns(lambda: ops.set("warm", 2)) == 1


def test_set_many_with_timeout_in_one_round_trip_sets_every_expiry(
    proxy: CountingProxy, redis_client: Any
) -> None:
    cache = build_cache(proxy.url, {})
    cache.set("warm", 1)
    proxy.reset()
    cache.set_many({f"t{i}": i for i in range(10)}, 50)
    assert proxy.turns == 1
    for i in range(10):
        assert 49_000 < redis_client.pttl(f":1:t{i}") <= 50_000


def test_get_many_and_delete_many_send_one_command(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    server = fresh_redis_server
    ops = Ops(build_cache(server.url, {}), mode)
    keys = [f"key{i}" for i in range(10)]
    ops.set_many({key: i for i, key in enumerate(keys)})
    server.cli("CONFIG", "RESETSTAT")
    assert ops.get_many(keys) == {key: i for i, key in enumerate(keys)}
    calls = command_calls(server)
    assert calls.get("mget") == 1, calls
    assert "get" not in calls, calls
    server.cli("CONFIG", "RESETSTAT")
    ops.delete_many(keys)
    calls = command_calls(server)
    assert calls.get("del", 0) + calls.get("unlink", 0) == 1, calls


def test_a_host_name_is_resolved_within_the_connect_timeout(redis_server: RedisServer) -> None:
    # Sync connections resolve names on the I/O runtime, bounded by SOCKET_CONNECT_TIMEOUT.
    cache = build_cache(
        f"redis://localhost:{redis_server.port}/0",
        {"OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5}, "KEY_PREFIX": "dns"},
    )
    cache.set("k", "v")
    assert cache.get("k") == "v"
    assert asyncio.run(cache.aget("k")) == "v"


def test_command_arguments_are_written_as_python_writes_them(
    redis_server: RedisServer, redis_client: Any
) -> None:
    # Ints as digits (past 64 bits too, negative too), a bool and an int subclass as str()
    # writes them, floats, str and bytes; from a tuple (what the cache sends) and a list.
    class Level(int):
        def __str__(self) -> str:
            return f"level-{int(self)}"

    client = build_cache(redis_server.url, {})._client
    written = {
        "int": (7, b"7"),
        "negative": (-12, b"-12"),
        "big": (2**70, str(2**70).encode()),
        "bool": (True, b"True"),
        "subclass": (Level(3), b"level-3"),
        "float": (1.5, b"1.5"),
        "str": ("é", "é".encode()),
        "bytes": (b"\x00\xff", b"\x00\xff"),
    }
    for name, (value, stored) in written.items():
        client.execute(("SET", f"arg:{name}", value))
        assert redis_client.get(f"arg:{name}") == stored, name
        client.execute(["SET", f"arg:{name}", value])
        assert redis_client.get(f"arg:{name}") == stored, name
    assert client.execute(("INCRBY", "arg:int", -(2**40))) == 7 - 2**40
