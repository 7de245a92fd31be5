"""Another client's writes reach this process' near cache: every kind of write, flushes of
every kind, and the fill race (a reply an invalidation overtook is never installed)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.dispatch import Ops
from support.near import after_stale_bound, serving, wait_for, warm
from support.netfakes import CountingProxy


def _key(cache: Any, key: str) -> str:
    return str(cache.make_and_validate_key(key))


# Each write: what redis-py does to the server key `k` (and `k2`, another tracked key), and
# the value the cache must then read for the user key behind `k`.
WRITES: dict[str, tuple[Callable[[Any, str, str], Any], Any]] = {
    "SET": (lambda r, k, k2: r.set(k, b"7"), 7),
    "DEL": (lambda r, k, k2: r.delete(k), None),
    "UNLINK": (lambda r, k, k2: r.unlink(k), None),
    "EXPIRE": (lambda r, k, k2: r.pexpire(k, 1), None),
    "INCR": (lambda r, k, k2: r.incr(k), 2),
    "APPEND": (lambda r, k, k2: r.append(k, b"5"), 15),
    "MSET": (lambda r, k, k2: r.mset({k: b"8", k2: b"9"}), 8),
    "RENAME-from": (lambda r, k, k2: r.rename(k, k2), None),
    "RENAME-to": (lambda r, k, k2: (r.set(k2, b"3"), r.rename(k2, k)), 3),
    "LUA": (lambda r, k, k2: r.eval("return redis.call('SET', KEYS[1], '11')", 1, k), 11),
    "MULTI": (lambda r, k, k2: r.pipeline(transaction=True).set(k, b"12").incr(k).execute(), 13),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_another_clients_write_is_seen_within_the_stale_bound(
    make_near: Callable[..., Any], writer: Any, mode: str, write: str
) -> None:
    cache = make_near()
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    cache.set("cfg:b", 0)
    assert warm(cache, "cfg:a") == 1
    do, expected = WRITES[write]
    do(writer, _key(cache, "cfg:a"), _key(cache, "cfg:b"))
    after_stale_bound()
    if write == "EXPIRE":
        wait_for("the key to expire", lambda: writer.exists(_key(cache, "cfg:a")) == 0)
    assert ops.get("cfg:a") == expected
    assert cache.near_cache_stats()["invalidations"] >= 1


def test_a_write_is_seen_as_soon_as_its_invalidation_arrives(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    cache = make_near()
    ops = Ops(cache, mode)
    cache.set("flags:x", "old")
    warm(cache, "flags:x")
    writer.set(_key(cache, "flags:x"), b"5")
    wait_for("the new value", lambda: ops.get("flags:x") == 5, timeout=5)


def test_untracked_keys_are_never_kept(make_near: Callable[..., Any], writer: Any) -> None:
    cache = make_near()
    serving(cache)
    cache.set("other", 1)
    for _ in range(3):
        assert cache.get("other") == 1
    writer.set(_key(cache, "other"), b"2")
    assert cache.get("other") == 2  # no wait: it was never local
    assert cache.near_cache_stats()["hits"] == 0
    assert cache.near_cache_stats()["entries"] == 0


@pytest.mark.parametrize(
    "flush",
    ["FLUSHDB", "FLUSHDB-other-db", "FLUSHALL", "SWAPDB"],
)
def test_flushes_by_another_client_flush_the_near_cache(
    make_near: Callable[..., Any], near_server: Any, mode: str, flush: str
) -> None:
    import redis

    cache = make_near()
    ops = Ops(cache, mode)
    other = redis.Redis(host="127.0.0.1", port=near_server.port, db=1)
    try:
        other.set(_key(cache, "cfg:a"), b"41")
        cache.set("cfg:a", "db0")
        warm(cache, "cfg:a")
        if flush == "FLUSHDB":
            near_server.cli("-n", "0", "FLUSHDB")
            expected: Any = None
        elif flush == "FLUSHDB-other-db":
            other.flushdb()
            expected = "db0"  # this db is untouched: the value read is still right
        elif flush == "FLUSHALL":
            other.flushall()
            expected = None
        else:
            other.swapdb(0, 1)
            expected = 41
        after_stale_bound()
        assert ops.get("cfg:a") == expected
        flushes = cache.near_cache_stats()["flushes"]
        if flush == "SWAPDB":  # not signalled by servers: seen by the database marker
            assert flushes["swapped"] >= 1
        elif flush != "FLUSHDB-other-db":
            assert flushes["server"] >= 1
    finally:
        other.flushdb()
        other.close()


@pytest.mark.parametrize("many", [False, True], ids=["get", "get_many"])
def test_a_fill_overtaken_by_an_invalidation_is_not_installed(
    near_proxy: CountingProxy, make_near: Callable[..., Any], writer: Any, mode: str, many: bool
) -> None:
    # The order is built, not waited for: the proxy holds the fill's reply ("old") until the
    # invalidation of another client's write has reached the store, then lets it through.
    cache = make_near(near_proxy.url)
    cache.set("cfg:a", "old")
    serving(cache)
    read: list[Any] = []

    def reader() -> None:
        if many:
            call: Any = cache.get_many if mode == "sync" else cache.aget_many
            args: tuple[Any, ...] = (["cfg:a"],)
        else:
            call = cache.get if mode == "sync" else cache.aget
            args = ("cfg:a",)
        result = call(*args) if mode == "sync" else asyncio.run(call(*args))
        read.append(result)

    before = cache.near_cache_stats()
    near_proxy.hold(b"PTTL")
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert near_proxy.holding.wait(10), "the fill's reply never came"
        writer.set(_key(cache, "cfg:a"), b"9")
        wait_for(
            "the invalidation",
            lambda: cache.near_cache_stats()["invalidations"] > before["invalidations"],
        )
    finally:
        near_proxy.release()
        thread.join(10)
    assert read == [{"cfg:a": "old"} if many else "old"]  # what the server said then
    after = cache.near_cache_stats()
    assert after["fills_dropped"] == before["fills_dropped"] + 1
    assert after["installs"] == before["installs"]
    assert cache.get("cfg:a") == 9


def test_rounds_of_write_then_read_never_serve_past_the_bound(
    make_near: Callable[..., Any], writer: Any
) -> None:
    """Another client writes n, then this process reads until it sees n: a read that starts
    MAX_STALE_MS after the write's acknowledgement must never return an older value (the
    gate's guarantee; benchmarks/near_cache_bench.py --staleness runs 100,000 rounds)."""
    import time

    from support.near import MAX_STALE_MS

    cache = make_near()
    serving(cache)
    made = _key(cache, "cfg:n")
    writer.set(made, b"0")
    bound = MAX_STALE_MS / 1000
    late_stale, delays = 0, []
    for n in range(1, 2001):
        cache.get("cfg:n")  # keep it local between writes
        writer.set(made, str(n).encode())
        acked = time.monotonic()
        while True:
            started = time.monotonic()
            seen = cache.get("cfg:n")
            if seen == n:
                delays.append(time.monotonic() - acked)
                break
            if started - acked > bound:
                late_stale += 1
    assert late_stale == 0
    assert cache.near_cache_stats()["hits"] > 0
    delays.sort()
    median, p99 = delays[len(delays) // 2], delays[int(len(delays) * 0.99)]
    print(
        f"\n2000 rounds: the fresh value read {median * 1e6:.0f} us after the write's "
        f"acknowledgement (median), p99 {p99 * 1e6:.0f} us, max {delays[-1] * 1e6:.0f} us"
    )


def test_a_swapdb_back_is_seen_too(
    make_near: Callable[..., Any], near_server: Any, mode: str
) -> None:
    # SWAPDB moves the database marker to the other database with the value it had. Swapped
    # back, that copy is in this database again: it must not pass for the current marker
    # (written after the first swap was seen), or the second swap would go unseen.
    import redis

    cache = make_near()
    ops = Ops(cache, mode)
    other = redis.Redis(host="127.0.0.1", port=near_server.port, db=1)
    try:
        other.set(_key(cache, "cfg:a"), b"41")
        cache.set("cfg:a", "db0")
        assert warm(cache, "cfg:a") == "db0"
        other.swapdb(0, 1)
        wait_for("the first swap", lambda: cache.near_cache_stats()["flushes"]["swapped"] >= 1)
        assert warm(cache, "cfg:a") == 41
        other.swapdb(0, 1)
        wait_for("the second swap", lambda: cache.near_cache_stats()["flushes"]["swapped"] >= 2)
        assert ops.get("cfg:a") == "db0"
    finally:
        other.flushdb()
        other.close()
