"""The error policy hook: OPTIONS["EXCEPTION_HANDLER"] and the DJANGO_REDIS_EXCEPTION_HANDLER
setting, with django-redis' convention (handler(cache, exception), called for each error
fail-open would ignore, instead of the log; what it raises reaches the caller), sync and async;
and LOG_IGNORED_EXCEPTIONS_LEVEL.

Precedence, as documented: IGNORE_EXCEPTIONS decides whether anything is ignored,
IGNORE_EXCEPTION_CLASSES which errors may be, the handler what happens to each of those (its
return means "ignore it", a raise fails the call), and only without a handler are they logged
(LOG_IGNORED_EXCEPTIONS, at LOG_IGNORED_EXCEPTIONS_LEVEL).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from django.test import override_settings
from redoxide.exceptions import (
    CacheTimeout,
    ConfigurationError,
    ConnectionInterrupted,
    WrongTypeError,
)
from redoxide.options import parse_config
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide options")

FAST = {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}

#: What the dotted-path handlers below saw, in order.
SEEN: list[tuple[Any, BaseException]] = []


def record(cache: Any, exception: BaseException) -> None:
    SEEN.append((cache, exception))


def reraise(cache: Any, exception: BaseException) -> None:
    raise exception


def fail_closed_on_connection_errors(cache: Any, exception: BaseException) -> None:
    """A policy users asked django-redis for: connection errors fail, timeouts are misses."""
    if not isinstance(exception, TimeoutError):
        raise exception
    SEEN.append((cache, exception))


@pytest.fixture(autouse=True)
def _forget_seen() -> None:
    SEEN.clear()


def down_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def test_handler_gets_the_cache_and_the_error_and_replaces_the_log(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    options = {**FAST, "IGNORE_EXCEPTIONS": True, "LOG_IGNORED_EXCEPTIONS": True}
    cache = build_cache(down_url(), {"OPTIONS": {**options, "EXCEPTION_HANDLER": record}})
    with caplog.at_level(logging.DEBUG):
        assert Ops(cache, mode).get("k", "dflt") == "dflt"
        assert Ops(cache, mode).set_many({"a": 1}) == ["a"]
    assert [type(e) for _, e in SEEN] == [ConnectionInterrupted, ConnectionInterrupted]
    assert all(seen_cache is cache for seen_cache, _ in SEEN)
    assert [r for r in caplog.records if "ignored" in r.getMessage()] == []
    assert cache.stats()["fail_open_misses"] == 2


def test_a_handler_that_raises_fails_the_call_with_its_exception(mode: str) -> None:
    options = {**FAST, "IGNORE_EXCEPTIONS": True, "EXCEPTION_HANDLER": reraise}
    cache = build_cache(down_url(), {"OPTIONS": options})
    with pytest.raises(ConnectionInterrupted) as raised:
        Ops(cache, mode).get("k")
    # The chain ends: the error is not wrapped, nor its own context.
    chain, error = [], raised.value
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert error is None
    assert cache.stats()["fail_open_misses"] == 0  # answered by an error, not a fallback


def test_a_policy_can_fail_closed_on_connection_errors_and_open_on_timeouts(
    mode: str, fresh_redis_server: RedisServer
) -> None:
    redis_server = fresh_redis_server
    options = {**FAST, "IGNORE_EXCEPTIONS": True}
    options["EXCEPTION_HANDLER"] = fail_closed_on_connection_errors
    with pytest.raises(ConnectionInterrupted):
        Ops(build_cache(down_url(), {"OPTIONS": options}), mode).get("k")
    stalled = build_cache(redis_server.url, {"OPTIONS": {**options, "SOCKET_TIMEOUT": 0.2}})
    Ops(stalled, mode).get("warm")  # connected before the stall
    redis_server.pause()
    try:
        assert Ops(stalled, mode).get("k", "miss") == "miss"
    finally:
        redis_server.resume()
    assert stalled.get("k", "back") == "back"
    assert [type(e) for _, e in SEEN] == [CacheTimeout]


def test_dotted_path_setting_and_options_precedence() -> None:
    options = {**FAST, "IGNORE_EXCEPTIONS": True}
    path = f"{__name__}.reraise"
    with override_settings(DJANGO_REDIS_EXCEPTION_HANDLER=path):
        with pytest.raises(ConnectionInterrupted):
            build_cache(down_url(), {"OPTIONS": options}).get("k")
        ours = {**options, "EXCEPTION_HANDLER": f"{__name__}.record"}
        assert build_cache(down_url(), {"OPTIONS": ours}).get("k", 1) == 1
    assert len(SEEN) == 1


def test_not_called_unless_the_error_is_ignored(redis_server: RedisServer) -> None:
    # IGNORE_EXCEPTIONS off: the error raises, as with django-redis.
    cache = build_cache(down_url(), {"OPTIONS": {**FAST, "EXCEPTION_HANDLER": record}})
    with pytest.raises(ConnectionInterrupted):
        cache.get("k")
    with pytest.raises(ConnectionInterrupted):
        asyncio.run(cache.aget("k"))
    # A server's error reply is never ignored, so never handed over either.
    options = {**FAST, "IGNORE_EXCEPTIONS": True, "EXCEPTION_HANDLER": record}
    live = build_cache(redis_server.url, {"OPTIONS": options})
    redis_server.cli("RPUSH", live.make_key("list"), "a")
    with pytest.raises(WrongTypeError):
        live.get("list")
    assert SEEN == []


def test_ignored_errors_log_at_the_chosen_level(caplog: pytest.LogCaptureFixture) -> None:
    options = {**FAST, "IGNORE_EXCEPTIONS": True, "LOG_IGNORED_EXCEPTIONS": True}
    cache = build_cache(
        down_url(), {"OPTIONS": {**options, "LOG_IGNORED_EXCEPTIONS_LEVEL": "info"}}
    )
    with caplog.at_level(logging.DEBUG, logger="redoxide"):
        cache.get("k")
        asyncio.run(cache.aget("k"))
    levels = [r.levelno for r in caplog.records if "ignored" in r.getMessage()]
    assert levels == [logging.INFO, logging.INFO]
    assert (
        parse_config("redis://h/0", {"LOG_IGNORED_EXCEPTIONS_LEVEL": 30}).errors.ignored_log_level
        == 30
    )
    assert parse_config("redis://h/0", {}).errors.ignored_log_level == logging.ERROR


@pytest.mark.parametrize(
    ("options", "settings", "names"),
    [
        ({"EXCEPTION_HANDLER": 42}, {}, "OPTIONS['EXCEPTION_HANDLER'] must be a callable"),
        ({"EXCEPTION_HANDLER": "no.such.handler"}, {}, "OPTIONS['EXCEPTION_HANDLER'] cannot"),
        ({}, {"DJANGO_REDIS_EXCEPTION_HANDLER": "nope.x"}, "DJANGO_REDIS_EXCEPTION_HANDLER"),
        ({"LOG_IGNORED_EXCEPTIONS_LEVEL": "LOUD"}, {}, "LOG_IGNORED_EXCEPTIONS_LEVEL"),
        ({"LOG_IGNORED_EXCEPTIONS_LEVEL": True}, {}, "LOG_IGNORED_EXCEPTIONS_LEVEL"),
    ],
)
def test_bad_settings_are_refused_by_name(
    options: dict[str, Any], settings: dict[str, Any], names: str
) -> None:
    with (
        override_settings(**settings),
        pytest.raises(ConfigurationError, match=names.replace("[", r"\[")),
    ):
        parse_config("redis://127.0.0.1:6379/0", options)
