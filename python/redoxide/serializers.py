"""Serializers turn values into the bytes stored in Redis and back.

Every serializer stores ints (not bools) as raw digits, as Django's builtin RedisCache and
django-redis do, so INCR and DECR work on them atomically on the server. The cache does that
before a serializer is called, so serializers never see a plain int at the top level.

Each serializer reads and writes what django-redis' serializer of the same name does (and
Django's builtin, for pickle): the same pickles, the same MessagePack bytes, the same JSON
(compact when orjson writes it), so a cache can move between them.
"""

from __future__ import annotations

import importlib
import json
import pickle
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

from django.core.serializers.json import DjangoJSONEncoder

from redoxide.exceptions import ConfigurationError

__all__ = [
    "BaseSerializer",
    "JSONSerializer",
    "JsonSerializer",
    "MSGPackSerializer",
    "MsgPackSerializer",
    "PickleSerializer",
    "Serializer",
]


def _optional(name: str) -> ModuleType | None:
    """Return the named module, or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _library(serializer: str, library: str | None, choices: tuple[str, str]) -> ModuleType:
    """Return the module `library` names, or the first of `choices` that is installed."""
    if library is None:
        for name in choices:
            module = _optional(name)
            if module is not None:
                return module
        raise ConfigurationError(
            f"redoxide: {serializer} needs the {choices[0]} or {choices[1]} package "
            f"(pip install {choices[0]})"
        )
    if library not in choices:
        raise ConfigurationError(
            f"redoxide: {serializer} library must be one of {', '.join(choices)}, not {library!r}"
        )
    module = _optional(library)
    if module is None:
        raise ConfigurationError(
            f"redoxide: {serializer} library {library!r} is not installed (pip install {library})"
        )
    return module


class Serializer(Protocol):
    """What redoxide needs from a serializer.

    `dumps` may return bytes, a str (stored as UTF-8), a bytearray or a memoryview. Raw ASCII
    digits (optionally after "-") are read as an int before `loads` is asked, so a value
    that is not an int must not be written as them unless `loads` reads them as that same int:
    the cache refuses such a write with EncodingError (docs/options.md, "Raw digits are ints").
    """

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class BaseSerializer:
    """Convenience base: subclasses implement `dumps` and `loads`."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def dumps(self, value: Any) -> bytes:
        raise NotImplementedError

    def loads(self, data: bytes) -> Any:
        raise NotImplementedError


class PickleSerializer(BaseSerializer):
    """Pickle, the default: any picklable value, compatible with Django and django-redis.

    Only unpickle data from a Redis you trust: a value planted in Redis can run code when read.
    """

    def __init__(self, protocol: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.protocol = pickle.HIGHEST_PROTOCOL if protocol is None else protocol

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, self.protocol)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


class JSONSerializer(BaseSerializer):
    """JSON in UTF-8, read and written like django-redis' JSONSerializer.

    Values are what JSON can hold: dicts with string keys (other keys become strings), lists
    (tuples become lists), strings, numbers, booleans and None. Dates, times, Decimals and UUIDs
    are written as strings by `encoder_class` (Django's DjangoJSONEncoder) and read back as
    strings. Reading JSON cannot run code, so this is safe on a Redis shared with others.

    orjson is used when installed (``library="json"`` forces the standard library). It writes
    the same JSON, with two differences standard JSON readers share: NaN and infinities are
    written as null, and integers beyond 64 bits nested in a value are read back as floats.
    """

    #: Turns values JSON has no type for into JSON (a ``json.JSONEncoder`` subclass).
    encoder_class: type[json.JSONEncoder] = DjangoJSONEncoder

    def __init__(self, library: str | None = None, **options: Any) -> None:
        super().__init__(**options)
        if library is None:
            self._orjson = _optional("orjson")
        else:
            module = _library(type(self).__name__, library, ("orjson", "json"))
            self._orjson = module if module.__name__ == "orjson" else None
        self.library = "json" if self._orjson is None else "orjson"
        if self._orjson is not None:
            # Dates go through encoder_class too, so both libraries write the same strings.
            self._option = self._orjson.OPT_NON_STR_KEYS | self._orjson.OPT_PASSTHROUGH_DATETIME
            self._default = self.encoder_class().default

    def dumps(self, value: Any) -> bytes:
        if self._orjson is not None:
            try:
                data: bytes = self._orjson.dumps(value, default=self._default, option=self._option)
                return data
            except TypeError:
                pass  # Beyond orjson (ints over 64 bits, lone surrogates); the stdlib may cope.
        return json.dumps(value, cls=self.encoder_class).encode()

    def loads(self, data: bytes) -> Any:
        if self._orjson is not None:
            try:
                return self._orjson.loads(data)
            except ValueError:
                pass  # NaN, Infinity and lone surrogates are JSON only the stdlib reads.
        return json.loads(data)


# First bytes of the MessagePack values that are one byte long: positive and negative fixints,
# the empty map, array and string, nil, false and true. Pickles (0x80) and JSON (ASCII) start
# with one of these, so a longer value starting with one was written by something else.
_ONE_BYTE_VALUES = frozenset(
    [*range(0x80), 0x80, 0x90, 0xA0, 0xC0, 0xC2, 0xC3, *range(0xE0, 0x100)]
)


