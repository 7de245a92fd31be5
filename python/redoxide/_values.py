"""Keys, timeouts and values as Django and django-redis store them (a mixin for RedisCache).

Keys are ``KEY_PREFIX:VERSION:key`` (or the user's KEY_FUNCTION); timeouts follow Django's
rules, kept to the millisecond; ints (not bools) are stored as raw digits, everything else
serialized, then compressed above a threshold. With redoxide's own serializers and compressors a
read recognises compressed data by its magic bytes, whatever COMPRESSOR is now; with a user's
serializer or compressor it asks them first (see _decode_custom).

Raw digits are always read as an int, as Django's builtin and django-redis read them, so a
user's codec whose output for another value is raw digits (a str "0042" written as it is)
would have that value read back as something else; so would output that a COMPRESSOR's
is_compressed() claims. Such a value is stored compressed, even below the threshold, when
there is a compressor; otherwise the write raises EncodingError (see _stored_custom), unless
the user's codec itself reads those digits back as the same int.
"""

from __future__ import annotations

import itertools
import math
import pickle
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django.core.cache.backends.base import (
    DEFAULT_TIMEOUT,
    MEMCACHE_MAX_KEY_LENGTH,
    default_key_func,
)

from redoxide import _redoxide
from redoxide.compressors import MAX_VALUE_SIZE, decompress_any, looks_compressed
from redoxide.exceptions import EncodingError, SerializationError

if TYPE_CHECKING:
    from redoxide.compressors import BaseCompressor
    from redoxide.serializers import Serializer

__all__ = ["ValuesMixin", "as_bytes"]

# Keys Django warns about (memcached-unsafe): control characters, space, DEL.
_UNSAFE_KEY = re.compile(r"[\x00-\x20\x7f]")
# The longest expiry, in ms, that Redis can add to its clock without overflowing.
_MAX_TTL_MS = 2**62


def _is_raw_int(data: bytes) -> bool:
    """Whether a read takes these stored bytes for an int (see ValuesMixin._decode)."""
    return data.isdigit() or (data[:1] == b"-" and data[1:].isdigit())


