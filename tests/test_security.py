"""Security: signed values (SIGN_VALUES), ACL users, and secrets that never leak.

Signed values: a value planted by someone who can write to Redis but lacks the key is refused
before it reaches pickle (the planted pickles here would create a directory when unpickled:
each test checks that it did not, and one checks that it would have without signing).
ACL: users with a password, with and without a command's permission. Secrets: passwords
searched for in reprs, errors, tracebacks and log records. TLS is in test_tls.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import secrets
import traceback
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import build_cache, is_redoxide
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redis_server import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide options")

from redoxide.compressors import decompress_any  # noqa: E402
from redoxide.exceptions import (  # noqa: E402
    ConnectionInterrupted,
    ResponseError,
    SerializationError,
)
from redoxide.signing import MAGIC  # noqa: E402

SECRET = "Pw-" + secrets.token_hex(12)
WRONG_SECRET = "Wrong-" + secrets.token_hex(12)
SIGNING_KEY = "Sk-" + secrets.token_hex(16)
SIGNED = {"SIGN_VALUES": True}


# -- signed values -----------------------------------------------------------------------------


class Exploit:
    """Unpickling this runs os.mkdir(path): the side effect the tests look for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


def planted(path: Path) -> dict[str, bytes]:
    """Return what an attacker could SET: a pickle that runs code, bare and compressed."""
    payload = pickle.dumps(Exploit(path))
    from redoxide.compressors import Lz4Compressor

    return {
        "pickle": payload,
        "zlib": zlib.compress(payload),
        "lz4": Lz4Compressor(min_length=0).compress(payload),
    }


SERIALIZERS = [
    "redoxide.serializers.PickleSerializer",
    "redoxide.serializers.JSONSerializer",
    "redoxide.serializers.MsgPackSerializer",
]
COMPRESSORS = [
    None,
    "redoxide.compressors.Lz4Compressor",
    "redoxide.compressors.ZstdCompressor",
    "redoxide.compressors.ZlibCompressor",
]


@pytest.mark.parametrize("compressor", COMPRESSORS, ids=lambda c: (c or "none").split(".")[-1])
@pytest.mark.parametrize("serializer", SERIALIZERS, ids=lambda s: s.split(".")[-1])
def test_signed_values_round_trip(
    make_cache: Callable[..., Any], redis_client: Any, serializer: str, compressor: str | None
) -> None:
    options: dict[str, Any] = {**SIGNED, "SERIALIZER": serializer, "COMPRESS_MIN_LENGTH": 0}
    if compressor:
        options["COMPRESSOR"] = compressor
    cache = make_cache(OPTIONS=options)
    value = {"name": "x" * 300, "items": [1, 2.5, "three", None, True]}
    cache.set("k", value)
    cache.set_many({"a": [1, "a"], "b": "text", "n": 7})
    raw = redis_client.get(":1:k")
    if compressor:
        assert raw[:4] != MAGIC, "compression should wrap the signed bytes"
    assert decompress_any(raw)[:4] == MAGIC
    assert redis_client.get(":1:n") == b"7"  # ints stay raw
    assert cache.get("k") == value
    assert cache.get_many(["k", "a", "b", "n", "missing"]) == {
        "k": value,
        "a": [1, "a"],
        "b": "text",
        "n": 7,
    }

    async def async_twins() -> None:
        await cache.aset("k2", value)
        assert await cache.aget("k2") == value
        assert await cache.aget_many(["k", "b"]) == {"k": value, "b": "text"}
        assert await cache.aget_or_set("k3", lambda: ["computed"]) == ["computed"]

    asyncio.run(async_twins())
    assert cache.get("k3") == ["computed"]
    assert decompress_any(redis_client.get(":1:k3"))[:4] == MAGIC


def test_signature_is_standard_hmac_sha256(
    make_cache: Callable[..., Any], redis_client: Any
) -> None:
    """The stored tag is HMAC-SHA256 under the derived key: checkable with the stdlib."""
    import hashlib
    import hmac

    from redoxide.signing import derive_key

    make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": SIGNING_KEY}).set("k", {"v": 1})
    raw = redis_client.get(":1:k")
    tag, payload = raw[len(MAGIC) : len(MAGIC) + 32], raw[len(MAGIC) + 32 :]
    assert tag == hmac.new(derive_key(SIGNING_KEY), payload, hashlib.sha256).digest()
    assert pickle.loads(payload) == {"v": 1}


def test_planted_pickle_runs_code_without_signing(
    make_cache: Callable[..., Any], redis_client: Any, tmp_path: Path
) -> None:
    """The control for the tests below: the planted value really is an exploit."""
    marker = tmp_path / "pwned"
    redis_client.set(":1:k", planted(marker)["pickle"])
    make_cache().get("k")
    assert marker.is_dir()


