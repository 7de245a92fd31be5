"""Property tests of the stored format: arbitrary values round-trip through every serializer x
compressor, and arbitrary bytes never crash a read.

Most examples go through the cache's own `_encode`/`_decode` (and their batch twins), which is
what every get and set runs, off the network; a few go through the server. COMPRESS_MIN_LENGTH
is 0 so that even small values are compressed. Runs are derandomized (the same examples on
every run) so CI is deterministic.
"""

from __future__ import annotations

import copy
import datetime
import math
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redoxide.exceptions import SerializationError
from redoxide.serializers import JSONSerializer, MsgPackSerializer, PickleSerializer
from support.backend import build_cache
from support.servers import RedisServer

PROFILE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SERIALIZERS: dict[str, tuple[str | None, Callable[[], Any]]] = {
    # name -> (module it needs, factory)
    "pickle": (None, PickleSerializer),
    "json-stdlib": (None, lambda: JSONSerializer(library="json")),
    "json-orjson": ("orjson", lambda: JSONSerializer(library="orjson")),
    "msgpack-msgpack": ("msgpack", lambda: MsgPackSerializer(library="msgpack")),
    "msgpack-ormsgpack": ("ormsgpack", lambda: MsgPackSerializer(library="ormsgpack")),
}
COMPRESSORS = [
    "IdentityCompressor",
    "ZlibCompressor",
    "GzipCompressor",
    "LzmaCompressor",
    "Lz4Compressor",
    "ZstdCompressor",
]


def available_compressors() -> list[str]:
    return list(COMPRESSORS)


@pytest.fixture(scope="module")
def caches(redis_server: RedisServer) -> Iterator[Callable[[str], list[Any]]]:
    """Return caches_for(serializer): one cache per compressor, on the shared server."""
    made: dict[str, list[Any]] = {}

    def caches_for(serializer: str) -> list[Any]:
        if serializer not in made:
            needs, factory = SERIALIZERS[serializer]
            if needs is not None:
                pytest.importorskip(needs)
            made[serializer] = [
                build_cache(
                    redis_server.url,
                    {
                        "KEY_PREFIX": "prop",
                        "OPTIONS": {
                            "SERIALIZER": factory(),
                            "COMPRESSOR": f"redoxide.compressors.{compressor}",
                            "COMPRESS_MIN_LENGTH": 0,
                        },
                    },
                )
                for compressor in available_compressors()
            ]
        return made[serializer]

    yield caches_for
    for group in made.values():
        for cache in group:
            cache.close()


# -- values ---------------------------------------------------------------------------------

# Nested ints stay within 64 bits: MessagePack holds no more, and orjson reads longer ones
# as floats. Top-level ints of any size are stored as raw digits, whatever the serializer.
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | int64 | finite_floats | st.text(max_size=40)


def nested(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6)
        ),
        max_leaves=25,
    )


top_level_ints = st.integers() | st.sampled_from([0, -1, 2**63, -(2**64), 10**40])
json_values = top_level_ints | nested(scalars, st.text(max_size=20))
msgpack_values = top_level_ints | nested(
    scalars | st.binary(max_size=40), st.text(max_size=20) | int64 | st.binary(max_size=10)
)
hashables = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.binary(max_size=10)
)
pickle_leaves = (
    scalars
    | st.integers()
    | st.binary(max_size=40)
    | st.datetimes(timezones=st.none() | st.just(datetime.timezone.utc))
    | st.dates()
    | st.timedeltas()
    | st.decimals(allow_nan=False)
    | st.uuids()
    | st.complex_numbers(allow_nan=False)
    | st.frozensets(hashables, max_size=5)
    | st.tuples(hashables, hashables)
)
pickle_values = st.recursive(
    pickle_leaves,
    lambda children: (
        st.lists(children, max_size=6)
        | st.tuples(children, children)
        | st.sets(hashables, max_size=5)
        | st.dictionaries(hashables | st.tuples(hashables, hashables), children, max_size=6)
    ),
    max_leaves=25,
)

VALUES = {
    "pickle": pickle_values,
    "json-stdlib": json_values,
    "json-orjson": json_values,
    "msgpack-msgpack": msgpack_values,
    "msgpack-ormsgpack": msgpack_values,
}

_ATOMS = (
    type(None),
    bool,
    int,
    float,
    str,
    bytes,
    complex,
    Decimal,
    uuid.UUID,
    datetime.date,
    datetime.timedelta,
)


def assert_identical(got: Any, expected: Any) -> None:
    """Assert equal values of the same types all the way down (so 1 is not 1.0 or True)."""
    assert type(got) is type(expected), (got, expected)
    if isinstance(expected, float):
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (got, expected)
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), (got, expected)
        for g, e in zip(got, expected, strict=True):
            assert_identical(g, e)
    elif isinstance(expected, dict):
        assert list(got) == list(expected), (got, expected)
        for key in expected:
            assert_identical(got[key], expected[key])
    else:
        assert isinstance(expected, (_ATOMS, set, frozenset)), type(expected)
        assert got == expected, (got, expected)