def as_bytes(data: Any, role: str, codec: Any) -> bytes:
    """A codec's output as bytes: str in UTF-8, bytes-like objects copied, nothing else."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise EncodingError(
        f"{role} {type(codec).__name__} returned {type(data).__name__}, not bytes or str; "
        "nothing was written"
    )


def _too_large(key: Any, size: int) -> ValueError:
    return ValueError(
        f"the value for key {key!r} is {size:,} bytes once encoded, over the {MAX_VALUE_SIZE:,} "
        "bytes Redis accepts in one value (proto-max-bulk-len); nothing was written"
    )


class ValuesMixin:
    """Key making, timeouts, encoding and decoding."""

    if TYPE_CHECKING:  # what RedisCache and Django's BaseCache provide
        default_timeout: float | None
        key_func: Callable[..., str]
        _serializer: Serializer
        _compressor: BaseCompressor
        _fast_pickle: bool
        _fast_loads: Callable[[bytes], Any]
        _fast_heads: frozenset[bytes]
        _fast_head_bytes: bytes
        _protocol: int
        _compress: bool
        _compress_min: int
        _known_codecs: bool
        _compressor_claims: bool
        _failed: Callable[[BaseException, Any], Any]

        def validate_key(self, key: str) -> None: ...

    #: A user's SERIALIZER or COMPRESSOR: a write checks that what it wrote reads back as the
    #: value (_checked). Set by RedisCache; redoxide's own codecs need no check.
    _check_encoded: bool = False

    # -- keys ------------------------------------------------------------------------------

    # KEY_PREFIX and VERSION as properties: setting either (Django's __init__ does) also sets
    # `_base`, the prefix of every key made with the default version and key function, so the
    # hot path concatenates one string instead of formatting three.
    _key_prefix: str = ""
    _version: int = 1
    _base: str = ":1:"

    @property
    def key_prefix(self) -> str:
        return self._key_prefix

    @key_prefix.setter
    def key_prefix(self, value: str) -> None:
        self._key_prefix = value
        self._base = f"{value}:{self._version}:"

    @property
    def version(self) -> int:
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = value
        self._base = f"{self._key_prefix}:{value}:"

    def _key(self, key: Any, version: int | None) -> str:
        if self.key_func is not default_key_func:
            made = self.key_func(
                key, self._key_prefix, self._version if version is None else version
            )
        elif version is None and type(key) is str:
            made = self._base + key
        else:
            made = f"{self._key_prefix}:{self._version if version is None else version}:{key}"
        # Django's memcached-safety warnings (a control character, a space, DEL, or too long):
        # isprintable and a search for a space rule out all but the rarest keys in C, before
        # the regex search that decides.
        if len(made) > MEMCACHE_MAX_KEY_LENGTH or (
            (not made.isprintable() or " " in made) and _UNSAFE_KEY.search(made)
        ):
            self.validate_key(made)
        return made

    def _keys(self, keys: Iterable[Any], version: int | None) -> list[str]:
        """Make many keys at once (the per-key work of get_many and friends)."""
        if version is None:
            version = self._version
        if self.key_func is default_key_func:
            base = self._base if version == self._version else f"{self._key_prefix}:{version}:"
            made = [base + k if type(k) is str else f"{base}{k}" for k in keys]
        else:
            made = [self.key_func(k, self._key_prefix, version) for k in keys]
        # One check over all the keys at once (an unsafe character is one character, so joining
        # finds exactly the keys' own), and lengths only when together they could be too long:
        # a third of the per-key cost of a 10-key call. The slow loop finds which keys to warn.
        joined = "".join(made)
        if ((not joined.isprintable() or " " in joined) and _UNSAFE_KEY.search(joined)) or (
            len(joined) > MEMCACHE_MAX_KEY_LENGTH and max(map(len, made)) > MEMCACHE_MAX_KEY_LENGTH
        ):
            for m in made:
                if len(m) > MEMCACHE_MAX_KEY_LENGTH or _UNSAFE_KEY.search(m):
                    self.validate_key(m)
        return made

    def make_and_validate_key(self, key: Any, version: int | None = None) -> str:
        return self._key(key, version)

    # -- timeouts --------------------------------------------------------------------------

    def _ttl_ms(self, timeout: Any) -> int | None:
        """Return the expiry in ms: None never expires, 0 means expire now."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
        if not math.isfinite(timeout):
            raise ValueError(f"timeout must be finite, not {timeout!r}")
        if timeout <= 0:
            return 0
        ms = max(1, round(timeout * 1000))
        if ms > _MAX_TTL_MS:
            raise ValueError(
                f"timeout must be at most {_MAX_TTL_MS // 1000} seconds (or None for no expiry), "
                f"not {timeout!r}"
            )
        return ms

    def get_backend_timeout(self, timeout: Any = DEFAULT_TIMEOUT) -> float | None:
        """Return the timeout in seconds as the server will apply it (ms resolution)."""
        ms = self._ttl_ms(timeout)
        return None if ms is None else ms / 1000

    # -- values ----------------------------------------------------------------------------

    def _encode(self, value: Any, key: Any = None) -> bytes:
        # Ints (not bools) are stored as raw digits, as Django's builtin and django-redis do,
        # so INCR/DECR can work on them atomically on the server.
        if type(value) is int:
            return b"%d" % value
        if self._fast_pickle:
            data = pickle.dumps(value, self._protocol)
        else:
            data = self._serializer.dumps(value)
            if self._check_encoded:
                return self._encode_custom(value, data, key)
        if self._compress:
            if self._check_encoded:  # a user's compressor
                return self._encode_custom(value, data, key)
            if len(data) >= self._compress_min:
                data = self._compressor.compress(data)
        if len(data) > MAX_VALUE_SIZE:
            raise _too_large(key, len(data))
        return data

    def _encode_custom(self, value: Any, dumped: Any, key: Any) -> bytes:
        """The rest of _encode for what a user's serializer returned."""
        data = self._stored_custom(value, dumped, key)
        if len(data) > MAX_VALUE_SIZE:
            raise _too_large(key, len(data))
        return data

    def _stored_custom(self, value: Any, dumped: Any, key: Any) -> bytes:
        """What to store for `value`, which a serializer beside a user's codec wrote as
        `dumped`: compressed from the threshold on, and below it too where a read of the bytes
        as written would take them for something else (an int, or the compressor's own data,
        by its magic bytes); EncodingError if even so a read would not give the value back."""
        data = dumped if type(dumped) is bytes else as_bytes(dumped, "SERIALIZER", self._serializer)
        if self._compress and (len(data) >= self._compress_min or self._misread(value, data)):
            data = self._compressor.compress(data)
        return self._checked(value, data, key)

    def _misread(self, value: Any, data: bytes) -> bool:
        """Whether a read of `data`, stored uncompressed, would not give `value` back because it
        takes the bytes for an int or for the compressor's data."""
        if _is_raw_int(data):
            return self._int_misread(value, data)
        return self._compressor_claims and bool(self._compressor.is_compressed(data))

    def _int_misread(self, value: Any, data: bytes) -> bool:
        """Whether raw digits, which a read takes for an int, are not what `value` reads back
        as: fine only for a value that is that int, or when the user's codec itself reads them
        as that int (JSON does)."""
        try:
            number = int(data)
        except ValueError:  # past Python's digit limit: a read of it fails as well
            return True
        if type(value) is int and value == number:  # a sorted-set member: ints serialized
            return False
        try:
            read = self._decode_custom(data)
        except Exception:
            return True
        return not (type(read) is int and read == number)

    def _checked(self, value: Any, data: Any, key: Any) -> bytes:
        """Return what a user's codec wrote for value, as bytes; raise EncodingError if a read
        would take it for an int that the value does not read back as (see _int_misread)."""
        stored: bytes = (
            data if type(data) is bytes else as_bytes(data, "COMPRESSOR", self._compressor)
        )
        if not _is_raw_int(stored) or not self._int_misread(value, stored):
            return stored
        shown = stored if len(stored) <= 40 else stored[:40] + b"..."
        where = "" if key is None else f" for key {key!r}"
        raise EncodingError(
            f"the {type(value).__name__} value{where} was encoded by SERIALIZER "
            f"{type(self._serializer).__name__} as the raw digits {shown!r}, which a read takes "
            "for an int before any serializer is asked (ints are stored raw, as Django and "
            "django-redis store them, so INCR works): it would not read back as it was. "
            "Nothing was written; make the serializer write such values in a form of its own "
            "(e.g. with a prefix), as pickle, JSON and MessagePack do, or set a COMPRESSOR "
            "(such values are then stored compressed)"
        )

    def _decode(self, data: bytes, key: Any) -> Any:
        try:
            if data[:1] in self._fast_heads:
                # Starts as only the serializer's own output does (a pickle's 0x80, say).
                return self._fast_loads(data)
            # A raw int, compressed data, or a value the fast path leaves to the serializer.
            # (A failing int() is slow: it formats an error message from the data.)
            if data.isdigit() or (data[:1] == b"-" and data[1:].isdigit()):
                return int(data)
            if self._known_codecs:
                # Compressed by any known compressor (recognised by its magic bytes), whatever
                # COMPRESSOR is now: values written before a change, or by django-redis. None
                # of redoxide's serializers writes anything that starts like those.
                data = decompress_any(data)
                if self._fast_pickle:
                    return pickle.loads(data)
                return self._serializer.loads(data)
            return self._decode_custom(data)
        except Exception as exc:
            raise SerializationError(
                f"cannot decode the value stored for key {key!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def _decode_custom(self, data: bytes) -> Any:
        """Decode with a user's COMPRESSOR or SERIALIZER: ask them, never guess first. The
        configured compressor decides whether it wrote the data (its is_compressed(), or, for a
        django-redis style one without it, whether its decompress() accepts the data); what
        it did not write, or claims but cannot read (a short value stored as written that
        merely starts like its data, as django-redis stores them), goes to the serializer as it
        is (a serializer of the user's may well write compressed bytes itself), and only if
        that fails is it read as compressed by a built-in compressor (a value written before
        COMPRESSOR changed). The first failure is the one raised: for a corrupt value, the
        compressor's."""
        first: Exception | None = None
        for reading in self._readings(data):
            try:
                return self._serializer.loads(reading())
            except Exception as exc:
                first = first or exc
        assert first is not None  # _readings yields data itself at least
        raise first

    def _readings(self, data: bytes) -> Iterator[Callable[[], bytes]]:
        """The ways to read stored bytes, most likely first (see _decode_custom)."""
        compressor = self._compressor
        if self._compressor_claims:
            if compressor.is_compressed(data):
                yield lambda: compressor.decompress(data)
        elif self._compress:
            try:
                claimed = compressor.decompress(data)
            except Exception:
                claimed = None  # not the compressor's (django-redis' CompressorError)
            if claimed is not None:
                yield lambda: claimed
        yield lambda: data
        if looks_compressed(data):
            yield lambda: decompress_any(data)

    def _encode_many(self, values: Iterable[Any], keys: Iterable[Any] = ()) -> list[bytes]:
        """Encode values; `keys`, in the same order, name a value that is too large."""
        named = itertools.chain(keys, itertools.repeat(None))
        if self._fast_pickle and not self._compress:
            dumps, protocol = pickle.dumps, self._protocol
            encoded = [b"%d" % v if type(v) is int else dumps(v, protocol) for v in values]
            if encoded and max(map(len, encoded)) > MAX_VALUE_SIZE:
                for data, key in zip(encoded, named, strict=False):
                    if len(data) > MAX_VALUE_SIZE:
                        raise _too_large(key, len(data))
            return encoded
        return [self._encode(v, k) for v, k in zip(values, named, strict=False)]

    def _decode_many(self, keys: list[Any], values: list[bytes | None]) -> dict[Any, Any]:
        # The loop in the core; what it leaves (an error) is redone below, naming the key.
        decoded = _redoxide.decode_many(
            keys, values, self._fast_loads, self._fast_head_bytes, self._decode
        )
        if decoded is not None:
            return decoded
        found = {}
        for k, v in zip(keys, values, strict=True):
            if v is None:
                continue
            try:
                found[k] = self._decode(v, k)
            except SerializationError as exc:
                # Under fail-open, an undecodable value is a miss for its key alone (counted
                # and logged like any ignored error); otherwise it raises, naming the key.
                self._failed(exc, None)
        return found