@pytest.mark.parametrize("form", ["pickle", "zlib", "lz4"])
def test_planted_pickle_is_rejected_not_executed(
    make_cache: Callable[..., Any], redis_client: Any, tmp_path: Path, form: str
) -> None:
    marker = tmp_path / "pwned"
    redis_client.set(":1:k", planted(marker)[form])
    redis_client.set(":1:ok", b"1")
    cache = make_cache(OPTIONS=SIGNED)
    calls: list[Callable[[], Any]] = [
        lambda: cache.get("k"),
        lambda: cache.get_many(["ok", "k"]),
        lambda: cache.get_or_set("k", "default"),
        lambda: asyncio.run(cache.aget("k")),
        lambda: asyncio.run(cache.aget_many(["ok", "k"])),
        lambda: asyncio.run(cache.aget_or_set("k", "default")),
    ]
    for call in calls:
        with pytest.raises(SerializationError) as info:
            call()
        assert "'k'" in str(info.value)
        assert "signed" in str(info.value)
    assert not marker.exists(), "the planted pickle was unpickled"


def test_planted_pickle_is_a_miss_under_fail_open(
    make_cache: Callable[..., Any], redis_client: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    redis_client.set(":1:k", planted(marker)["pickle"])
    cache = make_cache(OPTIONS={**SIGNED, "IGNORE_EXCEPTIONS": True})
    assert cache.get("k", "miss") == "miss"
    assert cache.get_many(["k"]) == {}
    assert asyncio.run(cache.aget("k", "miss")) == "miss"
    assert not marker.exists()


@pytest.mark.parametrize("where", ["magic", "tag", "payload", "truncated"])
def test_tampered_value_is_rejected(
    make_cache: Callable[..., Any], redis_client: Any, where: str
) -> None:
    cache = make_cache(OPTIONS=SIGNED)
    cache.set("k", {"role": "user"})
    raw = bytearray(redis_client.get(":1:k"))
    if where == "truncated":
        raw = raw[:20]
    else:
        index = {"magic": 1, "tag": len(MAGIC) + 5, "payload": len(raw) - 3}[where]
        raw[index] ^= 0x01
    redis_client.set(":1:k", bytes(raw))
    with pytest.raises(SerializationError, match="'k'"):
        cache.get("k")
    with pytest.raises(SerializationError, match="'k'"):
        asyncio.run(cache.aget("k"))


def test_value_signed_with_another_key_is_rejected(make_cache: Callable[..., Any]) -> None:
    writer = make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": SIGNING_KEY})
    reader = make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": "another-" + SIGNING_KEY})
    writer.set("k", "value")
    assert writer.get("k") == "value"
    with pytest.raises(SerializationError, match="signature"):
        reader.get("k")


def test_signing_key_list_rotates_keys(make_cache: Callable[..., Any]) -> None:
    old = make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": "old-key"})
    new = make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": ["new-key", "old-key"]})
    old.set("written-before", "old value")
    new.set("written-after", "new value")
    assert new.get_many(["written-before", "written-after"]) == {
        "written-before": "old value",
        "written-after": "new value",
    }
    with pytest.raises(SerializationError):
        old.get("written-after")  # signed with the new key, which old does not know


def test_default_key_is_secret_key_and_fallbacks_verify(make_cache: Callable[..., Any]) -> None:
    with override_settings(SECRET_KEY="first-secret"):
        make_cache(OPTIONS=SIGNED).set("k", "value")
    with override_settings(SECRET_KEY="second-secret", SECRET_KEY_FALLBACKS=["first-secret"]):
        assert make_cache(OPTIONS=SIGNED).get("k") == "value"
    no_fallback = override_settings(SECRET_KEY="second-secret", SECRET_KEY_FALLBACKS=[])
    with no_fallback, pytest.raises(SerializationError):
        make_cache(OPTIONS=SIGNED).get("k")
    # SIGNING_KEY replaces SECRET_KEY (and its fallbacks).
    with override_settings(SECRET_KEY="first-secret"), pytest.raises(SerializationError):
        make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": SIGNING_KEY}).get("k")


def test_unsigned_values_are_rejected_once_signing_is_on(
    make_cache: Callable[..., Any],
) -> None:
    make_cache().set("k", {"written": "unsigned"})
    with pytest.raises(SerializationError, match="not signed"):
        make_cache(OPTIONS=SIGNED).get("k")


def test_ints_stay_raw_and_count_with_signing(
    make_cache: Callable[..., Any], redis_client: Any
) -> None:
    cache = make_cache(OPTIONS=SIGNED)
    cache.set("n", 5)
    assert cache.incr("n") == 6
    assert asyncio.run(cache.aincr("n", 10)) == 16
    assert cache.decr("n") == 15
    assert redis_client.get(":1:n") == b"15"
    assert cache.get("n") == 15
    # A float is not a raw int: incr reads, verifies, adds and writes it back signed.
    cache.set("f", 1.5)
    assert cache.incr("f") == 2.5
    assert decompress_any(redis_client.get(":1:f"))[:4] == MAGIC
    # Documented: raw digits are accepted unsigned, so a planted int reads as an int.
    redis_client.set(":1:planted", b"42")
    assert cache.get("planted") == 42


def test_signing_key_is_not_in_reprs(make_cache: Callable[..., Any]) -> None:
    cache = make_cache(OPTIONS={**SIGNED, "SIGNING_KEY": SIGNING_KEY})
    cache.set("k", "v")
    texts = [repr(cache), repr(cache._config), repr(cache._serializer)]
    texts += [f"{name}={value!r}" for name, value in vars(cache).items()]
    for text in texts:
        assert SIGNING_KEY not in text, text


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"SIGN_VALUES": "yes"}, "SIGN_VALUES"),
        ({"SIGN_VALUES": False, "SIGNING_KEY": "k"}, "SIGNING_KEY"),
        ({"SIGNING_KEY": "k"}, "SIGNING_KEY"),
        ({"SIGN_VALUES": True, "SIGNING_KEY": ""}, "SIGNING_KEY"),
        ({"SIGN_VALUES": True, "SIGNING_KEY": []}, "SIGNING_KEY"),
        ({"SIGN_VALUES": True, "SIGNING_KEY": ["k", 3]}, "SIGNING_KEY"),
    ],
)
def test_invalid_signing_options_are_rejected(
    redis_server: RedisServer, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=named):
        build_cache(redis_server.url, {"OPTIONS": options})


