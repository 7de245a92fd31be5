"""A user's SERIALIZER and COMPRESSOR are asked, never second-guessed.

- Ints are stored as raw digits whatever the serializer (Django's builtin and django-redis do
  the same), so a read takes raw digits for an int before any serializer is asked. A user
  serializer whose output for another value is raw digits (a str "0042" written as it is)
  would read back as a different value (42): without a COMPRESSOR such a write raises
  EncodingError and stores nothing, whatever the call (set, set_many, add, get_or_set, hashes,
  set members); with one, the value is stored compressed even below the threshold, and so is
  one whose bytes start like the compressor's data (its magic bytes). A serializer that reads
  those digits back as the same int itself (JSON) is not refused; and ``manage.py check``
  warns about a SERIALIZER that cannot store digit strings (W007).
- COMPRESS_MIN_LENGTH holds for every COMPRESSOR, also a class that does not take
  ``min_length``: shorter values are stored as the serializer wrote them and read back, and
  so does a short value django-redis stored as written that starts like the compressor's data
  (the compressor refuses it, the serializer reads it).
- COMPRESS_LEVEL (or PICKLE_VERSION) given for a codec that cannot take it is refused, not
  dropped.
- A django-redis style class (one that takes the OPTIONS dict) is given the cache's OPTIONS,
  as django-redis gives them.
- A serializer may return bytes, str, bytearray or memoryview; anything else raises
  EncodingError naming the serializer.

The codecs are this module's, by dotted path, as a user writes them in settings.
"""

from __future__ import annotations

import enum
import json
import pickle
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils.module_loading import import_string
from redoxide.checks import check_configuration
from redoxide.exceptions import EncodingError
from support.backend import is_redoxide
from support.dispatch import Ops

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's codec handling")

MakeCache = Callable[..., Any]
HERE = "test_user_codecs"


# -- codecs, by dotted path ("test_user_codecs.NAME") ------------------------------------------


class TextSerializer:
    """Strings as their UTF-8 text (readable in redis-cli), anything else pickled."""

    def dumps(self, value: Any) -> bytes:
        if type(value) is str:
            return value.encode()
        return pickle.dumps(value)

    def loads(self, data: bytes) -> Any:
        if data[:1] == b"\x80":
            return pickle.loads(data)
        return data.decode()


class Latin1Serializer:
    """Strings as their Latin-1 bytes (any byte value can start one), anything else pickled."""

    def dumps(self, value: Any) -> bytes:
        if type(value) is str:
            return value.encode("latin-1")
        return pickle.dumps(value)

    def loads(self, data: bytes) -> Any:
        if data[:1] == b"\x80":
            return pickle.loads(data)
        return data.decode("latin-1")


class Latin1OptionsSerializer(Latin1Serializer):
    """The same, built as django-redis builds a serializer (with the OPTIONS dict)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = options


class PlainJSONSerializer:
    """JSON as a user writes it (no redoxide base class): digits read back as that int."""

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


class BufferSerializer:
    """Pickle, handed back as a bytearray (or a memoryview for lists)."""

    def dumps(self, value: Any) -> Any:
        data = pickle.dumps(value)
        return memoryview(data) if isinstance(value, list) else bytearray(data)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


class NoneSerializer:
    """A broken serializer: dumps returns None."""

    def dumps(self, value: Any) -> Any:
        return None

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


class OptionsPickleSerializer:
    """django-redis style: takes the OPTIONS dict and reads PICKLE_VERSION from it."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.protocol = int(options.get("PICKLE_VERSION", pickle.HIGHEST_PROTOCOL))

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, self.protocol)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


HEADER = b"ZZ1"


class BareZlibCompressor:
    """Compresses whatever it is given (no min_length, no is_compressed, takes nothing);
    decompress() refuses data it did not write."""

    def compress(self, data: bytes) -> bytes:
        return HEADER + zlib.compress(data)

    def decompress(self, data: bytes) -> bytes:
        if data[: len(HEADER)] != HEADER:
            raise ValueError("not compressed by BareZlibCompressor")
        return zlib.decompress(data[len(HEADER) :])


