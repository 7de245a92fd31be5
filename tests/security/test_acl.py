"""ACL users: a user with a password works sync and async (in the URL or in OPTIONS); a wrong
password is a typed error that does not show it; a command or key the user may not touch is a
ResponseError (NOPERM), never a silent miss, even under fail-open.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redoxide.exceptions import ConnectionInterrupted, ResponseError
from support.backend import build_cache, is_redoxide
from support.secrecy import SECRET, WRONG_SECRET, all_text_of, assert_no_secret
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide options")


def acl_location(
    server: RedisServer, how: str, user: str, password: str
) -> tuple[str, dict[str, Any]]:
    if how == "url":
        return f"redis://{user}:{password}@127.0.0.1:{server.port}/0", {}
    return f"redis://127.0.0.1:{server.port}/0", {"USERNAME": user, "PASSWORD": password}


@pytest.mark.parametrize("how", ["url", "options"])
def test_acl_user_works_sync_and_async(acl_server: RedisServer, how: str) -> None:
    location, options = acl_location(acl_server, how, "alice", SECRET)
    cache = build_cache(location, {"OPTIONS": options, "KEY_PREFIX": how})
    cache.set("k", {"v": 1})
    assert cache.get("k") == {"v": 1}
    assert asyncio.run(cache.aget("k")) == {"v": 1}
    assert asyncio.run(cache.aadd("n", 1)) is True
    assert cache.incr("n") == 2
    clients = acl_server.cli("CLIENT", "LIST")
    assert "user=alice" in clients


@pytest.mark.parametrize("user", ["alice", "nobody"])
@pytest.mark.parametrize("how", ["url", "options"])
def test_wrong_password_is_a_typed_error_without_the_secret(
    acl_server: RedisServer, how: str, user: str
) -> None:
    location, options = acl_location(acl_server, how, user, WRONG_SECRET)
    cache = build_cache(location, {"OPTIONS": options})
    with pytest.raises(ConnectionInterrupted, match="Authentication") as info:
        cache.get("k")
    assert_no_secret(all_text_of(info.value))
    # Every async call says so too, including one that reaches the multiplexed connection just
    # after its handshake failed (it gets the stored cause).
    for _ in range(5):
        with pytest.raises(ConnectionInterrupted, match="Authentication") as info:
            asyncio.run(cache.aget("k"))
        assert_no_secret(all_text_of(info.value))


def test_missing_permission_is_a_response_error(acl_server: RedisServer) -> None:
    location, options = acl_location(acl_server, "options", "bob", SECRET)
    cache = build_cache(location, {"OPTIONS": options, "KEY_PREFIX": "allowed"})
    cache.set("k", 1)
    assert cache.get("k") == 1
    with pytest.raises(ResponseError, match=r"(?i)noperm.*flushdb"):
        cache.clear()
    with pytest.raises(ResponseError, match=r"(?i)noperm.*flushdb"):
        asyncio.run(cache.aclear())
    outside = build_cache(location, {"OPTIONS": options, "KEY_PREFIX": "elsewhere"})
    with pytest.raises(ResponseError, match=r"(?i)noperm"):
        outside.get("k")
    with pytest.raises(ResponseError, match=r"(?i)noperm"):
        asyncio.run(outside.aset("k", 1))
    # A refused command is never a silent miss, even under fail-open.
    fail_open = build_cache(
        location, {"OPTIONS": {**options, "IGNORE_EXCEPTIONS": True}, "KEY_PREFIX": "elsewhere"}
    )
    with pytest.raises(ResponseError):
        fail_open.get("k")
