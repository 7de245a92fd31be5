"""OPTIONS["CREDENTIAL_PROVIDER"]: credentials that change while the process runs (IAM or Entra
tokens, rotated ACL passwords), against a real server whose ACL changes under traffic.

- Every shape a provider may return works, sync and async (a token with USERNAME, a tuple, a
  mapping with an expiry, redis-py's CredentialProvider, a dotted path).
- New credentials reach live connections as AUTH on those connections: the same connections
  (same client ids) carry on as the new user, none is made anew, no call fails.
- A server that already wants the next credentials (WRONGPASS) makes the provider be asked at
  once and the connection try again: no call fails.
- The near cache's tracking connection follows too.
- A provider that raises or returns something else is a typed error naming the option, never
  showing a value; fail-open turns it into a miss; a mended provider is used again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import warnings
from datetime import datetime, timezone
from typing import Any

import pytest
from redoxide._credentials import credentials_for
from redoxide.exceptions import ConfigurationError, CredentialProviderError
from support.backend import build_cache, is_redoxide
from support.rotation import Holder, Traffic, answer_next, clients_of, provider, wait_until
from support.secrecy import SECRET, all_log_text, all_text_of, assert_no_secret
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide options")

PW1 = "One-" + secrets.token_hex(8)
PW2 = "Two-" + secrets.token_hex(8)


@pytest.fixture
def rot_server() -> Any:
    """A server of this test's own with ACL users u1 (PW1) and u2 (PW2), and no default user."""
    with RedisServer(password=SECRET) as server:
        for user, password in (("u1", PW1), ("u2", PW2)):
            server.cli("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
        yield server


def url(server: RedisServer) -> str:
    return f"redis://127.0.0.1:{server.port}/0"


def users(server: RedisServer) -> dict[int, str]:
    return {cid: fields["user"] for cid, fields in clients_of(server).items()}


def rotating(server: RedisServer, **options: Any) -> tuple[Holder, Any, Any]:
    """A provider answering ("u1", PW1), a cache refreshing it every second (plus `options`),
    and the process' credentials cell for it."""
    holder = Holder()
    holder.answer = ("u1", PW1)
    options = {"CREDENTIAL_PROVIDER": holder, "CREDENTIAL_REFRESH_SECONDS": 1, **options}
    cache = build_cache(url(server), {"OPTIONS": options})
    return holder, cache, credentials_for(cache._config.connection.credential_provider)


def both_ways(cache: Any, key: str = "k") -> None:
    cache.set(key, {"v": 1})
    assert cache.get(key) == {"v": 1}
    assert asyncio.run(cache.aget(key)) == {"v": 1}
    assert asyncio.run(cache.aadd(f"{key}:n", 1)) is True
    assert cache.incr(f"{key}:n") == 2


class GetCredentials:
    """redis-py's CredentialProvider shape: an object with get_credentials() (and unhashable,
    as a dataclass with fields is)."""

    __hash__ = None  # type: ignore[assignment]

    def get_credentials(self) -> tuple[str, str]:
        return ("u2", PW2)


@pytest.mark.parametrize(
    ("answer", "options", "user"),
    [
        (PW1, {"USERNAME": "u1"}, "u1"),  # a bare token, the username from OPTIONS
        ((PW2,), {"USERNAME": "u2"}, "u2"),
        (("u2", PW2), {}, "u2"),
        ({"username": "u1", "password": PW1, "expires_in": 900}, {}, "u1"),
        ({"token": PW2.encode(), "expires_at": 2e9}, {"USERNAME": "u2"}, "u2"),
        ({"password": PW1, "expires_at": datetime.now(timezone.utc)}, {"USERNAME": "u1"}, "u1"),
    ],
    ids=["token", "one-tuple", "tuple", "mapping", "token-bytes", "datetime-expiry"],
)
def test_every_answer_shape_authenticates_sync_and_async(
    rot_server: RedisServer, answer: Any, options: dict[str, Any], user: str
) -> None:
    holder = Holder()
    holder.answer = answer
    cache = build_cache(url(rot_server), {"OPTIONS": {"CREDENTIAL_PROVIDER": holder, **options}})
    both_ways(cache)
    assert set(users(rot_server).values()) == {user}
    # Called on its own thread, never on a caller's.
    assert holder.threads == {"redoxide-credentials"}


def test_redis_py_provider_objects_and_dotted_paths(rot_server: RedisServer) -> None:
    cache = build_cache(url(rot_server), {"OPTIONS": {"CREDENTIAL_PROVIDER": GetCredentials()}})
    both_ways(cache, "a")
    provider.answer = ("u1", PW1)
    named = build_cache(
        url(rot_server), {"OPTIONS": {"credential_provider": "support.rotation.provider"}}
    )
    both_ways(named, "b")
    assert set(users(rot_server).values()) == {"u1", "u2"}
    # django-redis users give redis-py's provider to the pool: it is read from there.
    pooled = Holder()
    pooled.answer = ("u1", PW1)
    options = {"CONNECTION_POOL_KWARGS": {"credential_provider": pooled, "max_connections": 9}}
    both_ways(build_cache(url(rot_server), {"OPTIONS": options}), "c")
    assert pooled.calls >= 1


def test_new_credentials_reach_live_connections_without_reconnecting(
    rot_server: RedisServer,
) -> None:
    holder, cache, cell = rotating(rot_server)
    with Traffic(cache, threads=4, tasks=8) as traffic:
        traffic.wait_calls(300)
        before = users(rot_server)
        assert before and set(before.values()) == {"u1"}
        answer_next(holder, cell, ("u2", PW2))
        # Every connection that makes a call now sends AUTH as u2 in front of it.
        wait_until(lambda: set(users(rot_server).values()) == {"u2"}, what="every connection u2")
        traffic.wait_calls(300)
        after = users(rot_server)  # (the threads' connections close with them)
    assert traffic.failures == []
    # The same connections, re-authenticated: none closed, none made.
    assert set(after) == set(before)
    assert set(after.values()) == {"u2"}


def test_new_credentials_the_server_refuses_leave_live_connections_as_they_were(
    rot_server: RedisServer,
) -> None:
    holder, cache, cell = rotating(rot_server)
    with Traffic(cache, threads=2, tasks=4) as traffic:
        traffic.wait_calls(100)
        before = users(rot_server)
        answer_next(holder, cell, ("u1", "not-the-password"))
        traffic.wait_calls(100)
        after = users(rot_server)
    assert traffic.failures == []
    assert after == before  # the same connections, still u1


def test_a_refused_handshake_asks_the_provider_and_tries_again(rot_server: RedisServer) -> None:
    holder = Holder()
    holder.answer = ("u1", PW1)
    # Refreshed hourly: only the server's refusal can make the provider be asked again.
    cache = build_cache(
        url(rot_server),
        {"OPTIONS": {"CREDENTIAL_PROVIDER": holder, "SOCKET_CONNECT_TIMEOUT": 10}},
    )
    with Traffic(cache) as traffic:
        traffic.wait_calls(200)
    assert traffic.failures == []
    calls = holder.calls
    rot_server.cli("ACL", "LOG", "RESET")
    # The password is rotated on the server and in the secrets store; the process still has
    # the old one, and its connections are closed (as an idle timeout or a failover would).
    rotated = "Three-" + secrets.token_hex(8)
    rot_server.cli("ACL", "SETUSER", "u1", "resetpass", f">{rotated}")
    holder.answer = ("u1", rotated)
    rot_server.cli("CLIENT", "KILL", "USER", "u1")
    wait_until(lambda: not users(rot_server), what="the connections to close")
    with Traffic(cache) as traffic:
        traffic.wait_calls(200)
    assert traffic.failures == []
    assert holder.calls > calls
    # The server did refuse the old password (its ACL log keeps refused AUTHs).
    assert "auth" in [line.strip() for line in rot_server.cli("ACL", "LOG").splitlines()]
    assert set(users(rot_server).values()) == {"u1"}


def test_the_near_cache_tracking_connection_follows(rot_server: RedisServer) -> None:
    near = {"PREFIXES": [""], "MAX_STALE_MS": 200}
    holder, cache, _ = rotating(rot_server, NEAR_CACHE=near)
    cache.set("k", 1)
    assert cache.get("k") == 1

    def tracking() -> dict[int, dict[str, str]]:
        return {cid: f for cid, f in clients_of(rot_server).items() if "t" in f.get("flags", "")}

    wait_until(lambda: len(tracking()) == 1, what="the tracking connection")
    assert {f["user"] for f in tracking().values()} == {"u1"}
    holder.answer = ("u2", PW2)
    # (Keyed on the user, not the connection: a probe timed out on a loaded host reconnects.)
    wait_until(lambda: {f["user"] for f in tracking().values()} == {"u2"}, what="tracking as u2")
    rot_server.cli("SET", cache.make_and_validate_key("k"), "2")  # another client's write
    wait_until(lambda: cache.get("k") == 2, what="the invalidation")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (RuntimeError(f"vault said no to {SECRET}"), "raised RuntimeError"),
        (42, "returned int"),
        (("u1", ""), "returned an empty password"),
        ({"user": "u1"}, "returned a mapping without 'password'"),
    ],
    ids=["raises", "int", "empty", "no-password"],
)
def test_a_broken_provider_is_a_typed_error_naming_the_option(
    rot_server: RedisServer, answer: Any, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    holder = Holder()
    holder.answer = answer
    options = {"CREDENTIAL_PROVIDER": holder, "SOCKET_CONNECT_TIMEOUT": 10}
    cache = build_cache(url(rot_server), {"OPTIONS": options})
    with caplog.at_level(logging.WARNING, logger="redoxide"):
        with pytest.raises(CredentialProviderError, match="CREDENTIAL_PROVIDER") as info:
            cache.get("k")
        assert said in str(info.value)
        with pytest.raises(CredentialProviderError, match=said):
            asyncio.run(cache.aget("k"))
    assert_no_secret(all_text_of(info.value))
    assert "CREDENTIAL_PROVIDER" in caplog.text
    assert_no_secret(caplog.text + all_log_text(caplog.records))
    # Fail-open: a miss, as for any connection trouble.
    lenient = build_cache(url(rot_server), {"OPTIONS": {**options, "IGNORE_EXCEPTIONS": True}})
    assert lenient.get("k", "fallback") == "fallback"
    # Mended: the next call gets credentials (the provider is asked again on demand).
    holder.answer = ("u1", PW1)
    wait_until(lambda: _works(cache), what="the mended provider")
    both_ways(cache)


def _works(cache: Any) -> bool:
    try:
        cache.get("probe")
    except CredentialProviderError:
        return False
    return True


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"CREDENTIAL_PROVIDER": 42}, "must be a callable"),
        ({"CREDENTIAL_PROVIDER": "support.rotation.nothing_here"}, "cannot import"),
        ({"CREDENTIAL_PROVIDER": provider, "PASSWORD": SECRET}, "replaces PASSWORD"),
        ({"CREDENTIAL_REFRESH_SECONDS": 60}, "needs OPTIONS['CREDENTIAL_PROVIDER']"),
        ({"CREDENTIAL_PROVIDER": provider, "CREDENTIAL_REFRESH_SECONDS": 0}, "from 1 to 86400"),
    ],
    ids=["not-callable", "bad-path", "with-password", "refresh-alone", "refresh-zero"],
)
def test_bad_settings_are_refused_by_name(
    rot_server: RedisServer, options: dict[str, Any], said: str
) -> None:
    cache = build_cache(url(rot_server), {"OPTIONS": options})
    with pytest.raises(ConfigurationError, match="CREDENTIAL") as info:
        cache.get("k")
    assert said in str(info.value)
    assert_no_secret(all_text_of(info.value))


