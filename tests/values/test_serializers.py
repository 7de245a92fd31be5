"""Serializers through the real cache: Pickle, JSON (orjson or the stdlib) and MessagePack
(ormsgpack or msgpack), chosen with OPTIONS["SERIALIZER"].

Ints (not bools) stay raw digits on the server under every serializer, so INCR/DECR stay atomic;
everything else goes through the serializer. A value another serializer wrote is a
SerializationError naming the key, never a crash or a wrong value.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import json
import pickle
import threading
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from redoxide.exceptions import SerializationError
from redoxide.serializers import (
    JSONSerializer,
    MSGPackSerializer,
    MsgPackSerializer,
    PickleSerializer,
)

MISSING = object()


def _needs(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is not installed")


# Each variant: how to build the SERIALIZER option value (dotted path, class or instance).
SERIALIZERS: dict[str, Callable[[], Any]] = {
    "pickle": lambda: "redoxide.serializers.PickleSerializer",
    "json": lambda: "redoxide.serializers.JSONSerializer",
    "json-stdlib": lambda: JSONSerializer(library="json"),
    "json-orjson": lambda: (_needs("orjson"), JSONSerializer(library="orjson"))[1],
    "msgpack": lambda: "redoxide.serializers.MSGPackSerializer",
    "msgpack-msgpack": lambda: (_needs("msgpack"), MsgPackSerializer(library="msgpack"))[1],
    "msgpack-ormsgpack": lambda: (_needs("ormsgpack"), MsgPackSerializer(library="ormsgpack"))[1],
}


def family(variant: str) -> str:
    return variant.split("-")[0]


@pytest.fixture(params=list(SERIALIZERS))
def variant(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def cache_for(make_cache: Callable[..., Any]) -> Callable[..., Any]:
    """Return a factory: cache_for(variant, **kwargs) is a cache with that serializer."""

    def factory(variant: str, **kwargs: Any) -> Any:
        return make_cache(SERIALIZER=SERIALIZERS[variant](), **kwargs)

    return factory


# Values every serializer keeps exactly (type included).
COMMON: dict[str, Any] = {
    "str": "text",
    "unicode": "ünïcödé ✓ 日本",
    "empty_str": "",
    "digits_str": "12345",
    "float": 1.5,
    "negative_float": -0.25,
    "whole_float": 3.0,
    "true": True,
    "false": False,
    "none": None,
    "list": [1, "a", None, 2.5, False],
    "nested": {"a": {"b": [1.0, True, {"c": "d"}]}, "e": []},
    "empty_list": [],
    "empty_dict": {},
    "big_nested_int": [2**40, -(2**62)],
    "long_str": "x" * 5000,
}


def assert_same(got: Any, expected: Any) -> None:
    assert got == expected
    assert type(got) is type(expected)


def test_common_values_round_trip(cache_for: Callable[..., Any], variant: str) -> None:
    cache = cache_for(variant)
    for key, value in COMMON.items():
        cache.set(key, value)
        assert_same(cache.get(key, MISSING), value)
    assert cache.get_many(list(COMMON)) == COMMON


def test_common_values_round_trip_in_batches_and_async(
    cache_for: Callable[..., Any], variant: str
) -> None:
    cache = cache_for(variant)

    async def go() -> dict[str, Any]:
        await cache.aset_many(COMMON)
        got = await cache.aget_many(list(COMMON))
        for key, value in COMMON.items():
            assert_same(await cache.aget(key, MISSING), value)
        return dict(got)

    assert asyncio.run(go()) == COMMON


def test_type_specific_values(cache_for: Callable[..., Any], variant: str) -> None:
    cache = cache_for(variant)
    kind = family(variant)
    cache.set("tuple", (1, "two"))
    cache.set("int_keys", {1: "one"})
    if kind == "pickle":
        assert_same(cache.get("tuple"), (1, "two"))
        assert cache.get("int_keys") == {1: "one"}
    elif kind == "json":
        assert_same(cache.get("tuple"), [1, "two"])  # JSON has arrays only
        assert cache.get("int_keys") == {"1": "one"}  # and string keys only
    else:
        assert_same(cache.get("tuple"), [1, "two"])  # MessagePack has arrays only
        assert cache.get("int_keys") == {1: "one"}
    if kind != "json":
        cache.set("bytes", b"\x00\x80\xff")
        assert_same(cache.get("bytes"), b"\x00\x80\xff")


@pytest.mark.parametrize("number", [0, 7, -42, 2**63, -(2**70)])
def test_ints_are_stored_as_raw_digits(
    cache_for: Callable[..., Any], redis_client: Any, variant: str, number: int
) -> None:
    cache = cache_for(variant)
    cache.set("n", number)
    assert redis_client.get(":1:n") == str(number).encode()
    assert_same(cache.get("n"), number)
    cache.set_many({"m": number})
    assert redis_client.get(":1:m") == str(number).encode()
    assert_same(cache.get_many(["m"])["m"], number)


def test_bools_are_serialized_not_raw(
    cache_for: Callable[..., Any], redis_client: Any, variant: str
) -> None:
    cache = cache_for(variant)
    cache.set("t", True)
    cache.set("f", False)
    assert redis_client.get(":1:t") not in (b"1", b"True")
    assert redis_client.get(":1:f") not in (b"0", b"False")
    assert cache.get("t") is True
    assert cache.get("f") is False


def test_raw_digits_written_by_anyone_read_as_int(
    cache_for: Callable[..., Any], redis_client: Any, variant: str
) -> None:
    cache = cache_for(variant)
    redis_client.set(":1:n", b"123")
    redis_client.set(":1:neg", b"-9")
    assert_same(cache.get("n"), 123)
    assert cache.get_many(["n", "neg"]) == {"n": 123, "neg": -9}
    redis_client.incrby(":1:n", 5)
    assert_same(cache.get("n"), 128)


def test_incr_and_decr_are_atomic_on_the_server(
    cache_for: Callable[..., Any], redis_client: Any, variant: str
) -> None:
    cache = cache_for(variant)
    cache.set("n", 0)
    threads, per_thread = 4, 50

    def bump() -> None:
        for _ in range(per_thread):
            cache.incr("n")
        for _ in range(per_thread // 5):
            cache.decr("n", 2)

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    expected = threads * (per_thread - 2 * (per_thread // 5))
    assert redis_client.get(":1:n") == str(expected).encode()
    assert_same(cache.get("n"), expected)
    assert cache.incr("n", 10) == expected + 10
    assert asyncio.run(cache.adecr("n", 10)) == expected
    with pytest.raises(ValueError):
        cache.incr("missing")


def test_incr_of_a_serialized_float_reads_adds_and_writes_back(
    cache_for: Callable[..., Any], variant: str
) -> None:
    cache = cache_for(variant)
    cache.set("f", 1.5)
    assert cache.incr("f") == 2.5
    assert_same(cache.get("f"), 2.5)


# A value that no other serializer's bytes can be mistaken for.
FOREIGN_VALUE = {"user": "ada", "groups": ["staff", "admin"], "score": 2.5}
FOREIGN_PAIRS = [
    (writer, reader)
    for writer in ("pickle", "json", "msgpack-msgpack", "msgpack-ormsgpack", "json-orjson")
    for reader in ("pickle", "json-stdlib", "json-orjson", "msgpack-msgpack", "msgpack-ormsgpack")
    if family(writer) != family(reader)
]


@pytest.mark.parametrize(("writer", "reader"), FOREIGN_PAIRS)
def test_value_written_by_another_serializer_raises_naming_the_key(
    cache_for: Callable[..., Any], writer: str, reader: str
) -> None:
    cache_for(writer).set("stranger", FOREIGN_VALUE)
    cache = cache_for(reader)
    with pytest.raises(SerializationError, match="stranger"):
        cache.get("stranger")
    with pytest.raises(SerializationError, match="stranger"):
        cache.get_many(["stranger"])
    with pytest.raises(SerializationError, match="stranger"):
        asyncio.run(cache.aget("stranger"))


def test_value_written_by_another_serializer_is_a_miss_under_fail_open(
    cache_for: Callable[..., Any],
) -> None:
    cache_for("pickle").set("stranger", FOREIGN_VALUE)
    cache = cache_for("json", IGNORE_EXCEPTIONS=True)
    assert cache.get("stranger", "default") == "default"


@pytest.mark.parametrize(
    "spelling",
    [
        "redoxide.serializers.MSGPackSerializer",
        "redoxide.serializers.MsgPackSerializer",
        MSGPackSerializer,
        MsgPackSerializer(),
    ],
    ids=["MSGPack-path", "MsgPack-path", "class", "instance"],
)
def test_msgpack_serializer_spellings_write_messagepack(
    make_cache: Callable[..., Any], redis_client: Any, spelling: Any
) -> None:
    msgpack = pytest.importorskip("msgpack")
    cache = make_cache(SERIALIZER=spelling)
    cache.set("k", {"a": [1, "b"]})
    assert redis_client.get(":1:k") == msgpack.packb({"a": [1, "b"]})
    assert cache.get("k") == {"a": [1, "b"]}


@pytest.mark.parametrize(
    "spelling",
    ["redoxide.serializers.JSONSerializer", "redoxide.serializers.JsonSerializer", JSONSerializer],
)
def test_json_serializer_spellings_write_json(
    make_cache: Callable[..., Any], redis_client: Any, spelling: Any
) -> None:
    cache = make_cache(SERIALIZER=spelling)
    cache.set("k", {"a": [1, "é"]})
    assert json.loads(redis_client.get(":1:k")) == {"a": [1, "é"]}


def test_pickle_protocol_defaults_to_highest_and_is_configurable(
    make_cache: Callable[..., Any], redis_client: Any
) -> None:
    make_cache(SERIALIZER="redoxide.serializers.PickleSerializer").set("k", [1])
    assert redis_client.get(":1:k")[:2] == bytes([0x80, pickle.HIGHEST_PROTOCOL])
    make_cache(SERIALIZER=PickleSerializer(protocol=2)).set("k", [1])
    assert redis_client.get(":1:k")[:2] == bytes([0x80, 2])
    make_cache(SERIALIZER=PickleSerializer, PICKLE_VERSION=3).set("k", [1])
    assert redis_client.get(":1:k")[:2] == bytes([0x80, 3])


# -- the serializers themselves ------------------------------------------------------------

JSON_EXTRAS = [
    datetime.datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=datetime.timezone.utc),
    datetime.datetime(2024, 5, 17, 12, 30, 45),
    datetime.date(2024, 2, 29),
    datetime.time(1, 2, 3, 400000),
    datetime.timedelta(days=1, seconds=5),
    Decimal("1234.5678"),
    uuid.UUID(int=0x1234),
]


def test_json_stdlib_writes_what_django_redis_writes() -> None:
    from django_redis.serializers.json import JSONSerializer as DjangoRedisJSON

    theirs = DjangoRedisJSON({})
    ours = JSONSerializer(library="json")
    for value in [*COMMON.values(), JSON_EXTRAS, {1: "int key"}]:
        assert ours.dumps(value) == theirs.dumps(value)


def test_json_orjson_writes_the_same_json_as_the_stdlib() -> None:
    _needs("orjson")
    fast, slow = JSONSerializer(library="orjson"), JSONSerializer(library="json")
    for value in [*COMMON.values(), JSON_EXTRAS, {1: "int key", None: 0}, [2**70], "\ud800"]:
        assert json.loads(fast.dumps(value)) == json.loads(slow.dumps(value))
        assert fast.loads(slow.dumps(value)) == slow.loads(fast.dumps(value))


def test_json_reads_non_finite_floats_the_stdlib_wrote() -> None:
    for library in ("json", "orjson"):
        if library == "orjson":
            _needs("orjson")
        got = JSONSerializer(library=library).loads(b"[NaN, Infinity, -Infinity]")
        assert got[0] != got[0]
        assert got[1:] == [float("inf"), float("-inf")]


def test_json_refuses_what_it_cannot_write() -> None:
    for library in ("json", "orjson"):
        if library == "orjson":
            _needs("orjson")
        with pytest.raises(TypeError):
            JSONSerializer(library=library).dumps({"s": {1, 2}})


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 300


MSGPACK_SAMPLES: list[Any] = [
    *COMMON.values(),
    [Colour.RED, Level.HIGH, {"level": Level.HIGH}],
    b"\x00\xff",
    (1, 2),
    {1: 2, "a": None, b"k": [1.5]},
    [0, 127, 128, 255, 256, 65535, 65536, 2**32, 2**64 - 1, -1, -32, -33, -128, -129, -(2**63)],
    [
        "x" * 31,
        "x" * 32,
        "x" * 255,
        "x" * 256,
        b"y" * 256,
        list(range(16)),
        dict.fromkeys("abcdefghijklmnopq"),
    ],
]


def test_msgpack_libraries_write_the_bytes_msgpack_writes() -> None:
    msgpack = pytest.importorskip("msgpack")
    _needs("ormsgpack")
    fast, plain = MsgPackSerializer(library="ormsgpack"), MsgPackSerializer(library="msgpack")
    for value in MSGPACK_SAMPLES:
        expected = msgpack.packb(value)  # what django-redis' MSGPackSerializer writes
        assert fast.dumps(value) == expected
        assert plain.dumps(value) == expected
        assert fast.loads(expected) == plain.loads(expected)


@pytest.mark.parametrize("library", ["msgpack", "ormsgpack"])
@pytest.mark.parametrize(
    "value",
    [datetime.datetime(2024, 1, 1), uuid.UUID(int=1), Decimal("1.5"), {1, 2}, 2**64, object()],
    ids=["datetime", "uuid", "decimal", "set", "int65", "object"],
)
def test_msgpack_refuses_what_msgpack_cannot_write(library: str, value: Any) -> None:
    _needs(library)
    with pytest.raises((TypeError, OverflowError)):
        MsgPackSerializer(library=library).dumps(value)


@pytest.mark.parametrize("library", ["msgpack", "ormsgpack"])
def test_msgpack_refuses_bytes_after_the_value(library: str) -> None:
    _needs(library)
    serializer = MsgPackSerializer(library=library)
    for data in [pickle.dumps({"a": 1}), b'{"a": 1}', b"\xc3\x00", b"\x80\x80"]:
        with pytest.raises(ValueError):
            serializer.loads(data)
    assert serializer.loads(b"\x80") == {}
    assert serializer.loads(b"\xc3") is True


@pytest.mark.parametrize(
    ("cls", "library"),
    [(JSONSerializer, "simplejson"), (MsgPackSerializer, "umsgpack"), (MsgPackSerializer, "json")],
)
def test_unknown_library_is_rejected(cls: type[Any], library: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=library):
        cls(library=library)


def test_msgpack_int_enum_is_not_mistaken_for_raw_digits(
    cache_for: Callable[..., Any], redis_client: Any
) -> None:
    class Code(enum.IntEnum):
        FIVE = 53  # MessagePack packs 53 as the single byte b"5"

    for variant in ("msgpack-msgpack", "msgpack-ormsgpack"):
        cache = cache_for(variant)
        cache.set("code", Code.FIVE)
        assert redis_client.get(":1:code") != b"5"
        assert cache.get("code") == 53
