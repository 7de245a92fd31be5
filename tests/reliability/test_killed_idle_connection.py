"""A connection the server kills between two calls, with the next call racing the I/O thread's
reading of the close: the call still succeeds.

The server closes an idle connection (CLIENT KILL, its idle timeout, a proxy) and the next call
is made at once. The async path writes a lone command straight from the caller's thread, so the
command can go out on the closed connection before the I/O thread has read its end: a plain read
is then sent once more on a new connection, and a write first asks the socket whether it was
closed (as the sync path does). Before that, with one core kept busy beside it, about one call
in six failed with ConnectionInterrupted. The busy core is what makes the race likely; the
assertions hold however the threads interleave.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from support.backend import build_cache, is_redoxide
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's reconnect behaviour")

ROUNDS = 60


@pytest.fixture
def busy_core() -> Iterator[None]:
    """A child process spinning on one core for the test's length, stopped by its own pid."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _connections_received(admin: redis.Redis) -> int:
    return int(admin.info("stats")["total_connections_received"])


# (method, arguments, expected result); "incr" is checked against a running count instead.
CALLS: list[tuple[str, tuple[Any, ...], Any]] = [
    ("get", ("k",), "v"),
    ("get_many", (["k", "z"],), {"k": "v"}),
    ("has_key", ("k",), True),
    ("set", ("k", "v"), None),
    ("incr", ("n",), None),
    ("delete", ("gone",), False),
]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_calls_right_after_a_kill_reconnect_without_an_error(
    fresh_redis_server: RedisServer, busy_core: None, mode: str
) -> None:
    cache = build_cache(fresh_redis_server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 5}})
    admin = redis.Redis(host="127.0.0.1", port=fresh_redis_server.port)
    cache.set_many({"k": "v", "n": 0})
    before = _connections_received(admin)

    async def call(name: str, *args: Any) -> Any:
        if mode == "async":
            return await getattr(cache, "a" + name)(*args)
        return getattr(cache, name)(*args)

    async def rounds() -> list[str]:
        errors: list[str] = []
        incrs = 0
        for _ in range(ROUNDS):
            for name, args, expected in CALLS:
                await call("has_key", "k")  # a live, idle connection to kill
                admin.client_kill_filter(_type="normal", skipme=True)
                try:
                    got = await call(name, *args)
                except Exception as exc:
                    errors.append(f"{name}: {exc!r}")
                    continue
                if name == "incr":
                    incrs += 1
                    expected = incrs
                if got != expected:
                    errors.append(f"{name}: {got!r} != {expected!r}")
        return errors

    errors = asyncio.run(rounds())
    calls = ROUNDS * len(CALLS)
    assert errors == [], f"{len(errors)} of {calls} calls failed: {errors[:5]}"
    # Each round's kill took the connection: the calls really met killed connections.
    assert _connections_received(admin) - before >= calls
    # No incr was lost or applied twice.
    assert cache.get("n") == ROUNDS
