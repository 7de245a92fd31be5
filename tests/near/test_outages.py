"""The liveness gate and recovery: no local hit while the tracking connection is gone or
silent past MAX_STALE_MS; a reconnection flushes before serving again; a forked child
starts empty; servers that cannot track leave the near cache off with one warning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.dispatch import Ops
from support.near import (
    after_stale_bound,
    near_options,
    serving,
    tracking_client_ids,
    wait_for,
    warm,
)
from support.servers import RedisServer


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of this test's own, resumed whatever the test does."""
    with RedisServer() as server:
        try:
            yield server
        finally:
            with contextlib.suppress(ProcessLookupError, RuntimeError):
                server.resume()


def test_killing_the_tracking_connection_flushes_and_recovers(
    make_near: Callable[..., Any], own_server: RedisServer, mode: str
) -> None:
    import redis

    cache = make_near(own_server.url)
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    warm(cache, "cfg:a")
    before = cache.near_cache_stats()["flushes"]
    (tracker,) = tracking_client_ids(own_server)
    own_server.cli("CLIENT", "KILL", "ID", tracker)
    # Written while the tracking connection may be down: its invalidation may be lost.
    redis.Redis(port=own_server.port).set(cache.make_and_validate_key("cfg:a"), b"2")
    after_stale_bound()
    assert ops.get("cfg:a") == 2
    wait_for(
        "a new tracking connection", lambda: tracking_client_ids(own_server) not in ([], [tracker])
    )
    serving(cache)
    after = cache.near_cache_stats()["flushes"]
    assert after["connect"] > before["connect"]
    assert warm(cache, "cfg:a") == 2


def test_no_hit_is_served_while_the_server_is_stopped(
    make_near: Callable[..., Any], own_server: RedisServer, mode: str
) -> None:
    cache = make_near(own_server.url, SOCKET_TIMEOUT=0.3, IGNORE_EXCEPTIONS=True)
    ops = Ops(cache, mode)
    cache.set("cfg:a", "kept")
    warm(cache, "cfg:a")
    own_server.pause()
    try:
        after_stale_bound()
        # The gate is shut: the read goes to the (stopped) server and fails open to None.
        assert ops.get("cfg:a") is None
        stats = cache.near_cache_stats()
        assert stats["serving"] is False
        assert stats["gate_refusals"] >= 1
        assert stats["gate_trips"] >= 1
    finally:
        own_server.resume()
    serving(cache)
    assert ops.get("cfg:a") == "kept"


def test_nothing_from_before_a_restart_is_served_after_it(
    make_near: Callable[..., Any], own_server: RedisServer, mode: str
) -> None:
    import redis

    cache = make_near(own_server.url, SOCKET_TIMEOUT=0.5, IGNORE_EXCEPTIONS=True)
    ops = Ops(cache, mode)
    cache.set("cfg:a", "before")
    warm(cache, "cfg:a")
    own_server.restart()  # empty, same port
    redis.Redis(port=own_server.port).set(cache.make_and_validate_key("cfg:a"), b"3")
    after_stale_bound()
    wait_for("the cache to read the new server", lambda: ops.get("cfg:a") == 3)
    serving(cache)
    assert ops.get("cfg:a") == 3


def test_a_forked_child_starts_empty_and_tracks_on_its_own(
    make_near: Callable[..., Any], writer: Any
) -> None:
    cache = make_near()
    cache.set("cfg:a", "parent")
    warm(cache, "cfg:a")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        status = 1
        try:
            stats = cache.near_cache_stats()
            assert stats["entries"] == 0, stats
            assert stats["flushes"]["fork"] == 1, stats
            assert cache.get("cfg:a") == "parent"
            serving(cache)
            writer.set(cache.make_and_validate_key("cfg:a"), b"4")
            after_stale_bound()
            assert cache.get("cfg:a") == 4
            assert asyncio.run(cache.aget("cfg:a")) == 4
            status = 0
        finally:
            os._exit(status)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    # The parent heard the child's write through its own tracking connection.
    after_stale_bound()
    assert cache.get("cfg:a") == 4


