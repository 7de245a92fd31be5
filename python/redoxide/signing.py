"""Signed values (``OPTIONS["SIGN_VALUES"] = True``): an HMAC that is checked before unpickling.

Anyone who can write to the Redis server can plant a pickle that runs code in every worker that
reads it. With SIGN_VALUES, each stored value carries an HMAC-SHA256 of its serialized bytes,
keyed from ``settings.SECRET_KEY`` (or ``SIGNING_KEY``); a read checks the HMAC first and
refuses a value without a valid one, so a planted value is never handed to the deserializer.

Stored format: ``b"\\x00RX1"``, the 32-byte HMAC, then the serialized bytes; compression (when
on) is applied to the whole, after signing. The first byte, 0x00, is never the first byte of a
pickle (0x80), of a raw int (a digit or "-"), or of any compressor's magic bytes, so a read
tells a signed value from the others without guessing.

Ints (not bools) stay raw digits and unsigned, so INCR and DECR keep working on the server:
someone who can write to Redis can therefore replace a value with an int (and no code runs
that way). A signature proves that a holder of the key wrote the bytes, not which cache key
they were written for: copying one signed value over another key is not detected.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Any

from redoxide._values import as_bytes
from redoxide.exceptions import ConfigurationError, SerializationError
from redoxide.serializers import PickleSerializer, Serializer

__all__ = ["MAGIC", "SignedSerializer", "signed_serializer"]

#: First bytes of every signed value (format version 1).
MAGIC = b"\x00RX1"
_TAG_SIZE = hashlib.sha256().digest_size
_HEADER = len(MAGIC) + _TAG_SIZE
# Keys are derived as django.utils.crypto.salted_hmac derives them, with our own salt, so a
# signature made here is never valid for any other use of SECRET_KEY (and the other way round).
_SALT = b"redoxide.signing.SignedSerializer.v1"


def derive_key(secret: str | bytes) -> bytes:
    """Return the HMAC key for a secret (SECRET_KEY or SIGNING_KEY)."""
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.sha256(_SALT + secret).digest()


class _Hmac:
    """HMAC-SHA256 under one key (RFC 2104), with the keyed inner and outer hash states made
    once: signing a small value then costs two SHA-256 copies, under half of hmac.digest()."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        block = key.ljust(hashlib.sha256().block_size, b"\0")  # keys here are 32 bytes
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def tag(self, data: bytes | memoryview) -> bytes:
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


class SignedSerializer:
    """Wrap a serializer so that what it writes is signed and what it reads is verified first.

    `keys`: the secrets, the first of which signs; all of them verify, so a key can be rotated
    by putting the new one first and keeping the old one until old values have expired.
    """

    __slots__ = ("_keys", "_sign_key", "serializer")

    def __init__(self, serializer: Serializer, keys: Iterable[str | bytes]) -> None:
        self.serializer = serializer
        self._keys = tuple(_Hmac(derive_key(k)) for k in keys)
        if not self._keys:
            raise ConfigurationError("redoxide: SignedSerializer needs at least one key")
        self._sign_key = self._keys[0]

    def __repr__(self) -> str:
        # Never the keys.
        return f"<SignedSerializer of {self.serializer!r}>"

    def dumps(self, value: Any) -> bytes:
        data = self.serializer.dumps(value)
        if type(data) is not bytes:
            data = as_bytes(data, "SERIALIZER", self.serializer)
        return MAGIC + self._sign_key.tag(data) + data

    def loads(self, data: bytes) -> Any:
        if data[: len(MAGIC)] != MAGIC or len(data) < _HEADER:
            raise SerializationError(
                "the value is not signed (SIGN_VALUES is on): refused without deserializing it"
            )
        tag = data[len(MAGIC) : _HEADER]
        payload = memoryview(data)[_HEADER:]
        for key in self._keys:
            if hmac.compare_digest(key.tag(payload), tag):
                return self.serializer.loads(data[_HEADER:])
        raise SerializationError(
            "the value's signature does not match the signing key (SIGN_VALUES): refused "
            "without deserializing it"
        )


def _secrets(option: str, value: Any) -> tuple[str | bytes, ...]:
    items = [value] if isinstance(value, (str, bytes)) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigurationError(
            f"redoxide: OPTIONS[{option!r}] must be a string, bytes, or a non-empty list of "
            "them (the first signs, all verify)"
        )
    for item in items:
        if not isinstance(item, (str, bytes)) or not item:
            raise ConfigurationError(
                f"redoxide: OPTIONS[{option!r}] entries must be non-empty strings or bytes, "
                f"not {type(item).__name__}"
            )
    return tuple(items)


def signed_serializer(
    serializer: Serializer | None,
    sign: Any,
    key: Any,
    names: dict[str, str],
) -> Serializer | None:
    """Return `serializer` wrapped in a SignedSerializer when SIGN_VALUES is on, else None.

    `key` is SIGNING_KEY (None: settings.SECRET_KEY, then SECRET_KEY_FALLBACKS); `names` maps
    canonical option names to the spelling the user gave, for error messages.
    """
    sign_name = names.get("sign_values", "SIGN_VALUES")
    if not isinstance(sign, bool):
        raise ConfigurationError(
            f"redoxide: OPTIONS[{sign_name!r}] must be True or False, not {sign!r}"
        )
    if not sign:
        if key is not None:
            raise ConfigurationError(
                f"redoxide: OPTIONS[{names.get('signing_key', 'SIGNING_KEY')!r}] is set but "
                f"{sign_name} is not True: values would not be signed"
            )
        return None
    if key is not None:
        keys = _secrets(names.get("signing_key", "SIGNING_KEY"), key)
    else:
        from django.conf import settings

        secret = getattr(settings, "SECRET_KEY", None)
        if not secret or not isinstance(secret, (str, bytes)):
            raise ConfigurationError(
                f"redoxide: {sign_name} needs settings.SECRET_KEY or OPTIONS['SIGNING_KEY']"
            )
        fallbacks = getattr(settings, "SECRET_KEY_FALLBACKS", None) or []
        keys = (secret, *(k for k in fallbacks if k and isinstance(k, (str, bytes))))
    return SignedSerializer(serializer if serializer is not None else PickleSerializer(), keys)