def test_signing_needs_a_secret_key(redis_server: RedisServer) -> None:
    with override_settings(SECRET_KEY=""), pytest.raises(ImproperlyConfigured, match="SECRET_KEY"):
        build_cache(redis_server.url, {"OPTIONS": SIGNED})


# -- ACL users ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """A server whose default user needs SECRET; alice may do anything, bob may not FLUSHDB
    and may only touch keys under allowed:*."""
    with RedisServer(password=SECRET) as server:
        server.cli("ACL", "SETUSER", "alice", "on", f">{SECRET}", "~*", "+@all")
        server.cli("ACL", "SETUSER", "bob", "on", f">{SECRET}", "~allowed:*", "+@all", "-flushdb")
        yield server


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


# -- secrets never leak ----------------------------------------------------------------------------


def all_text_of(error: BaseException) -> str:
    """Return everything an error shows: str, repr, args, and the formatted chain."""
    return "\n".join(
        [str(error), repr(error), repr(error.args), "".join(traceback.format_exception(error))]
    )


def assert_no_secret(text: str) -> None:
    assert SECRET not in text, text
    assert WRONG_SECRET not in text, text


@pytest.mark.parametrize(
    "location",
    [
        f"redis://u:pa/{SECRET}@127.0.0.1:6379/0",
        f"redis://u:{SECRET}/x@127.0.0.1:6379/0",
        f"redis://u:{SECRET}?x@127.0.0.1:6379/0",
        f"redis://u:{SECRET[:6]}#{SECRET[6:]}@127.0.0.1:6379/0",
        f"redis://127.0.0.1:6379/0?password={SECRET}",
        f"redis://127.0.0.1:6379/0?db=1&password={SECRET}",
        f"rediss://u:{SECRET}@127.0.0.1:6379/0?ssl_keyfile=x",
    ],
    ids=["slash_before", "slash_after", "question", "hash", "query", "query_db", "query_tls"],
)
def test_password_with_unescaped_characters_not_in_errors(location: str) -> None:
    """Regression: the password was shown when it held "/" or "?", or sat in the query."""
    with pytest.raises(ImproperlyConfigured) as info:
        build_cache(location, {}).get("k")
    text = all_text_of(info.value)
    assert SECRET not in text, text
    assert SECRET[:6] not in text and SECRET[6:] not in text, text


def secret_sweep(cache: Any, calls: list[Callable[[], Any]]) -> str:
    """Run each call, collecting repr/str of the cache and its client, errors and tracebacks."""
    texts = [repr(cache), str(cache), repr(cache._client), str(cache._client)]
    texts += [repr(cache._config), repr(cache._config.display_servers)]
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