def test_memory_bound_holds_under_a_flood(make_near: Callable[..., Any], mode: str) -> None:
    limit = 64 * 1024
    cache = make_near(near=near_options(MAX_BYTES=limit, MAX_VALUE_BYTES=4096))
    ops = Ops(cache, mode)
    serving(cache)
    cache.set_many({f"cfg:{i}": b"x" * 1000 for i in range(300)})
    for i in range(300):
        assert ops.get(f"cfg:{i}") == b"x" * 1000
        assert cache.near_cache_stats()["bytes"] <= limit
    stats = cache.near_cache_stats()
    assert stats["evictions"] > 0
    assert 0 < stats["entries"] < 300


def test_values_over_max_value_bytes_are_not_kept(make_near: Callable[..., Any]) -> None:
    cache = make_near(near=near_options(MAX_VALUE_BYTES=100))
    serving(cache)
    cache.set("cfg:big", "y" * 500)
    for _ in range(3):
        assert cache.get("cfg:big") == "y" * 500
    stats = cache.near_cache_stats()
    assert stats["too_large"] >= 1
    assert stats["entries"] == 0
    assert stats["hits"] == 0


def test_local_expiry_follows_the_keys_ttl(make_near: Callable[..., Any]) -> None:
    # Built so that only the local deadline can remove the copy: the server's active expiry is
    # off (an expired key stays until it is read, so no invalidation can arrive first), and the
    # staleness bound is long (a ping answered late on a busy host cannot shut the gate and
    # send the read to the server instead).
    with RedisServer("--enable-debug-command", "local") as server:
        server.cli("DEBUG", "SET-ACTIVE-EXPIRE", "0")
        cache = make_near(server.url, near=near_options(MAX_STALE_MS=60_000))
        serving(cache)
        cache.set("cfg:short", 1, timeout=2)
        written = time.monotonic()
        assert warm(cache, "cfg:short") == 1
        # The local deadline (the key's PTTL when read) is never later than the server's expiry,
        # which is at most 2 s after `written`; waiting longer only makes the outcome surer.
        time.sleep(max(0.0, written + 2.05 - time.monotonic()))
        before = cache.near_cache_stats()
        assert before["entries"] == 1
        assert cache.get("cfg:short") is None
        after = cache.near_cache_stats()
        assert after["expired"] == before["expired"] + 1
        assert after["hits"] == before["hits"]


@pytest.mark.parametrize("disabled", ["CLIENT", "HELLO"])
def test_a_server_that_cannot_track_leaves_the_near_cache_off_with_one_warning(
    make_near: Callable[..., Any], caplog: pytest.LogCaptureFixture, disabled: str
) -> None:
    with RedisServer("--rename-command", disabled, "") as server:
        cache = make_near(server.url)
        cache.set("cfg:a", 1)
        with caplog.at_level(logging.WARNING, logger="redoxide"):
            # Tracking starts with the first lookup of a kept key.
            wait_for(
                "the refusal",
                lambda: cache.get("cfg:a") == 1 and not cache.near_cache_stats()["enabled"],
            )
            for _ in range(5):
                assert cache.get("cfg:a") == 1
                assert asyncio.run(cache.aget_many(["cfg:a"])) == {"cfg:a": 1}
        warnings_seen = [r for r in caplog.records if "near cache is off" in r.getMessage()]
        assert len(warnings_seen) == 1
        cache.set("cfg:a", 2)
        assert cache.get("cfg:a") == 2
        assert cache.near_cache_stats()["hits"] == 0


def test_a_full_server_leaves_the_near_cache_serving_without_its_marker(
    make_near: Callable[..., Any], near_server: RedisServer, writer: Any, mode: str
) -> None:
    # maxmemory reached under noeviction: writes fail (OOM), reads do not. The database
    # marker cannot be written, but the tracking connection hears every invalidation: the
    # near cache serves, without SWAPDB detection until there is room again.
    cache = make_near()
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    near_server.cli("CONFIG", "SET", "maxmemory", "1")
    try:
        assert warm(cache, "cfg:a") == 1
        assert ops.get("cfg:a") == 1
        stats = cache.near_cache_stats()
        assert stats["enabled"] is True
        assert stats["swapdb_watched"] is False
        writer.delete(str(cache.make_and_validate_key("cfg:a")))  # DEL works when full
        wait_for("the deletion", lambda: ops.get("cfg:a") is None, timeout=5)
    finally:
        near_server.cli("CONFIG", "SET", "maxmemory", "0")
