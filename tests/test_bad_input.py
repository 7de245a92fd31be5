"""Bad input at the API: odd keys, values over Redis' size limit, timeouts of the wrong type or
out of range, and configurations that cannot work. Each must fail clearly and at the right
moment: configuration errors when the cache is built, call errors before anything is sent,
and the cache must still work afterwards.

test_timeouts_keys.py covers Django's key warnings for 250+ characters and control characters,
int keys, and None / zero / negative timeouts; test_options.py covers unknown options and a
first set of invalid values. This file adds what those leave out.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import build_cache, is_redoxide
from django.core.cache import CacheHandler
from django.core.cache.backends.base import CacheKeyWarning, default_key_func
from django.core.exceptions import ImproperlyConfigured
from helpers_behaviour import MODES, Ops, raw_client
from redis_server import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's input checks")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ops(cache: Any, mode: str) -> Ops:
    return Ops(cache, mode)


def stored_keys(server: RedisServer) -> list[bytes]:
    return sorted(raw_client(server.port).keys("*"))


def dbsize(server: RedisServer) -> int:
    return int(server.cli("DBSIZE"))


# -- keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [b"bytes", None, 3.5, ("tuple", 1), frozenset({"x"})],
    ids=["bytes", "None", "float", "tuple", "frozenset"],
)
def test_keys_of_other_types_are_formatted_as_django_does(
    ops: Ops, redis_client: Any, key: Any
) -> None:
    """Django formats any key with f-strings (its builtin stores b"k" as ":1:b'k'"): the same
    object finds the same value again, in the same Redis key as Django's builtin backend."""
    expected = default_key_func(key, "", 1)
    with pytest.warns(CacheKeyWarning) if " " in expected else contextlib.nullcontext():
        ops.set(key, "value")
        assert ops.get(key) == "value"
        assert ops.get_many([key, "other"]) == {key: "value"}
    assert redis_client.keys("*") == [expected.encode()]


@pytest.mark.parametrize("call", ["get", "set", "get_many", "delete", "has_key"])
def test_key_that_is_not_valid_unicode_raises_before_sending(
    make_cache: Callable[..., Any], redis_server: RedisServer, mode: str, call: str
) -> None:
    """A str key with a lone surrogate cannot be UTF-8 encoded: UnicodeEncodeError (a
    ValueError, as with Django's builtin), even under fail-open; nothing is written."""
    ops = Ops(make_cache(IGNORE_EXCEPTIONS=True), mode)
    key = "half\udc80surrogate"
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: ops.get(key),
        "set": lambda: ops.set(key, 1),
        "get_many": lambda: ops.get_many(["fine", key]),
        "delete": lambda: ops.delete(key),
        "has_key": lambda: ops.has_key(key),
    }
    with pytest.raises(UnicodeEncodeError):
        calls[call]()
    assert dbsize(redis_server) == 0
    ops.set("fine", 1)
    assert ops.get("fine") == 1


def test_megabyte_key_warns_and_works(ops: Ops, redis_client: Any) -> None:
    """A 1 MB key is legal in Redis (keys may be 512 MB): Django's length warning, then it
    works like any key."""
    key = "k" * (1 << 20)
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        ops.set(key, "big key")
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        assert ops.get(key) == "big key"
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        assert ops.get_many([key, "small"]) == {key: "big key"}
    assert redis_client.exists(f":1:{key}") == 1
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        assert ops.delete(key) is True
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize(
    "key",
    ["line\r\nSET injected 1", "\r\n*1\r\n$8\r\nFLUSHALL\r\n", "nul\x00byte"],
    ids=["crlf-command", "resp-frame", "nul"],
)
def test_control_characters_in_keys_warn_and_cannot_inject_commands(
    ops: Ops, redis_client: Any, key: str
) -> None:
    """Keys travel as length-prefixed bulk strings: CR, LF and NUL are just bytes of the key
    (Django warns about them), never a second command."""
    redis_client.set("sentinel", "still here")
    with pytest.warns(CacheKeyWarning, match="characters that will cause errors"):
        ops.set(key, "value")
    with pytest.warns(CacheKeyWarning):
        assert ops.get(key) == "value"
    with pytest.warns(CacheKeyWarning):
        assert ops.get_many([key]) == {key: "value"}
    assert sorted(redis_client.keys("*")) == sorted([f":1:{key}".encode(), b"sentinel"])
    assert redis_client.get("sentinel") == b"still here"
    assert redis_client.exists("injected") == 0


# -- values over Redis' 512 MB limit ---------------------------------------------------------------

LIMIT = 512 * 1024 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """Lower redoxide's value size limit to 1,000 bytes, to test every write path cheaply."""
    import redoxide.cache

    assert redoxide.cache.MAX_VALUE_SIZE == LIMIT  # the real limit is Redis' default
    monkeypatch.setattr(redoxide.cache, "MAX_VALUE_SIZE", 1000)
    return 1000