def _fast_unpack(module: ModuleType, ormsgpack: bool) -> Callable[[bytes], Any]:
    """Return loads for a value longer than one byte: the library's call and nothing else."""
    # A closure over locals costs fewer instructions than functools.partial with keywords.
    unpackb = module.unpackb
    if ormsgpack:
        option = module.OPT_NON_STR_KEYS
        return lambda data: unpackb(data, option=option)
    return lambda data: unpackb(data, raw=False, strict_map_key=False)


def _enum_value(value: Any) -> Any:
    """Write enums that are ints, floats or strings as msgpack does: as their plain value."""
    for base in (int, float, str):
        if isinstance(value, base):
            return str.__str__(value) if base is str else base(value)
    raise TypeError(f"can not serialize {type(value).__name__!r} object")


class MsgPackSerializer(BaseSerializer):
    """MessagePack, read and written like django-redis' MSGPackSerializer.

    Values are what MessagePack can hold: dicts, lists (tuples become lists), str, bytes, ints
    up to 64 bits, floats, booleans and None; anything else raises TypeError when set. Strings
    and bytes stay apart (msgpack's ``use_bin_type=True``, ``raw=False``). Reading MessagePack
    cannot run code, so this is safe on a Redis shared with others.

    ormsgpack (Rust, about twice as fast as msgpack) is used when installed, otherwise
    msgpack; ``library="msgpack"`` or ``"ormsgpack"`` chooses. Both write the same bytes for
    the same value.
    """

    def __init__(self, library: str | None = None, **options: Any) -> None:
        super().__init__(**options)
        module = _library(type(self).__name__, library, ("ormsgpack", "msgpack"))
        self.library: str = module.__name__
        self._ormsgpack = self.library == "ormsgpack"
        self._packb: Callable[..., bytes] = module.packb
        self._unpackb: Callable[..., Any] = module.unpackb
        if self._ormsgpack:
            self._unpack_option: int = module.OPT_NON_STR_KEYS
            # Raise TypeError for what msgpack cannot write, rather than writing a string that
            # would read back as a string: the same behaviour whichever library is installed.
            self._pack_option: int = (
                module.OPT_NON_STR_KEYS
                | module.OPT_PASSTHROUGH_DATETIME
                | module.OPT_PASSTHROUGH_UUID
                | module.OPT_PASSTHROUGH_DATACLASS
                | module.OPT_PASSTHROUGH_ENUM
            )

        self._fast_loads: Callable[[bytes], Any] = _fast_unpack(module, self._ormsgpack)

    def dumps(self, value: Any) -> bytes:
        if self._ormsgpack:
            data = self._packb(value, option=self._pack_option, default=_enum_value)
        else:
            data = self._packb(value, use_bin_type=True)
        if len(data) == 1 and 0x30 <= data[0] <= 0x39:
            # An int subclass (an IntEnum) from 48 to 57 packs to one ASCII digit, which reads
            # back as a raw int; the two-byte uint8 form of the same number does not.
            return b"\xcc" + data
        return data

    def loads(self, data: bytes) -> Any:
        if self._ormsgpack:
            # ormsgpack ignores bytes after the value, where msgpack refuses them.
            if len(data) > 1 and data[0] in _ONE_BYTE_VALUES:
                raise ValueError(f"not MessagePack: {len(data) - 1} bytes after a one-byte value")
            return self._unpackb(data, option=self._unpack_option)
        return self._unpackb(data, raw=False, strict_map_key=False)


# First bytes of MessagePack values longer than one byte: maps, arrays and strings, bin, ext,
# floats and sized ints. None of them is an ASCII digit, a "-" or a compression magic, so a
# value starting with one is MessagePack or nothing, and goes straight to the library.
_MSGPACK_HEADS = frozenset(
    bytes([b]) for b in range(0x81, 0xE0) if b not in _ONE_BYTE_VALUES and b != 0xC1
)
# JSON objects, arrays and strings: "{", "[" and '"'.
_JSON_HEADS = frozenset([b"{", b"[", b'"'])


def fast_decoding(serializer: Serializer) -> tuple[Callable[[bytes], Any], frozenset[bytes]]:
    """Return (loads, heads): a value whose first byte is in `heads` needs only `loads`.

    Such a value cannot be a raw int or compressed data, so a read skips those checks, and
    `loads` is the serializer's own decoding with nothing in between (pickle.loads itself for
    pickle). For a serializer this module did not make exactly (a subclass may change
    `loads`), `heads` is empty: every value takes the full path.
    """
    if type(serializer) is PickleSerializer:
        return pickle.loads, frozenset([b"\x80"])
    if type(serializer) is MsgPackSerializer:
        return serializer._fast_loads, _MSGPACK_HEADS
    if type(serializer) is JSONSerializer:
        return serializer.loads, _JSON_HEADS
    return serializer.loads, frozenset()


# The spellings django-redis users know, and their CamelCase twins.
MSGPackSerializer = MsgPackSerializer
JsonSerializer = JSONSerializer