class ClaimingZlibCompressor(BareZlibCompressor):
    """Says what it wrote (is_compressed); a min_length of its own, not taken in __init__."""

    min_length = 10

    def is_compressed(self, data: bytes) -> bool:
        return data[: len(HEADER)] == HEADER


class PickleHeadCompressor(BareZlibCompressor):
    """A format that starts as a protocol-5 pickle does, and an is_compressed() that claims
    whatever starts so: short pickles, stored as written, would be taken for its data."""

    HEAD = b"\x80\x05"

    def compress(self, data: bytes) -> bytes:
        return self.HEAD + zlib.compress(data)

    def decompress(self, data: bytes) -> bytes:
        return zlib.decompress(data[len(self.HEAD) :])

    def is_compressed(self, data: bytes) -> bool:
        return data[: len(self.HEAD)] == self.HEAD


class Colour(enum.IntEnum):
    RED = 42


MIN_LENGTH = 100
SHORT = "s" * 40  # its pickle is about 55 bytes: below MIN_LENGTH
LONG = "l" * 400  # above it


def stored(cache: Any, key: str) -> Any:
    """The bytes the server holds for a cache key (no decoding)."""
    return cache.client.execute("GET", cache.make_key(key))


# -- raw digits: never read back as an int unless they were one --------------------------------


@pytest.mark.parametrize("text", ["0042", "42", "-7", "007", "9" * 5000], ids=lambda t: t[:8])
def test_a_digit_string_a_user_serializer_writes_as_is_is_refused(
    make_cache: MakeCache, mode: str, text: str
) -> None:
    cache = make_cache(SERIALIZER=f"{HERE}.TextSerializer")
    ops = Ops(cache, mode)
    refused = r"str value for key 'code'.*b'[-0-9]+(\.\.\.)?', which a read takes for an int"
    with pytest.raises(EncodingError, match=refused):
        ops.set("code", text)
    assert stored(cache, "code") is None  # nothing written that reads back as an int
    # Everything else round-trips, type and all.
    ops.set("word", "00a42")
    ops.set("number", 42)
    ops.set("list", ["0042"])
    assert ops.get("word") == "00a42"
    assert ops.get("number") == 42
    assert ops.get("list") == ["0042"]
    assert stored(cache, "number") == b"42"  # ints stay raw: INCR works on them
    assert ops.incr("number") == 43
    # A serializer that itself reads those digits as that int (JSON) is not refused.
    json_ops = Ops(make_cache(SERIALIZER=f"{HERE}.PlainJSONSerializer", KEY_PREFIX="j"), mode)
    json_ops.set_many({"colour": Colour.RED, "code": text})
    got = json_ops.get_many(["colour", "code"])
    assert got == {"colour": 42, "code": text}
    assert type(got["code"]) is str


def test_every_write_path_refuses_a_digit_string_and_writes_nothing(
    make_cache: MakeCache, mode: str
) -> None:
    cache = make_cache(SERIALIZER=f"{HERE}.TextSerializer")
    ops = Ops(cache, mode)
    with pytest.raises(EncodingError):
        ops.set_many({"fine": "text", "code": "0042"})
    assert ops.get_many(["fine", "code"]) == {}  # encoded before anything is sent
    with pytest.raises(EncodingError):
        ops.add("code", "0042")
    with pytest.raises(EncodingError):
        ops.get_or_set("code", "0042")
    with pytest.raises(EncodingError):
        ops.set("code", "0042", nx=True)
    assert stored(cache, "code") is None
    with pytest.raises(EncodingError):
        cache.hset("hash", "field", "0042")
    with pytest.raises(EncodingError):
        cache.sadd("set", "0042")
    assert cache.client.execute("KEYS", "*") == []
    with pytest.raises(EncodingError):
        cache.client.encode("0042")


def test_refused_under_fail_open_too(make_cache: MakeCache, mode: str) -> None:
    # A codec that cannot store a value is a programming error, not an outage to hide.
    cache = make_cache(SERIALIZER=f"{HERE}.TextSerializer", IGNORE_EXCEPTIONS=True)
    ops = Ops(cache, mode)
    with pytest.raises(EncodingError):
        ops.set_many({"code": "0042"})
    with pytest.raises(EncodingError):
        ops.set("code", "0042")