def test_value_over_512_mb_is_refused_before_sending(fresh_redis_server: RedisServer) -> None:
    """A 513 MiB value: ValueError naming the key and the limit, raised before sending (the
    server receives no bytes of it, the connections are untouched), even under fail-open;
    nothing is written. (Without the check, redis-server reads all 513 MiB, then drops the
    connection: seconds later, a ConnectionInterrupted that fail-open turns into a silent
    miss.)"""
    server = fresh_redis_server
    cache = build_cache(server.url, {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    cache.set("existing", "old")
    conn_ids = (
        cache.client.execute("CLIENT", "ID"),
        asyncio.run(cache.client.aexecute("CLIENT", "ID")),
    )
    huge = b"\0" * (LIMIT + 1024 * 1024)
    writes: list[tuple[str, Callable[[], object]]] = [
        ("set", lambda: cache.set("huge", huge)),
        ("aset", lambda: asyncio.run(cache.aset("huge", huge))),
        ("set_many", lambda: cache.set_many({"small": 1, "huge": huge})),
    ]
    for name, write in writes:
        received = int(server.info("stats")["total_net_input_bytes"])
        with pytest.raises(ValueError, match=r"'huge'.*536,870,912 bytes") as info:
            write()
        assert "nothing was written" in str(info.value)
        received = int(server.info("stats")["total_net_input_bytes"]) - received
        assert received < 1024 * 1024, f"{name}: the server received {received:,} bytes"
    huge = b""  # free it
    assert stored_keys(server) == [b":1:existing"]
    assert conn_ids == (
        cache.client.execute("CLIENT", "ID"),
        asyncio.run(cache.client.aexecute("CLIENT", "ID")),
    )
    assert cache.get("existing") == "old"


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"COMPRESSOR": "redoxide.compressors.ZlibCompressor"},
        {"SERIALIZER": "redoxide.serializers.JSONSerializer"},
    ],
    ids=["pickle", "compressed", "json"],
)
def test_value_size_limit_covers_every_write(
    make_cache: Callable[..., Any],
    redis_server: RedisServer,
    small_limit: int,
    mode: str,
    options: dict[str, Any],
) -> None:
    """Every write path checks the encoded size (after compression), names the key, and
    writes nothing, not even the other keys of a set_many."""
    ops = Ops(make_cache(**options), mode)
    big = os.urandom(small_limit).hex()  # random: compression cannot shrink it under
    fits = "x" * (small_limit // 2)
    writes: list[Callable[[], object]] = [
        lambda: ops.set("big", big),
        lambda: ops.set("big", big, nx=True),
        lambda: ops.add("big", big),
        lambda: ops.set_many({"a": fits, "big": big, "c": 3}),
        lambda: ops.get_or_set("big", big),
        lambda: ops.get_or_set("big", lambda: big),
    ]
    for write in writes:
        with pytest.raises(ValueError, match=r"'big'.*over the 1,000 bytes"):
            write()
    assert dbsize(redis_server) == 0
    ops.set_many({"a": fits, "c": 3})
    assert ops.get_many(["a", "c"]) == {"a": fits, "c": 3}


def test_value_of_exactly_the_limit_is_accepted(
    make_cache: Callable[..., Any], small_limit: int, mode: str
) -> None:
    import pickle

    ops = Ops(make_cache(), mode)
    overhead = len(pickle.dumps(b"x" * 500, pickle.HIGHEST_PROTOCOL)) - 500
    payload = b"x" * (small_limit - overhead)
    assert len(pickle.dumps(payload, pickle.HIGHEST_PROTOCOL)) == small_limit
    ops.set("edge", payload)
    ops.set_many({"edge2": payload})
    assert ops.get_many(["edge", "edge2"]) == {"edge": payload, "edge2": payload}
    with pytest.raises(ValueError):
        ops.set("over", payload + b"x")


# -- timeouts --------------------------------------------------------------------------------------

TIMEOUT_WRITES: list[tuple[str, Callable[[Ops, Any], object]]] = [
    ("set", lambda ops, t: ops.set("k", "v", timeout=t)),
    ("add", lambda ops, t: ops.add("k", "v", timeout=t)),
    ("set_many", lambda ops, t: ops.set_many({"k": "v"}, timeout=t)),
    ("get_or_set", lambda ops, t: ops.get_or_set("k", "v", timeout=t)),
    ("touch", lambda ops, t: ops.touch("existing", timeout=t)),
    ("expire", lambda ops, t: ops.expire("existing", t)),
]


def _assert_refused(
    ops: Ops,
    redis_client: Any,
    timeout: Any,
    error: type[Exception],
    match: str,
) -> None:
    ops.set("existing", "e", timeout=None)
    for name, write in TIMEOUT_WRITES:
        with pytest.raises(error, match=match):
            write(ops, timeout)
        assert redis_client.keys("*") == [b":1:existing"], name
        assert redis_client.ttl(":1:existing") == -1, f"{name} changed the expiry"


@pytest.mark.parametrize(
    "timeout",
    ["10", b"10", object(), [10], True, False],
    ids=["str", "bytes", "object", "list", "True", "False"],
)
def test_timeout_of_the_wrong_type_is_a_type_error(
    ops: Ops, redis_client: Any, timeout: Any
) -> None:
    """A timeout must be a number of seconds or None. Stricter than Django's builtin, which
    runs int() over it (so "10" means 10 s and True 1 s): a string is a bug in the caller, and
    a bool almost always a misplaced argument."""
    _assert_refused(ops, redis_client, timeout, TypeError, "number of seconds or None")


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_timeout_is_a_value_error(ops: Ops, redis_client: Any, timeout: float) -> None:
    """NaN and infinities raise ValueError before sending (Django's builtin raises ValueError
    or OverflowError from int()). "Forever" is timeout=None."""
    _assert_refused(ops, redis_client, timeout, ValueError, "finite")


@pytest.mark.parametrize(
    "timeout", [1e300, 10**30, 2**63 / 1000], ids=["1e300", "10**30", "2**63ms"]
)
def test_timeout_beyond_what_redis_can_store_is_a_value_error(
    ops: Ops, redis_client: Any, timeout: float
) -> None:
    """A finite but astronomically long timeout raises ValueError naming the limit before
    anything is sent (was OverflowError from the Rust core for set, and a server error reply
    for touch, after a round trip)."""
    _assert_refused(ops, redis_client, timeout, ValueError, "at most")


def test_longest_allowed_timeouts_work(ops: Ops, redis_client: Any) -> None:
    century = 100 * 365 * 86400
    ops.set("k", "v", timeout=century)
    assert ops.get("k") == "v"
    assert redis_client.ttl(":1:k") > century - 10
    ops.set("k", "v", timeout=2**61 // 1000)  # far in the future, yet under the limit
    assert ops.get("k") == "v"
    assert redis_client.pttl(":1:k") > 2**60


def test_wrong_timeout_in_a_call_leaves_the_cache_usable(ops: Ops) -> None:
    for bad in ("10", math.nan, 1e300):
        with pytest.raises((TypeError, ValueError)):
            ops.set("k", "v", timeout=bad)
    ops.set("k", "v", timeout=None)
    assert ops.get("k") == "v"


# -- configuration errors come at startup ----------------------------------------------------------


def assert_startup_error(location: Any, options: Any, *names: str) -> ImproperlyConfigured:
    """Building the cache (no call made) raises ImproperlyConfigured naming each of `names`,
    without touching the network (LOCATION points at a port nothing listens on)."""
    from redoxide.exceptions import ConfigurationError

    start = time.monotonic()
    with pytest.raises(ImproperlyConfigured) as info:
        build_cache(location, {"OPTIONS": options})
    assert time.monotonic() - start < 0.5
    assert isinstance(info.value, ConfigurationError)
    for name in names:
        assert name in str(info.value), str(info.value)
    return info.value


def test_configuration_error_is_improperly_configured() -> None:
    from redoxide.exceptions import CacheError, ConfigurationError

    assert issubclass(ConfigurationError, ImproperlyConfigured)
    assert issubclass(ConfigurationError, CacheError)


DOWN = f"redis://127.0.0.1:{free_port()}/0"


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
    ],
)
def test_option_of_the_wrong_type_fails_at_startup_naming_it(name: str, value: Any) -> None:
    error = assert_startup_error(DOWN, {name: value}, name)
    assert "secret" not in str(error)


