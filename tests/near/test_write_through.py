"""A process' own writes of kept keys go through its tracking connection (NOLOOP): the server
does not echo them back, so the written value is kept at once and the writing process reads
nothing back; every other process still sees the write within MAX_STALE_MS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import pytest
from redoxide.exceptions import CacheTimeout
from support.dispatch import Ops
from support.near import MAX_STALE_MS, after_stale_bound, near_options, serving, wait_for, warm
from support.netfakes import CountingProxy
from support.servers import RedisServer

# Tests that count what an own write did need the gate open throughout (writes go through the
# tracking connection only while it serves): a bound no scheduling delay on a loaded host
# reaches. (Another process's write is checked against the usual bound.)
STEADY = near_options(MAX_STALE_MS=10_000)


def test_an_own_set_is_kept_without_reading_it_back(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    cache = make_near(near=STEADY)
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    before = cache.near_cache_stats()
    assert ops.set("cfg:a", 2) is None  # Django's set returns None
    assert ops.set("cfg:a", {"v": 3}) is None
    for _ in range(3):
        assert ops.get("cfg:a") == {"v": 3}
    after = cache.near_cache_stats()
    assert after["misses"] == before["misses"], "the own write was read back from the server"
    assert after["own_writes_kept"] == before["own_writes_kept"] + 2
    assert after["hits"] >= before["hits"] + 3
    # The server has it too, in the usual format.
    assert writer.get(cache.make_and_validate_key("cfg:a")) is not None
    assert writer.pttl(cache.make_and_validate_key("cfg:a")) > 0


def test_a_set_that_does_not_apply_keeps_nothing(make_near: Callable[..., Any], mode: str) -> None:
    cache = make_near(near=STEADY)
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    assert ops.add("cfg:a", 5) is False  # SET NX on a present key
    assert ops.get("cfg:a") == 1
    kept = cache.near_cache_stats()["own_writes_kept"]
    assert ops.add("cfg:new", 6) is True
    assert ops.get("cfg:new") == 6
    assert cache.near_cache_stats()["own_writes_kept"] == kept + 1


def test_an_untracked_key_is_written_the_usual_way(make_near: Callable[..., Any]) -> None:
    cache = make_near(near=STEADY)
    serving(cache)
    cache.set("other:a", 1)
    assert cache.get("other:a") == 1
    assert cache.near_cache_stats()["own_writes_kept"] == 0


def test_a_value_too_large_to_keep_is_written_the_usual_way(
    make_near: Callable[..., Any],
) -> None:
    cache = make_near(near=near_options(MAX_VALUE_BYTES=1000, MAX_STALE_MS=10_000))
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    big = "x" * 5000
    cache.set("cfg:a", big)
    assert cache.get("cfg:a") == big
    assert cache.near_cache_stats()["own_writes_kept"] == 0


def test_an_own_write_applied_after_another_clients_is_kept_though_that_ones_news_came_first(
    near_proxy: CountingProxy, make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    # Another client writes a kept key, then this process writes it: the server tells the
    # tracking connection of the other write before it answers ours, and the connection reads
    # both in that order, so what this process wrote is kept (it is the server's value). The
    # proxy holds everything the server sends the tracking connection from its next probe on
    # (the probe reads the database marker, which nothing else sends), so both wait there in
    # the server's order however fast the host is.
    cache = make_near(near_proxy.url, near=STEADY)
    ops = Ops(cache, mode)
    made = cache.make_and_validate_key("cfg:a")
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    near_proxy.hold(cache._client._store.marker().encode())
    assert near_proxy.holding.wait(10), "the tracking connection sent no probe"
    before = cache.near_cache_stats()
    writer.set(made, b"2")  # applied first; its invalidation waits in the proxy
    ours = threading.Thread(target=ops.set, args=("cfg:a", 3))
    ours.start()
    wait_for("this process' write to be applied", lambda: writer.get(made) == b"3")
    near_proxy.release()
    ours.join(10)
    assert not ours.is_alive()
    after = cache.near_cache_stats()
    assert after["invalidations"] >= before["invalidations"] + 1
    assert after["own_writes_kept"] == before["own_writes_kept"] + 1
    assert ops.get("cfg:a") == 3
    assert cache.near_cache_stats()["hits"] > after["hits"], "the own write was not kept"


def test_threads_writing_one_key_leave_the_kept_value_equal_to_the_servers(
    make_near: Callable[..., Any], writer: Any
) -> None:
    # Eight threads write and read one kept key while another client writes it too: own writes
    # overlap, and other writes land before, between and after them.
    cache = make_near(near=STEADY)
    made = cache.make_and_validate_key("cfg:hot")
    cache.set("cfg:hot", -1)
    assert warm(cache, "cfg:hot") == -1
    start = threading.Barrier(9)
    done = threading.Event()
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(150):
                cache.set("cfg:hot", t * 1000 + i)
                cache.get("cfg:hot")
        except BaseException as exc:
            errors.append(exc)

    def other() -> None:
        start.wait()
        i = 0
        while not done.is_set():
            writer.set(made, str(-1000 - i).encode())  # an int, as the cache stores it
            i += 1

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    outside = threading.Thread(target=other)
    for t in [*threads, outside]:
        t.start()
    for t in threads:
        t.join()
    done.set()
    outside.join()
    assert not errors
    on_server = int(writer.get(made))
    # Own writes are installed in the order the server answered them, and every other
    # write's invalidation is read in its place among those answers: once the last one has
    # crossed, what this process serves is the server's value (a wrong install would stay).
    wait_for("the kept value to be the server's", lambda: cache.get("cfg:hot") == on_server)
    assert cache.near_cache_stats()["own_writes_kept"] > 0


def test_another_process_sees_an_own_write_within_the_bound(
    make_near: Callable[..., Any], near_server: RedisServer
) -> None:
    prefix = "wt-other"
    reader = make_near(KEY_PREFIX=prefix)
    reader.set("cfg:a", 1)
    assert warm(reader, "cfg:a") == 1
    script = textwrap.dedent(
        f"""
        import time
        import django
        from django.conf import settings
        settings.configure(CACHES={{"default": {{
            "BACKEND": "redoxide.RedisCache", "LOCATION": {near_server.url!r},
            "KEY_PREFIX": {prefix!r},
            "OPTIONS": {{"NEAR_CACHE": {{"PREFIXES": ["cfg:"], "MAX_STALE_MS": {MAX_STALE_MS}}}}},
        }}}})
        django.setup()
        from django.core.cache import cache
        deadline = time.monotonic() + 10
        while not (cache.get("cfg:a") == 1 and cache.near_cache_stats()["serving"]):
            assert time.monotonic() < deadline, "the writer's near cache never served"
            time.sleep(0.005)
        cache.set("cfg:a", 2)
        assert cache.near_cache_stats()["own_writes_kept"] == 1
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after_stale_bound()
    assert reader.get("cfg:a") == 2
    assert reader.near_cache_stats()["invalidations"] >= 1