@pytest.mark.parametrize(
    ("compressor", "text"),
    [
        ("ZlibCompressor", "0042"),
        ("ZlibCompressor", "x^2 + 1"),
        ("GzipCompressor", "\x1f\x8b text"),
        ("Lz4Compressor", "\x04\x22\x4d\x18 text"),
        ("ZstdCompressor", "\x28\xb5\x2f\xfd text"),
    ],
    ids=["digits", "zlib-head", "gzip-head", "lz4-head", "zstd-head"],
)
def test_a_short_value_a_read_would_misread_is_stored_compressed(
    make_cache: MakeCache, mode: str, compressor: str, text: str
) -> None:
    # Below COMPRESS_MIN_LENGTH, but stored as written it would be read as an int, or as the
    # compressor's data (its magic bytes): with a compressor at hand, it is compressed instead.
    cache = make_cache(
        SERIALIZER=f"{HERE}.Latin1Serializer", COMPRESSOR=f"redoxide.compressors.{compressor}"
    )
    ops = Ops(cache, mode)
    ops.set("text", text)
    ops.set_many({"many": text, "plain": "plain text"})
    assert stored(cache, "plain") == b"plain text"  # below the threshold: as written
    assert stored(cache, "text") != text.encode("latin-1")
    assert ops.get("text") == text
    assert ops.get_many(["text", "many", "plain"]) == {
        "text": text,
        "many": text,
        "plain": "plain text",
    }
    cache.sadd("set", text, "plain text")
    assert cache.smembers("set") == {text, "plain text"}
    assert cache.sismember("set", text)


def test_a_short_pickle_the_compressor_would_claim_is_stored_compressed(
    make_cache: MakeCache, mode: str
) -> None:
    cache = make_cache(COMPRESSOR=f"{HERE}.PickleHeadCompressor", COMPRESS_MIN_LENGTH=MIN_LENGTH)
    ops = Ops(cache, mode)
    ops.set("short", SHORT)
    ops.set_many({"many": SHORT})
    assert stored(cache, "short") != pickle.dumps(SHORT, pickle.HIGHEST_PROTOCOL)
    assert ops.get("short") == SHORT
    assert ops.get_many(["short", "many"]) == {"short": SHORT, "many": SHORT}


def test_a_short_value_django_redis_stored_as_written_reads_back(
    make_cache: MakeCache, redis_server: Any, mode: str
) -> None:
    # django-redis stores a value below its min_length as the serializer wrote it, and reads
    # it back when its compressor refuses it; "x^2 + 1" begins as zlib data does.
    options = {
        "SERIALIZER": f"{HERE}.Latin1OptionsSerializer",
        "COMPRESSOR": "django_redis.compressors.zlib.ZlibCompressor",
    }
    ours = make_cache(KEY_PREFIX="dr", OPTIONS=options)
    theirs = import_string("django_redis.cache.RedisCache")(
        redis_server.url, {"KEY_PREFIX": "dr", "OPTIONS": options}
    )
    theirs.set("text", "x^2 + 1")
    assert stored(ours, "text") == b"x^2 + 1"
    assert Ops(ours, mode).get("text") == "x^2 + 1"
    assert Ops(ours, mode).get_many(["text"]) == {"text": "x^2 + 1"}
    Ops(ours, mode).set("mine", "x^2 + 1")  # stored compressed: django-redis reads it too
    assert theirs.get("mine") == "x^2 + 1"


def test_check_warns_about_a_serializer_that_writes_digit_strings_as_they_are() -> None:
    location = "redis://127.0.0.1:1/0"  # never connected: the check only encodes
    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "text": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": location,
            "OPTIONS": {"SERIALIZER": f"{HERE}.TextSerializer"},
        },
        "json": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": location,
            "OPTIONS": {"SERIALIZER": f"{HERE}.PlainJSONSerializer"},
        },
        "pickle": {"BACKEND": "redoxide.RedisCache", "LOCATION": location},
    }
    with override_settings(CACHES=caches):
        messages = check_configuration()
    assert [(m.id, m.msg.split(":")[0]) for m in messages] == [("redoxide.W007", "CACHES['text']")]
    assert "'0042'" in messages[0].msg


# -- COMPRESS_MIN_LENGTH holds for every compressor ----------------------------------------------