def test_nothing_shows_the_credentials(rot_server: RedisServer) -> None:
    holder = Holder()
    holder.answer = ("u1", SECRET)
    rot_server.cli("ACL", "SETUSER", "u1", f">{SECRET}")
    cache = build_cache(url(rot_server), {"OPTIONS": {"CREDENTIAL_PROVIDER": holder}})
    both_ways(cache)
    cell = credentials_for(cache._config.connection.credential_provider)
    assert_no_secret(
        repr(cell) + repr(cache._config) + repr(cache._config.connection.credential_provider)
    )
    assert_no_secret(str(cache.stats()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_worker_keeps_the_credentials_and_refreshes_on_its_own(
    rot_server: RedisServer,
) -> None:
    holder = Holder()
    holder.answer = ("u1", PW1)
    cache = build_cache(
        url(rot_server),
        {"OPTIONS": {"CREDENTIAL_PROVIDER": holder, "CREDENTIAL_REFRESH_SECONDS": 1}},
    )
    both_ways(cache, "parent")
    with warnings.catch_warnings():
        # Python 3.12+ warns when a process with threads forks (an earlier test's Sentinel
        # watcher, in this worker); the child here uses only what it builds itself.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if every step holds
        status = 1
        try:
            cache.set("child", 1)
            ok = cache.get("child") == 1
            # Its own provider thread: a change reaches the child's connection (the parent's
            # stay u1: its provider still answers u1).
            holder.answer = ("u2", PW2)

            def mine_moved() -> bool:
                cache.get("child")
                return "u2" in set(users(rot_server).values())

            wait_until(mine_moved, what="the child's connection as u2")
            status = 0 if ok and cache.get("child") == 1 else 1
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cache.get("parent") == {"v": 1}


@pytest.mark.parametrize("topology", ["replicas", "sentinel", "cluster"])
def test_every_node_of_a_topology_authenticates_and_follows_a_rotation(
    topology: str, request: pytest.FixtureRequest
) -> None:
    if topology == "cluster":
        nodes = request.getfixturevalue("cluster").live_nodes()
        settings: dict[str, Any] = {"LOCATION": [n.url for n in nodes[:2]], "CLUSTER": True}
    elif topology == "sentinel":
        running = request.getfixturevalue("sentinel_set")
        nodes = running.data_nodes
        settings = {
            "LOCATION": f"redis://{running.service}/0",
            "SENTINELS": running.sentinel_addresses,
        }
    else:
        primary, replicas = request.getfixturevalue("replica_set")
        nodes = [primary, *replicas]
        settings = {"LOCATION": [primary.url] + [r.url for r in replicas]}
    first, second = f"{topology}-one", f"{topology}-two"
    for node in nodes:
        for user, password in ((first, PW1), (second, PW2)):
            node.cli("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    holder = Holder()
    holder.answer = (first, PW1)
    location = settings.pop("LOCATION")
    options = {**settings, "CREDENTIAL_PROVIDER": holder, "CREDENTIAL_REFRESH_SECONDS": 1}
    cache = build_cache(location, {"OPTIONS": options, "KEY_PREFIX": f"cred-{topology}"})
    keys = [f"k{i}" for i in range(12)]  # on several cluster nodes
    cache.set_many(dict.fromkeys(keys, 1))
    assert cache.get_many(keys) == dict.fromkeys(keys, 1)
    assert asyncio.run(cache.aget_many(keys)) == dict.fromkeys(keys, 1)

    def seen() -> set[str]:
        return {user for node in nodes for user in users(node).values()}

    assert first in seen()
    cell = credentials_for(cache._config.connection.credential_provider)
    answer_next(holder, cell, (second, PW2))

    def moved() -> bool:
        # Writes and reads, sync and async: every connection the cache has is used.
        cache.set_many(dict.fromkeys(keys, 2))
        assert cache.get_many(keys) == dict.fromkeys(keys, 2)
        asyncio.run(cache.aset_many(dict.fromkeys(keys, 1)))
        assert asyncio.run(cache.aget_many(keys)) == dict.fromkeys(keys, 1)
        return second in seen() and first not in seen()

    wait_until(moved, what=f"every connection as {second}")