def test_a_write_queued_behind_a_probe_still_times_out_in_socket_timeout(
    near_proxy: CountingProxy, make_near: Callable[..., Any]
) -> None:
    # The tracking connection's probes may wait as long as MAX_STALE_MS (here 8 s); an own
    # write sent behind an unanswered probe is bound by SOCKET_TIMEOUT all the same. The
    # proxy holds the server's answers to the tracking connection from its next probe on.
    import asyncio

    cache = make_near(near_proxy.url, near=near_options(MAX_STALE_MS=8_000), SOCKET_TIMEOUT=0.5)
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    near_proxy.hold(cache._client._store.marker().encode())
    assert near_proxy.holding.wait(30), "the tracking connection sent no probe"
    try:
        with pytest.raises(CacheTimeout):
            # Far past SOCKET_TIMEOUT, half MAX_STALE_MS: the bound is the former.
            asyncio.run(asyncio.wait_for(cache.aset("cfg:a", 2), 4))
    finally:
        near_proxy.release()


def test_a_stalled_write_times_out_and_tracking_starts_afresh(
    make_near: Callable[..., Any], writer: Any
) -> None:
    cache = make_near(SOCKET_TIMEOUT=0.3)
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    writer.execute_command("CLIENT", "PAUSE", "2000", "WRITE")
    try:
        with pytest.raises(CacheTimeout):
            cache.set("cfg:a", 2)
    finally:
        writer.execute_command("CLIENT", "UNPAUSE")
    # The paused SET may still land once the server resumes (its connection was dropped, but
    # the command may have been read): whatever the server ends with is what is served.
    made = cache.make_and_validate_key("cfg:a")
    wait_for(
        "the served value to be the server's",
        lambda: cache.get("cfg:a") == int(writer.get(made)),
    )
    wait_for("the near cache to serve again", lambda: bool(cache.near_cache_stats()["serving"]))
    cache.set("cfg:a", 3)
    assert cache.get("cfg:a") == 3
    assert int(writer.get(made)) == 3


