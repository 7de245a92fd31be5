"""LOCATION parsing and OPTIONS names and validation.

LOCATION: redis:// and valkey:// URLs, unix sockets, the db in the URL path or in OPTIONS,
username and password (in the URL or in OPTIONS), a list or a ';' / ','-separated string
whose first entry is the primary. OPTIONS: django-redis upper-case and builtin lower-case
names; an unknown or invalid option raises ImproperlyConfigured naming it. Configuration
errors come when the cache is built, before any call and without touching the network.
Keeping passwords secret is in security/test_secrecy.py.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import CacheHandler
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from support.backend import (
    BACKEND,
    JSONSerializer,
    assert_startup_error,
    backend_errors,
    build_cache,
    is_redoxide,
    raw_client,
)
from support.netfakes import blackhole_port
from support.secrecy import SECRET
from support.servers import RedisServer, free_port

redoxide_only = pytest.mark.skipif(not is_redoxide(), reason="redoxide only")


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
        ("SERIALIZER", "support.backend.JSONSerializer"),
        ("serializer", "support.backend.JSONSerializer"),
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
    ["support.backend.JSONSerializer", JSONSerializer],
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
        ("serializer", "support.backend.NoSuchSerializer"),
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


# -- configuration errors come at startup ------------------------------------------------------


@redoxide_only
def test_configuration_error_is_improperly_configured() -> None:
    from redoxide.exceptions import CacheError, ConfigurationError

    assert issubclass(ConfigurationError, ImproperlyConfigured)
    assert issubclass(ConfigurationError, CacheError)


DOWN = f"redis://127.0.0.1:{free_port()}/0"


@redoxide_only
@pytest.mark.parametrize(
    "location",
    [
        None,
        123,
        b"redis://127.0.0.1:6379/0",
        [],
        "",
        "   ",
        "redis://",
        "redis:///0",
        "redis://127.0.0.1:6379/-1",
        "redis://127.0.0.1:6379/0/extra",
        "redis://127.0.0.1:6379/ 1",
        "redis://127.0.0.1:0/0",
        "redis://127.0.0.1:6379/0?foo=1",
        "redis://host with space:6379/0",
        "unix://",
        "unix:///tmp/redis.sock?db=x",
        ["redis://127.0.0.1:6379/0", 5],
    ],
)
def test_location_that_does_not_parse_fails_at_startup(location: Any) -> None:
    assert_startup_error(location, {}, "LOCATION")


@redoxide_only
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SOCKET_TIMEOUT", "fast"),
        ("SOCKET_TIMEOUT", math.nan),
        ("SOCKET_TIMEOUT", math.inf),
        ("SOCKET_TIMEOUT", True),
        ("SOCKET_TIMEOUT", 0),
        ("SOCKET_TIMEOUT", None),
        ("SOCKET_CONNECT_TIMEOUT", None),
        ("socket_connect_timeout", "1s"),
        ("COMPRESS_MIN_LENGTH", -1),
        ("COMPRESS_MIN_LENGTH", "10"),
        ("COMPRESS_MIN_LENGTH", 1.5),
        ("COMPRESS_LEVEL", "max"),
        ("SERIALIZER", "no.such.Class"),
        ("SERIALIZER", "json"),
        ("SERIALIZER", 5),
        ("COMPRESSOR", "no.such.Class"),
        ("COMPRESSOR", 5),
        ("IGNORE_EXCEPTIONS", "yes"),
        ("IGNORE_EXCEPTIONS", 1),
        ("LOG_IGNORED_EXCEPTIONS", "no"),
        ("IGNORE_EXCEPTION_CLASSES", ["no.such.Error"]),
        ("IGNORE_EXCEPTION_CLASSES", "redoxide.exceptions.ResponseError"),
        ("IGNORE_EXCEPTION_CLASSES", [Exception]),
        ("IGNORE_EXCEPTION_CLASSES", []),
        ("STAMPEDE_PROTECTION", 1),
        ("STAMPEDE_WINDOW", 2),
        ("STAMPEDE_LOCK_TIMEOUT", "x"),
        ("CLEAR_PREFIX_ONLY", "no"),
        ("USERNAME", 5),
        ("PASSWORD", b"secret"),
        ("DB", 1.5),
        ("PICKLE_VERSION", True),
        ("CLIENT_CLASS", "django_redis.client.ShardClient"),
        ("CONNECTION_FACTORY", "myproject.redis.MyConnectionFactory"),
    ],
)
def test_option_of_the_wrong_type_fails_at_startup_naming_it(name: str, value: Any) -> None:
    error = assert_startup_error(DOWN, {name: value}, name)
    assert "secret" not in str(error)


@redoxide_only
def test_options_that_are_not_a_dict_fail_at_startup() -> None:
    """Was an AttributeError from Django's BaseCache ("'list' object has no attribute 'get'")."""
    assert_startup_error(DOWN, [("SOCKET_TIMEOUT", 1)], "OPTIONS", "dict")
    assert_startup_error(DOWN, "SOCKET_TIMEOUT=1", "OPTIONS", "dict")


@redoxide_only
def test_bad_settings_fail_at_the_first_call_of_the_cache_django_builds() -> None:
    """Through django.core.cache.caches (a CacheHandler), as a project meets it. Building does
    not raise (Django's own checks build every cache: `manage.py check` must not crash); the
    first call does, naming the setting, and close() (called after every request) does not."""
    handler = CacheHandler(
        {
            "good": {"BACKEND": BACKEND, "LOCATION": DOWN},
            "bad_option": {"BACKEND": BACKEND, "LOCATION": DOWN, "OPTIONS": {"DB": "zero"}},
            "bad_location": {"BACKEND": BACKEND, "LOCATION": "redis://127.0.0.1:6379/x"},
        }
    )
    assert handler["good"] is not None  # building a good one needs no server
    with pytest.raises(ImproperlyConfigured, match="DB"):
        handler["bad_option"].get("k")
    with pytest.raises(ImproperlyConfigured, match="LOCATION"):
        asyncio.run(handler["bad_location"].aset("k", 1))
    with pytest.raises(ImproperlyConfigured, match="LOCATION"):
        handler["bad_location"].client  # noqa: B018  (a property refuses too)
    handler.close_all()
    assert isinstance(handler["bad_option"], import_string(BACKEND))


@pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide") != "redoxide", reason="redoxide internals"
)
@pytest.mark.parametrize("value", [1e9, 0.0000001])
def test_extreme_socket_timeouts_are_rejected(value: float) -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="SOCKET_TIMEOUT"):
        build_cache("redis://127.0.0.1:1/0", {"OPTIONS": {"SOCKET_TIMEOUT": value}}).get("k")


@redoxide_only
def test_django_redis_connection_factories_are_accepted_and_ignored() -> None:
    from django.test import override_settings
    from redoxide.exceptions import ConfigurationError
    from redoxide.options import parse_config

    for factory in (
        "django_redis.pool.ConnectionFactory",
        "django_redis.pool.SentinelConnectionFactory",
    ):
        assert parse_config(DOWN, {"CONNECTION_FACTORY": factory}).servers.urls
        with override_settings(DJANGO_REDIS_CONNECTION_FACTORY=factory):
            assert parse_config(DOWN, {}).servers.urls
    foreign = override_settings(DJANGO_REDIS_CONNECTION_FACTORY="myproject.Factory")
    with foreign, pytest.raises(ConfigurationError, match="DJANGO_REDIS_CONNECTION_FACTORY"):
        parse_config(DOWN, {})
