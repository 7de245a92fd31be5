"""IGNORE_EXCEPTIONS: with the server down, reads miss and writes report failure; never raise."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from conftest import build_cache
from redis_server import RedisServer, free_port

pytestmark = pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide") != "redoxide",
    reason="redoxide options",
)

OPTIONS = {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}

# (method, args, what fail-open returns)
CASES: list[tuple[str, tuple[Any, ...], Any]] = [
    ("get", ("k", "dflt"), "dflt"),
    ("get_many", (["a", "b"],), {}),
    ("has_key", ("k",), False),
    ("add", ("k", 1), False),
    ("set", ("k", 1), None),
    ("touch", ("k", 10), False),
    ("delete", ("k",), False),
    ("set_many", ({"a": 1, "b": 2},), ["a", "b"]),
    ("delete_many", (["a", "b"],), None),
    ("get_or_set", ("k", lambda: "computed"), "computed"),
    ("incr", ("n",), None),
    ("clear", (), False),
]


def down_cache() -> Any:
    return build_cache(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": OPTIONS})


@pytest.mark.parametrize(("method", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_sync_methods_fail_open(method: str, args: tuple[Any, ...], expected: Any) -> None:
    assert getattr(down_cache(), method)(*args) == expected


@pytest.mark.parametrize(("method", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_async_methods_fail_open(method: str, args: tuple[Any, ...], expected: Any) -> None:
    assert asyncio.run(getattr(down_cache(), "a" + method)(*args)) == expected


def test_server_errors_still_raise_under_fail_open(redis_server: RedisServer) -> None:
    from redoxide.exceptions import ResponseError

    cache = build_cache(redis_server.url, {"OPTIONS": OPTIONS})
    key = cache.make_key("h")
    redis_server.cli("HSET", key, "f", "v")
    with pytest.raises(ResponseError):
        cache.get("h")
    with pytest.raises(ResponseError):
        asyncio.run(cache.aget("h"))


def test_fail_open_recovers_when_the_server_returns() -> None:
    port = free_port()
    cache = build_cache(f"redis://127.0.0.1:{port}/0", {"OPTIONS": OPTIONS})
    assert cache.get("k", "miss") == "miss"
    assert asyncio.run(cache.aget("k", "miss")) == "miss"
    with RedisServer(port=port):
        cache.set("k", "hit")
        assert cache.get("k") == "hit"
        assert asyncio.run(cache.aget("k")) == "hit"