def test_options_that_are_not_a_dict_fail_at_startup() -> None:
    """Was an AttributeError from Django's BaseCache ("'list' object has no attribute 'get'")."""
    assert_startup_error(DOWN, [("SOCKET_TIMEOUT", 1)], "OPTIONS", "dict")
    assert_startup_error(DOWN, "SOCKET_TIMEOUT=1", "OPTIONS", "dict")


def test_bad_settings_fail_when_django_builds_the_cache() -> None:
    """Through django.core.cache.caches (a CacheHandler), as a project meets it."""
    from conftest import BACKEND

    handler = CacheHandler(
        {
            "good": {"BACKEND": BACKEND, "LOCATION": DOWN},
            "bad_option": {"BACKEND": BACKEND, "LOCATION": DOWN, "OPTIONS": {"DB": "zero"}},
            "bad_location": {"BACKEND": BACKEND, "LOCATION": "redis://127.0.0.1:6379/x"},
        }
    )
    assert handler["good"] is not None  # building a good one needs no server
    with pytest.raises(ImproperlyConfigured, match="DB"):
        handler["bad_option"]
    with pytest.raises(ImproperlyConfigured, match="LOCATION"):
        handler["bad_location"]


def test_secret_is_not_in_a_location_error() -> None:
    error = assert_startup_error("redis://:hunter2@127.0.0.1:6379/x", {}, "LOCATION")
    assert "hunter2" not in str(error) and "hunter2" not in repr(error)