def test_a_sync_get_many_waits_for_another_threads_fill(
    near_proxy: CountingProxy, make_near: Callable[..., Any]
) -> None:
    # A fill held in flight (the proxy holds its reply until the get_many waits for it): a
    # get_many of the key from another thread waits for it, as get does, instead of reading
    # the server too.
    cache = make_near(near_proxy.url, near=STEADY)
    cache.set("cfg:a", "v")
    serving(cache)
    first: list[Any] = []
    before = cache.near_cache_stats()
    near_proxy.hold(b"PTTL")
    reader = threading.Thread(target=lambda: first.append(cache.get("cfg:a")))

    def release_once_waited() -> None:
        wait_for("get_many to wait", lambda: cache.near_cache_stats()["fill_waits"] > waits)
        near_proxy.release()

    try:
        reader.start()
        assert near_proxy.holding.wait(10), "the fill's reply never came"
        assert cache.near_cache_stats()["fills_in_flight"] >= 1
        waits = cache.near_cache_stats()["fill_waits"]
        releaser = threading.Thread(target=release_once_waited)
        releaser.start()
        assert cache.get_many(["cfg:a", "cfg:b"]) == {"cfg:a": "v"}
        releaser.join(10)
    finally:
        near_proxy.release()
        reader.join(10)
    assert first == ["v"]
    assert cache.near_cache_stats()["fill_waits"] >= before["fill_waits"] + 1


def test_an_async_get_many_never_waits(make_near: Callable[..., Any]) -> None:
    import asyncio

    cache = make_near(near=STEADY)
    cache.set("cfg:a", "v")
    serving(cache)
    store = cache._client._store
    token = store.lookup(cache.make_and_validate_key("cfg:a"))  # a fill in flight, never ended
    assert type(token) is int
    waits = cache.near_cache_stats()["fill_waits"]
    assert asyncio.run(cache.aget_many(["cfg:a"])) == {"cfg:a": "v"}
    assert cache.near_cache_stats()["fill_waits"] == waits


@pytest.mark.parametrize("timeout", [None, 300], ids=["MSET", "SET-PX-each"])
def test_an_own_set_many_is_kept_without_reading_it_back(
    make_near: Callable[..., Any], writer: Any, mode: str, timeout: int | None
) -> None:
    cache = make_near(near=STEADY)
    ops = Ops(cache, mode)
    serving(cache)
    before = cache.near_cache_stats()
    data = {"cfg:a": 1, "cfg:b": {"x": 2}, "other:c": 3}
    assert ops.set_many(data, timeout) == []
    assert ops.get_many(list(data)) == data
    after = cache.near_cache_stats()
    assert after["own_writes_kept"] == before["own_writes_kept"] + 2  # the kept ones
    assert after["misses"] == before["misses"], "an own write was read back from the server"
    pttl = writer.pttl(cache.make_and_validate_key("cfg:b"))
    assert pttl == -1 if timeout is None else 0 < pttl <= 300_000


def test_own_writes_through_the_tracking_connection_are_counted(
    make_near: Callable[..., Any], mode: str
) -> None:
    cache = make_near(near=STEADY)
    ops = Ops(cache, mode)
    serving(cache)
    calls = dict(cache.stats()["totals"]["calls"])
    kept = cache.near_cache_stats()["own_writes_kept"]
    ops.set("cfg:a", 1)
    ops.set_many({"cfg:b": 2, "cfg:c": 3}, None)
    assert cache.near_cache_stats()["own_writes_kept"] == kept + 3
    after = cache.stats()["totals"]["calls"]
    assert after.get("SET", 0) == calls.get("SET", 0) + 1
    assert after.get("MSET", 0) == calls.get("MSET", 0) + 1
