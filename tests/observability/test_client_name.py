"""Every connection names itself (CLIENT SETINFO lib-name redoxide lib-ver VERSION), so CLIENT
LIST shows operators who is connected; servers before 7.2, which do not know SETINFO, refuse it
inside the handshake's pipeline and the connection works all the same."""

from __future__ import annotations

import asyncio

import pytest
import redoxide
from redoxide import _redoxide
from support.backend import build_cache, is_redoxide
from support.secrecy import SECRET
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own handshake")


def entries(server: RedisServer) -> list[dict[str, str]]:
    """Return CLIENT LIST's entries, except the observer's own."""
    found = []
    for line in server.cli("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("cmd") not in ("client|list", "client"):  # 6.2 says "client"
            found.append(fields)
    return found


def use_both_paths(url: str, **options: object) -> object:
    cache = build_cache(url, {"OPTIONS": options} if options else None)
    cache.set("k", 1)
    assert cache.get("k") == 1
    assert asyncio.run(cache.aget("k")) == 1
    return cache


def test_sync_and_async_connections_name_the_library(valkey_server: RedisServer) -> None:
    use_both_paths(valkey_server.url)
    found = entries(valkey_server)
    assert len(found) == 2
    for entry in found:
        assert entry["lib-name"] == "redoxide"
        assert entry["lib-ver"] == _redoxide.__version__ == redoxide.__version__


def test_the_name_follows_authentication(valkey_server: RedisServer) -> None:
    valkey_server.cli("CONFIG", "SET", "requirepass", SECRET)
    valkey_server.password = SECRET  # url and cli() now carry it
    use_both_paths(valkey_server.url, DB=2)
    assert [e["lib-name"] for e in entries(valkey_server)] == ["redoxide", "redoxide"]
    assert {e["db"] for e in entries(valkey_server)} == {"2"}


def test_a_server_without_setinfo_connects_all_the_same(redis62_server: RedisServer) -> None:
    use_both_paths(redis62_server.url, DB=1)
    assert len(entries(redis62_server)) == 2
    assert all(not e.get("lib-name") for e in entries(redis62_server))