@pytest.mark.parametrize("compressor", ["BareZlibCompressor", "ClaimingZlibCompressor"])
def test_compress_min_length_holds_for_a_compressor_that_does_not_take_it(
    make_cache: MakeCache, mode: str, compressor: str
) -> None:
    cache = make_cache(COMPRESSOR=f"{HERE}.{compressor}", COMPRESS_MIN_LENGTH=MIN_LENGTH)
    ops = Ops(cache, mode)
    ops.set("short", SHORT)
    ops.set("long", LONG)
    ops.set_many({"many-short": SHORT, "many-long": LONG})
    for name in ("short", "many-short"):
        assert len(pickle.dumps(SHORT, pickle.HIGHEST_PROTOCOL)) < MIN_LENGTH
        assert stored(cache, name) == pickle.dumps(SHORT, pickle.HIGHEST_PROTOCOL), name
    for name in ("long", "many-long"):
        assert stored(cache, name).startswith(HEADER), name
    assert ops.get("short") == SHORT
    assert ops.get("long") == LONG
    assert ops.get_many(["short", "long", "many-short", "many-long"]) == {
        "short": SHORT,
        "long": LONG,
        "many-short": SHORT,
        "many-long": LONG,
    }
    # Without COMPRESS_MIN_LENGTH the class's own min_length (10) holds; a class without one
    # decides itself: every value reaches compress(), as under django-redis.
    own = Ops(make_cache(COMPRESSOR=f"{HERE}.{compressor}", KEY_PREFIX="own"), mode)
    own.set("short", SHORT)
    assert stored(own.cache, "short").startswith(HEADER)
    assert own.get("short") == SHORT


@pytest.mark.parametrize(
    "options",
    [
        {"COMPRESSOR": f"{HERE}.BareZlibCompressor", "COMPRESS_LEVEL": 9},
        {"COMPRESSOR": BareZlibCompressor(), "COMPRESS_LEVEL": 9},
        {"SERIALIZER": f"{HERE}.TextSerializer", "PICKLE_VERSION": 2},
    ],
    ids=["level-class", "level-instance", "pickle-version"],
)
def test_an_option_the_codec_cannot_take_is_refused_not_dropped(
    make_cache: MakeCache, options: dict[str, Any]
) -> None:
    cache = make_cache(OPTIONS=options)
    option = "COMPRESS_LEVEL" if "COMPRESS_LEVEL" in options else "PICKLE_VERSION"
    with pytest.raises(ImproperlyConfigured, match=f"{option}.*cannot be applied"):
        cache.get("k")
    # A class that takes it is given it.
    taking = make_cache(COMPRESSOR="redoxide.compressors.ZlibCompressor", COMPRESS_LEVEL=1)
    assert taking._compressor.level == 1


# -- what a user codec is given, and what it may return ------------------------------------------


def test_a_django_redis_style_serializer_is_given_the_options(make_cache: MakeCache) -> None:
    cache = make_cache(SERIALIZER=f"{HERE}.OptionsPickleSerializer", PICKLE_VERSION=2)
    cache.set("k", {"a": 1})
    assert stored(cache, "k")[:2] == b"\x80\x02"  # protocol 2, read from OPTIONS
    assert cache.get("k") == {"a": 1}


def test_a_serializer_may_return_a_bytearray_or_a_memoryview(
    make_cache: MakeCache, mode: str
) -> None:
    ops = Ops(make_cache(SERIALIZER=f"{HERE}.BufferSerializer"), mode)
    ops.set("dict", {"a": 1})
    ops.set_many({"list": [1, 2], "text": "t"})
    assert ops.get_many(["dict", "list", "text"]) == {"dict": {"a": 1}, "list": [1, 2], "text": "t"}


@pytest.mark.parametrize("signed", [False, True], ids=["plain", "signed"])
def test_a_serializer_returning_something_else_raises_naming_it(
    make_cache: MakeCache, signed: bool
) -> None:
    cache = make_cache(SERIALIZER=f"{HERE}.NoneSerializer", SIGN_VALUES=signed)
    with pytest.raises(EncodingError, match=r"NoneSerializer returned NoneType"):
        cache.set("k", "v")
    assert stored(cache, "k") is None