def check_round_trip(caches: list[Any], value: Any) -> None:
    for cache in caches:
        data = cache._encode(value)
        assert isinstance(data, bytes)
        assert_identical(cache._decode(data, "k"), value)
        (batch,) = cache._encode_many([value])
        assert batch == data
        assert list(cache._decode_many(["k"], [batch]).values()) == [value]


@pytest.mark.parametrize("serializer", list(SERIALIZERS))
def test_values_round_trip_through_every_compressor(
    caches: Callable[[str], list[Any]], serializer: str
) -> None:
    group = caches(serializer)

    @PROFILE
    @given(VALUES[serializer])
    def check(value: Any) -> None:
        check_round_trip(group, value)

    check()


@pytest.mark.parametrize("serializer", list(SERIALIZERS))
def test_values_round_trip_through_the_server(
    caches: Callable[[str], list[Any]], serializer: str
) -> None:
    group = caches(serializer)

    @settings(PROFILE, max_examples=8)
    @given(VALUES[serializer])
    def check(value: Any) -> None:
        for i, cache in enumerate(group):
            key = f"{serializer}:{i}"
            cache.set(key, value)
            assert_identical(cache.get(key, "MISSING"), value)

    check()


# -- bytes ----------------------------------------------------------------------------------

MAGICS = [
    b"\x80\x05",  # pickle 5
    b"\x78\x9c",  # zlib
    b"\x78\x01",
    b"\x1f\x8b\x08\x00",  # gzip
    b"\xfd7zXZ\x00",  # xz
    b"\x04\x22\x4d\x18",  # lz4 frame
    b"\x28\xb5\x2f\xfd",  # zstd frame
]
# Frames that claim more than they hold: a decoder must not trust the header.
LIARS = [
    b"\x28\xb5\x2f\xfd\xa4\x00\x00\x00\x40\x00\x00\x00",  # zstd: content size 1 TiB
    b"\x04\x22\x4d\x18\x4c\x40\xff\xff\xff\xff\xff\xff\x00\x00\x00",  # lz4: content size huge
    b"\x04\x22\x4d\x18\x64\x70\xb9\xff\xff\xff\x7f",  # lz4: block of 2 GiB
    b"\x80\x05\x95\xff\xff\xff\xff\xff\xff\xff\x7f",  # pickle 5: frame of 2**63 bytes
    b"\xdd\xff\xff\xff\xff",  # msgpack: array of 4G items
    b"\xc6\xff\xff\xff\xff",  # msgpack: bin of 4 GiB
    b"[" * 100_000,  # JSON nested past the recursion limit
    b"\x91" * 100_000,  # msgpack nested past the recursion limit
]
garbage = (
    st.binary(max_size=200)
    | st.builds(lambda magic, tail: magic + tail, st.sampled_from(MAGICS), st.binary(max_size=200))
    | st.sampled_from(LIARS)
)


@pytest.mark.parametrize("serializer", list(SERIALIZERS))
def test_random_bytes_decode_or_raise_serialization_error(
    caches: Callable[[str], list[Any]], serializer: str
) -> None:
    group = caches(serializer)

    @settings(PROFILE, max_examples=150)
    @given(garbage)
    def check(data: bytes) -> None:
        for cache in group:
            try:
                cache._decode(data, "garbage-key")
            except SerializationError as exc:
                assert "garbage-key" in str(exc)

    check()


def _outcome(decode: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "value", decode()
    except SerializationError as exc:
        return "error", type(exc.__cause__)


@pytest.mark.parametrize("serializer", list(SERIALIZERS))
def test_fast_decoding_reads_every_value_as_the_full_path_does(
    caches: Callable[[str], list[Any]], serializer: str
) -> None:
    # A read sends a value whose first byte only the serializer writes straight to it; any
    # value, well formed or not, must come out the same as through every check.
    (cache, *_) = caches(serializer)
    assert cache._fast_heads, "this serializer has a fast path"
    full = copy.copy(cache)
    full._fast_heads = frozenset()
    values = VALUES[serializer]
    data_of = st.one_of(
        values.map(cache._encode),
        st.builds(
            lambda head, tail: head + tail, st.sampled_from(sorted(cache._fast_heads)), st.binary()
        ),
        values.map(lambda v: cache._encode(v) + b"\x00"),  # bytes after the value
        garbage,
    )

    @settings(PROFILE, max_examples=200)
    @given(data_of)
    def check(data: bytes) -> None:
        expected = _outcome(lambda: full._decode(data, "k"))
        got = _outcome(lambda: cache._decode(data, "k"))
        assert got[0] == expected[0], (data, got, expected)
        if got[0] == "value":
            assert_identical(got[1], expected[1])
        batch = _outcome(lambda: cache._decode_many(["k"], [data])["k"])
        assert batch[0] == expected[0], (data, batch, expected)

    check()


def test_frames_that_claim_gigabytes_raise_serialization_error(
    caches: Callable[[str], list[Any]],
) -> None:
    for cache in caches("pickle") + caches("msgpack-msgpack"):
        for data in LIARS:
            with pytest.raises(SerializationError, match="liar"):
                cache._decode(data, "liar")
