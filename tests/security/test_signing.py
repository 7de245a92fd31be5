"""Signed values (SIGN_VALUES): a value planted by someone who can write to Redis but lacks the
key is refused before it reaches pickle (the planted pickles here would create a directory
when unpickled: each test checks that it did not, and one checks that it would have without
signing). ACL users are in test_acl.py, secrets that never leak in test_secrecy.py, TLS in
test_tls.py.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import secrets
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from support.backend import build_cache, is_redoxide
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide options")

from redoxide.compressors import decompress_any  # noqa: E402
from redoxide.exceptions import (  # noqa: E402
    SerializationError,
)
from redoxide.signing import MAGIC  # noqa: E402

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
        build_cache(redis_server.url, {"OPTIONS": options}).get("k")


def test_signing_needs_a_secret_key(redis_server: RedisServer) -> None:
    with override_settings(SECRET_KEY=""), pytest.raises(ImproperlyConfigured, match="SECRET_KEY"):
        build_cache(redis_server.url, {"OPTIONS": SIGNED}).get("k")


# -- secrets never leak ----------------------------------------------------------------------------
