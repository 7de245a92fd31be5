"""LOCATION parsing, OPTIONS names and validation, and keeping passwords secret.

LOCATION: redis:// and valkey:// URLs, unix sockets, the db in the URL path or in OPTIONS,
username and password (in the URL or in OPTIONS), a list or a ';' / ','-separated string
whose first entry is the primary. OPTIONS: django-redis upper-case and builtin lower-case
names; an unknown or invalid option raises ImproperlyConfigured naming it. A password never
shows in repr(cache), in an error's str/repr/traceback, or in a log record.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import build_cache
from django.core.exceptions import ImproperlyConfigured
from helpers_behaviour import JSONSerializer, backend_errors, blackhole_port, raw_client
from redis_server import RedisServer, free_port

SECRET = "Pw-" + secrets.token_hex(12)
WRONG_SECRET = "Wrong-" + secrets.token_hex(12)


def db_keys(server: RedisServer, db: int) -> list[bytes]:
    client = raw_client(server.port, db=db, password=server.password)
    try:
        return sorted(client.keys("*"))
    finally:
        client.close()


def assert_round_trip(cache: Any) -> None:
    cache.set("k", {"v": 1})
    assert cache.get("k") == {"v": 1}
    assert asyncio.run(cache.aget("k")) == {"v": 1}


# -- LOCATION --------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["redis", "valkey"])
def test_url_schemes(
    make_cache: Callable[..., Any], redis_server: RedisServer, scheme: str
) -> None:
    cache = make_cache(f"{scheme}://127.0.0.1:{redis_server.port}/0")
    assert_round_trip(cache)
    assert db_keys(redis_server, 0) == [b":1:k"]


def test_url_without_db_uses_db_0(
    make_cache: Callable[..., Any], redis_server: RedisServer
) -> None:
    assert_round_trip(make_cache(f"redis://127.0.0.1:{redis_server.port}"))
    assert db_keys(redis_server, 0) == [b":1:k"]


def test_db_in_url_path(make_cache: Callable[..., Any], redis_server: RedisServer) -> None:
    assert_round_trip(make_cache(f"redis://127.0.0.1:{redis_server.port}/3"))
    assert db_keys(redis_server, 3) == [b":1:k"]
    assert db_keys(redis_server, 0) == []


def test_db_in_url_query(make_cache: Callable[..., Any], redis_server: RedisServer) -> None:
    # redis-py (hence Django's builtin backend) honours ?db=N on redis:// URLs too.
    assert_round_trip(make_cache(f"redis://127.0.0.1:{redis_server.port}?db=4"))
    assert db_keys(redis_server, 4) == [b":1:k"]
    assert db_keys(redis_server, 0) == []


@pytest.mark.parametrize("name", ["db", "DB"])
def test_db_in_options(
    make_cache: Callable[..., Any], redis_server: RedisServer, name: str
) -> None:
    cache = make_cache(f"redis://127.0.0.1:{redis_server.port}", OPTIONS={name: 5})
    assert_round_trip(cache)
    asyncio.run(cache.aset("from_async", 1))
    assert db_keys(redis_server, 5) == [b":1:from_async", b":1:k"]
    assert db_keys(redis_server, 0) == []


@pytest.fixture
def unix_server() -> Iterator[tuple[RedisServer, str]]:
    """Yield a server listening on a unix socket (and on TCP, to inspect it) and its path."""
    sock_dir = tempfile.mkdtemp(prefix="rx-sock-")
    path = os.path.join(sock_dir, "redis.sock")
    try:
        with RedisServer("--unixsocket", path, "--unixsocketperm", "700") as server:
            yield server, path
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_unix_socket(unix_server: tuple[RedisServer, str]) -> None:
    server, path = unix_server
    cache = build_cache(f"unix://{path}", {})
    try:
        assert_round_trip(cache)
    finally:
        cache.close()
    assert db_keys(server, 0) == [b":1:k"]


def test_unix_socket_with_db(unix_server: tuple[RedisServer, str]) -> None:
    server, path = unix_server
    cache = build_cache(f"unix://{path}?db=2", {})
    try:
        assert_round_trip(cache)
    finally:
        cache.close()
    assert db_keys(server, 2) == [b":1:k"]
    assert db_keys(server, 0) == []


@pytest.fixture
def second_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.mark.parametrize("form", ["list", "semicolon", "comma"])
def test_several_locations_write_to_the_first(
    make_cache: Callable[..., Any],
    redis_server: RedisServer,
    second_server: RedisServer,
    form: str,
) -> None:
    urls = [redis_server.url, second_server.url]
    location: Any = {"list": urls, "semicolon": ";".join(urls), "comma": ",".join(urls)}[form]
    cache = make_cache(location)
    cache.set("k", "v")
    cache.set_many({"a": 1, "b": 2})
    asyncio.run(cache.aset("c", 3))
    assert db_keys(redis_server, 0) == [b":1:a", b":1:b", b":1:c", b":1:k"]
    assert db_keys(second_server, 0) == []


# -- authentication ------------------------------------------------------------------------


@pytest.fixture
def auth_server() -> Iterator[RedisServer]:
    """Yield a server with requirepass SECRET and an ACL user alice (password SECRET)."""
    with RedisServer(password=SECRET) as server:
        server.cli("ACL", "SETUSER", "alice", "on", f">{SECRET}", "~*", "+@all")
        yield server


def test_password_in_url(auth_server: RedisServer) -> None:
    cache = build_cache(f"redis://:{SECRET}@127.0.0.1:{auth_server.port}/0", {})
    assert_round_trip(cache)
    assert db_keys(auth_server, 0) == [b":1:k"]


@pytest.mark.parametrize("name", ["PASSWORD", "password"])
def test_password_in_options(auth_server: RedisServer, name: str) -> None:
    cache = build_cache(f"redis://127.0.0.1:{auth_server.port}/0", {"OPTIONS": {name: SECRET}})
    assert_round_trip(cache)


def test_username_and_password_in_url(auth_server: RedisServer) -> None:
    cache = build_cache(f"redis://alice:{SECRET}@127.0.0.1:{auth_server.port}/0", {})
    assert_round_trip(cache)
    assert "alice" in auth_server.cli("CLIENT", "LIST")


@pytest.mark.parametrize(
    ("user_opt", "pass_opt"), [("USERNAME", "PASSWORD"), ("username", "password")]
)
def test_username_and_password_in_options(
    auth_server: RedisServer, user_opt: str, pass_opt: str
) -> None:
    options = {user_opt: "alice", pass_opt: SECRET}
    cache = build_cache(f"redis://127.0.0.1:{auth_server.port}/0", {"OPTIONS": options})
    assert_round_trip(cache)
    assert "user=alice" in auth_server.cli("CLIENT", "LIST")


def test_missing_password_is_a_cache_error(auth_server: RedisServer) -> None:
    cache = build_cache(f"redis://127.0.0.1:{auth_server.port}/0", {})
    with pytest.raises(backend_errors().CacheError):
        cache.get("k")


# -- OPTIONS names and validation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SOCKET_TIMEOUT", 1.5),
        ("socket_timeout", 1.5),
        ("SOCKET_TIMEOUT", 2),
        ("SOCKET_CONNECT_TIMEOUT", 0.5),
        ("socket_connect_timeout", 0.5),
        ("PICKLE_VERSION", 4),
        ("pickle_protocol", 4),
        ("SERIALIZER", "helpers_behaviour.JSONSerializer"),
        ("serializer", "helpers_behaviour.JSONSerializer"),
    ],
)
def test_known_options_are_accepted(
    make_cache: Callable[..., Any], name: str, value: object
) -> None:
    assert_round_trip(make_cache(OPTIONS={name: value}))


@pytest.mark.parametrize(
    ("connect_name", "response_name"),
    [("SOCKET_CONNECT_TIMEOUT", "SOCKET_TIMEOUT"), ("socket_connect_timeout", "socket_timeout")],
)
def test_timeout_options_are_applied(
    fresh_redis_server: RedisServer, connect_name: str, response_name: str
) -> None:
    # 0.2 s each, checked against an upper bound below the defaults (1 s connect, 2 s reply).
    options = {connect_name: 0.2, response_name: 0.2}
    errors = backend_errors()

    def fails_fast(call: Callable[[], object], expected: type[BaseException]) -> None:
        start = time.monotonic()
        with pytest.raises(expected):
            call()
        assert time.monotonic() - start < 0.8

    with blackhole_port() as port:
        unreachable = build_cache(f"redis://127.0.0.1:{port}/0", {"OPTIONS": options})
        fails_fast(lambda: unreachable.get("k"), errors.CacheError)
        fails_fast(lambda: asyncio.run(unreachable.aget("k")), errors.CacheError)
    stalled = build_cache(fresh_redis_server.url, {"OPTIONS": options})
    stalled.set("k", 1)
    asyncio.run(stalled.aset("k", 1))
    fresh_redis_server.pause()
    try:
        fails_fast(lambda: stalled.get("k"), errors.CacheTimeout)
        fails_fast(lambda: asyncio.run(stalled.aget("k")), errors.CacheTimeout)
    finally:
        fresh_redis_server.resume()


@pytest.mark.parametrize(("name", "protocol"), [("PICKLE_VERSION", 2), ("pickle_protocol", 3)])
def test_pickle_protocol_option_is_used(
    make_cache: Callable[..., Any], redis_client: Any, name: str, protocol: int
) -> None:
    cache = make_cache(OPTIONS={name: protocol})
    cache.set("k", {"v": 1})
    assert redis_client.get(":1:k")[:2] == bytes([0x80, protocol])
    assert cache.get("k") == {"v": 1}


@pytest.mark.parametrize(
    "serializer",
    ["helpers_behaviour.JSONSerializer", JSONSerializer],
    ids=["path", "class"],
)
@pytest.mark.parametrize("name", ["SERIALIZER", "serializer"])
def test_serializer_option_is_used(
    make_cache: Callable[..., Any], redis_client: Any, name: str, serializer: object
) -> None:
    cache = make_cache(OPTIONS={name: serializer})
    cache.set("k", {"b": [1, 2], "a": "x"})
    assert redis_client.get(":1:k") == b'{"a":"x","b":[1,2]}'
    assert cache.get("k") == {"a": "x", "b": [1, 2]}
    assert asyncio.run(cache.aget("k")) == {"a": "x", "b": [1, 2]}


def assert_improperly_configured(location: Any, options: dict[str, Any], name: str) -> None:
    """Building the cache or its first use raises ImproperlyConfigured that names `name`."""
    with pytest.raises(ImproperlyConfigured) as info:
        cache = build_cache(location, {"OPTIONS": options})
        cache.get("k")
    assert name.lower() in str(info.value).lower(), str(info.value)


@pytest.mark.parametrize("name", ["NO_SUCH_OPTION", "socket_timout", "Socket_Timeout"])
def test_unknown_option_is_rejected_by_name(redis_server: RedisServer, name: str) -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        cache = build_cache(redis_server.url, {"OPTIONS": {name: 1}})
        cache.get("k")
    assert name in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SOCKET_TIMEOUT", "soon"),
        ("SOCKET_TIMEOUT", -1),
        ("socket_timeout", "soon"),
        ("SOCKET_CONNECT_TIMEOUT", "x"),
        ("socket_connect_timeout", -2.5),
        ("DB", "zero"),
        ("db", -1),
        ("PICKLE_VERSION", 99),
        ("PICKLE_VERSION", "high"),
        ("pickle_protocol", 99),
        ("SERIALIZER", "no_such_module.Serializer"),
        ("serializer", "helpers_behaviour.NoSuchSerializer"),
    ],
)
def test_invalid_option_value_is_rejected_by_name(
    redis_server: RedisServer, name: str, value: object
) -> None:
    assert_improperly_configured(redis_server.url, {name: value}, name)


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:6379/0",
        "127.0.0.1:6379",
        "redis://127.0.0.1:6379/notadb",
        "redis://127.0.0.1:notaport/0",
        "redis://127.0.0.1:99999/0",
        "redis://[::1/0",
        "redis://127.0.0.1:6379/0?db=notadb",
    ],
)
def test_invalid_location_is_improperly_configured(location: str) -> None:
    with pytest.raises(ImproperlyConfigured):
        cache = build_cache(location, {})
        cache.get("k")


# -- secrets ----------------------------------------------------------------------------------


def all_text_of(error: BaseException) -> str:
    """Return every text the error shows: str, repr, and the formatted chain."""
    return "\n".join([str(error), repr(error), "".join(traceback.format_exception(error))])


def all_log_text(records: list[logging.LogRecord]) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) + repr(record.args) for record in records)


def assert_no_secret(text: str) -> None:
    assert SECRET not in text
    assert WRONG_SECRET not in text


def test_password_not_in_repr(auth_server: RedisServer) -> None:
    cache = build_cache(
        f"redis://alice:{SECRET}@127.0.0.1:{auth_server.port}/0",
        {"OPTIONS": {"SOCKET_TIMEOUT": 1.0}},
    )
    cache.set("k", "v")
    assert_no_secret(repr(cache))
    assert_no_secret(str(cache))
    options_cache = build_cache(
        auth_server.url.replace(f":{SECRET}@", ""), {"OPTIONS": {"PASSWORD": SECRET}}
    )
    options_cache.set("k", "v")
    assert_no_secret(repr(options_cache))
    assert_no_secret(str(options_cache))


@pytest.mark.parametrize("how", ["url", "options"])
def test_password_not_in_errors_or_logs_for_a_dead_server(
    caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()
    if how == "url":
        cache = build_cache(f"redis://user:{SECRET}@127.0.0.1:{port}/0", {})
    else:
        cache = build_cache(
            f"redis://127.0.0.1:{port}/0", {"OPTIONS": {"USERNAME": "user", "PASSWORD": SECRET}}
        )
    errors = backend_errors()
    with pytest.raises(errors.ConnectionInterrupted) as sync_info:
        cache.set("k", "v")
    with pytest.raises(errors.ConnectionInterrupted) as async_info:
        asyncio.run(cache.aget("k"))
    assert_no_secret(all_text_of(sync_info.value))
    assert_no_secret(all_text_of(async_info.value))
    assert_no_secret(all_log_text(caplog.records))
    assert_no_secret(repr(cache))


def test_password_not_in_errors_or_logs_for_a_wrong_password(
    caplog: pytest.LogCaptureFixture, auth_server: RedisServer
) -> None:
    caplog.set_level(logging.DEBUG)
    cache = build_cache(f"redis://alice:{WRONG_SECRET}@127.0.0.1:{auth_server.port}/0", {})
    errors = backend_errors()
    with pytest.raises(errors.CacheError) as sync_info:
        cache.get("k")
    with pytest.raises(errors.CacheError) as async_info:
        asyncio.run(cache.aget("k"))
    assert_no_secret(all_text_of(sync_info.value))
    assert_no_secret(all_text_of(async_info.value))
    assert_no_secret(all_log_text(caplog.records))
    assert_no_secret(repr(cache))


def test_password_not_in_improperly_configured(redis_server: RedisServer) -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        cache = build_cache(
            f"redis://u:{SECRET}@127.0.0.1:{redis_server.port}/0",
            {"OPTIONS": {"PASSWORD": WRONG_SECRET, "NO_SUCH_OPTION": 1}},
        )
        cache.get("k")
    assert_no_secret(all_text_of(info.value))


def test_password_not_in_the_repr_of_any_cache_attribute(auth_server: RedisServer) -> None:
    # Debug pages and error trackers show the reprs of frame locals such as self._config.
    cache = build_cache(f"redis://alice:{SECRET}@127.0.0.1:{auth_server.port}/0", {})
    cache.set("k", "v")
    for name, value in vars(cache).items():
        assert_no_secret(f"{name}={value!r}")
    options_cache = build_cache(
        f"redis://127.0.0.1:{auth_server.port}/0", {"OPTIONS": {"PASSWORD": SECRET}}
    )
    for name, value in vars(options_cache).items():
        assert_no_secret(f"{name}={value!r}")


@pytest.mark.parametrize("in_url", ["At@" + SECRET, "At%40" + SECRET], ids=["raw_at", "encoded"])
def test_password_with_special_characters_not_in_repr(in_url: str) -> None:
    password = "At@" + SECRET
    with RedisServer(password=password) as server:
        cache = build_cache(f"redis://:{in_url}@127.0.0.1:{server.port}/0", {})
        cache.set("k", "v")
        assert cache.get("k") == "v"
        for text in (repr(cache), str(cache)):
            assert SECRET not in text, text


@pytest.mark.parametrize(
    "location",
    [
        f"redis://:{SECRET}@127.0.0.1:6379/notadb",
        f"redis://:{SECRET}@127.0.0.1:notaport/0",
        f"redis://u:{SECRET}@[::1/0",
        f"http://u:{SECRET}@127.0.0.1:6379/0",
    ],
    ids=["bad_db", "bad_port", "bad_ipv6", "bad_scheme"],
)
def test_password_not_in_invalid_location_errors(location: str) -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        cache = build_cache(location, {})
        cache.get("k")
    assert_no_secret(all_text_of(info.value))


def test_password_not_in_fail_open_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    options = {"IGNORE_EXCEPTIONS": True, "LOG_IGNORED_EXCEPTIONS": True}
    cache = build_cache(f"redis://u:{SECRET}@127.0.0.1:{free_port()}/0", {"OPTIONS": options})
    assert cache.get("k", "fallback") == "fallback"
    assert asyncio.run(cache.aget("k", "fallback")) == "fallback"
    assert caplog.records, "LOG_IGNORED_EXCEPTIONS logged nothing"
    assert_no_secret(all_log_text(caplog.records))
