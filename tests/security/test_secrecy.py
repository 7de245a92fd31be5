"""Secrets never leak: passwords (in the URL or in OPTIONS, of a server, an ACL user or a
sentinel) and the signing key are searched for in reprs and strs of the cache and its
attributes, in errors (str, repr, args, the formatted chain), tracebacks and log records, for
dead servers, wrong passwords, invalid locations and fail-open logging. The password of a
rediss:// URL is checked in test_tls.py, beside the TLS servers it needs.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from support.backend import (
    assert_startup_error,
    backend_errors,
    build_cache,
    is_redoxide,
)
from support.secrecy import SECRET, WRONG_SECRET, all_log_text, all_text_of, assert_no_secret
from support.servers import RedisServer, free_port

redoxide_only = pytest.mark.skipif(not is_redoxide(), reason="redoxide only")

SIGNING_KEY = "Sk-" + secrets.token_hex(16)


# -- passwords ---------------------------------------------------------------------------------


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


@redoxide_only
@pytest.mark.parametrize(
    "location",
    [
        f"redis://u:pa/{SECRET}@127.0.0.1:6379/0",
        f"redis://u:{SECRET}/x@127.0.0.1:6379/0",
        f"redis://u:{SECRET}?x@127.0.0.1:6379/0",
        f"redis://u:{SECRET[:6]}#{SECRET[6:]}@127.0.0.1:6379/0",
        f"redis://127.0.0.1:6379/0?password={SECRET}&nosuch=1",
        f"redis://127.0.0.1:6379/0?db=x&password={SECRET}",
        f"rediss://u:{SECRET}@127.0.0.1:6379/0?ssl_keyfile=x",
        f"redis://127.0.0.1:6379/0?pasword={SECRET}",
        f"redis://u:other@127.0.0.1:6379/0?password={SECRET}",
        f"redis://127.0.0.1:6379/0?password={SECRET}&password=x",
        f"rediss://127.0.0.1:6379/0?ssl_password={SECRET}",
        f"rediss://127.0.0.1:6379/0?ssl_certfile=c.pem&ssl_keyfile=k.pem&ssl_password={SECRET}",
        f"redis://127.0.0.1:6379/0?db=1&api_secret={SECRET}",
        f"redis://127.0.0.1:6379/x?socket_timeout=1&auth_token={SECRET}",
    ],
    ids=[
        "slash_before",
        "slash_after",
        "question",
        "hash",
        "query",
        "query_db",
        "query_tls",
        "query_misspelt",
        "query_and_userinfo",
        "query_twice",
        "ssl_password",
        "ssl_password_with_key",
        "unknown_secret_name",
        "unknown_name_beside_a_bad_db",
    ],
)
def test_password_with_unescaped_characters_not_in_errors(location: str) -> None:
    """Regression: the password was shown when it held "/" or "?", or sat in the query."""
    with pytest.raises(ImproperlyConfigured) as info:
        build_cache(location, {}).get("k")
    text = all_text_of(info.value)
    assert SECRET not in text, text
    assert SECRET[:6] not in text and SECRET[6:] not in text, text


@redoxide_only
def test_secret_is_not_in_a_location_error() -> None:
    error = assert_startup_error("redis://:hunter2@127.0.0.1:6379/x", {}, "LOCATION")
    assert "hunter2" not in str(error) and "hunter2" not in repr(error)


@redoxide_only
def test_sentinel_password_never_shown(sentinel_set: Any) -> None:
    cache = build_cache(
        "redis://mymaster/0",
        {
            "OPTIONS": {
                "SENTINELS": sentinel_set.sentinel_addresses,
                "SENTINEL_KWARGS": {"password": "sentinel-secret"},
            }
        },
    )
    assert "sentinel-secret" not in repr(cache) + repr(cache._client) + repr(cache._config)


# -- every text, for every way of failing ------------------------------------------------------


def secret_sweep(cache: Any, calls: list[Callable[[], Any]]) -> str:
    """Run each call, collecting repr/str of the cache and its client, errors and tracebacks."""
    texts = [repr(cache), str(cache), repr(cache._client), str(cache._client)]
    texts += [repr(cache._config), repr(cache._config.servers.display)]
    for call in calls:
        try:
            call()
        except Exception as exc:
            texts.append(traceback.format_exc())
            texts.append(all_text_of(exc))
    return "\n".join(texts)


def calls_of(cache: Any) -> list[Callable[[], Any]]:
    return [
        lambda: cache.get("k"),
        lambda: cache.set("k", 1),
        lambda: cache.get_many(["a", "b"]),
        lambda: cache.incr("n"),
        lambda: asyncio.run(cache.aget("k")),
        lambda: asyncio.run(cache.aset_many({"a": 1})),
    ]


@redoxide_only
@pytest.mark.parametrize("fail_open", [False, True], ids=["raise", "fail_open"])
@pytest.mark.parametrize("server_state", ["dead", "wrong_password"])
@pytest.mark.parametrize("how", ["url", "options"])
def test_secret_not_in_reprs_errors_tracebacks_or_logs(
    acl_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
    how: str,
    server_state: str,
    fail_open: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port() if server_state == "dead" else acl_server.port
    password = SECRET if server_state == "dead" else WRONG_SECRET
    if how == "url":
        location, options = f"redis://alice:{password}@127.0.0.1:{port}/0", {}
    else:
        location = f"redis://127.0.0.1:{port}/0"
        options = {"USERNAME": "alice", "PASSWORD": password}
    options.update(SOCKET_CONNECT_TIMEOUT=0.5, SOCKET_TIMEOUT=0.5)
    if fail_open:
        options.update(IGNORE_EXCEPTIONS=True, LOG_IGNORED_EXCEPTIONS=True)
    cache = build_cache(location, {"OPTIONS": options})
    text = secret_sweep(cache, calls_of(cache))
    if fail_open:
        assert caplog.records, "LOG_IGNORED_EXCEPTIONS logged nothing"
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s %(exc_info)s")
        text += "\n".join(formatter.format(r) + repr(r.args) for r in caplog.records)
    else:
        assert "Traceback" in text, "the calls should have failed"
    assert_no_secret(text)


# -- the signing key ---------------------------------------------------------------------------


@redoxide_only
def test_signing_key_is_not_in_reprs(make_cache: Callable[..., Any]) -> None:
    cache = make_cache(OPTIONS={"SIGN_VALUES": True, "SIGNING_KEY": SIGNING_KEY})
    cache.set("k", "v")
    texts = [repr(cache), repr(cache._config), repr(cache._serializer)]
    texts += [f"{name}={value!r}" for name, value in vars(cache).items()]
    for text in texts:
        assert SIGNING_KEY not in text, text
