"""Stored-format interop with Django's builtin RedisCache and django-redis, on one server, both
directions: what one backend wrote, the other reads, with the same KEY_PREFIX and VERSION.

Default settings (the backend under test against the builtin on redis-py with hiredis, and
django-redis with its default pickle serializer): ints are raw digits (so INCR works across
backends), everything else pickled.

Every serializer x compressor that django-redis offers, with the matching settings on both
sides: values are small ones (below redoxide's default COMPRESS_MIN_LENGTH, above
django-redis' 15 bytes, so only django-redis compresses them) and a ~14 KiB list of 80
user-like dicts (both compress it).
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.utils.module_loading import import_string
from support.backend import BUILTIN_BACKEND, build_cache
from support.servers import RedisServer

REDOXIDE_BACKEND = "redoxide.RedisCache"
DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"
PARAMS = {"KEY_PREFIX": "interop", "VERSION": 3}

# name -> (django-redis class, redoxide class)
SERIALIZERS = {
    "pickle": (
        "django_redis.serializers.pickle.PickleSerializer",
        "redoxide.serializers.PickleSerializer",
    ),
    "json": ("django_redis.serializers.json.JSONSerializer", "redoxide.serializers.JSONSerializer"),
    "msgpack": (
        "django_redis.serializers.msgpack.MSGPackSerializer",
        "redoxide.serializers.MSGPackSerializer",
    ),
}
COMPRESSORS = {
    "none": (
        "django_redis.compressors.identity.IdentityCompressor",
        "redoxide.compressors.IdentityCompressor",
    ),
    "zlib": ("django_redis.compressors.zlib.ZlibCompressor", "redoxide.compressors.ZlibCompressor"),
    "gzip": ("django_redis.compressors.gzip.GzipCompressor", "redoxide.compressors.GzipCompressor"),
    "lzma": ("django_redis.compressors.lzma.LzmaCompressor", "redoxide.compressors.LzmaCompressor"),
    "lz4": ("django_redis.compressors.lz4.Lz4Compressor", "redoxide.compressors.Lz4Compressor"),
    "zstd": ("django_redis.compressors.zstd.ZStdCompressor", "redoxide.compressors.ZstdCompressor"),
}

LARGE = [
    {
        "id": i,
        "username": f"user{i:04d}",
        "email": f"user{i:04d}@example.com",
        "first_name": "First",
        "last_name": f"Last{i}",
        "active": i % 3 != 0,
        "score": i * 1.25,
        "groups": ["staff", "editors"] if i % 2 else ["viewers"],
        "bio": "Writes about caching, queues and the occasional database.",
    }
    for i in range(80)
]

# Values every serializer keeps exactly, type included.
COMMON: dict[str, Any] = {
    "large": LARGE,
    "small_dict": {"id": 1, "name": "ada", "tags": ["x", "y"]},
    "medium_str": "héllo wörld " * 12,  # > 100 bytes: django-redis' lzma compresses it too
    "short_str": "hi",  # below every threshold: stored as is
    "int": 42,
    "negative_int": -7,
    "big_int": 2**70,
    "bool": True,
    "float": 3.5,
    "none": None,
    "list": [1, "two", 3.0, None],
}
EXTRA: dict[str, dict[str, Any]] = {
    "pickle": {
        "tuple": ("t", 1.5),
        "set": {1, 2, 3},
        "bytes": b"\x00\x01binary\xff" * 20,
        "datetime": datetime.datetime(
            2024, 5, 17, 12, 30, 45, 123456, tzinfo=datetime.timezone.utc
        ),
        "decimal": Decimal("1234.5678"),
    },
    "json": {},
    "msgpack": {"bytes": b"\x00\x01binary\xff" * 20, "int_keys": {1: "one", 2: "two"}},
}


def values_for(serializer: str, reader: str = "redoxide") -> dict[str, Any]:
    values = {**COMMON, **EXTRA[serializer]}
    if reader == "django-redis":
        # django-redis' msgpack reads with strict_map_key=True: it cannot read maps with
        # non-string keys, not even the ones it wrote itself. redoxide reads them.
        values.pop("int_keys", None)
    return values


def redoxide_compressor(compressor: str) -> str:
    """Return the redoxide compressor path matching a django-redis compressor."""
    return COMPRESSORS[compressor][1]


def build(backend: str, location: str, options: dict[str, Any] | None = None) -> Any:
    params: dict[str, Any] = dict(PARAMS)
    if options:
        params["OPTIONS"] = options
    return import_string(backend)(location, params)


@pytest.fixture
def caches(redis_server: RedisServer) -> Iterator[Callable[..., Any]]:
    """Return a factory of backends on the flushed redis_server; all are closed afterwards."""
    made: list[Any] = []

    def factory(backend: str, options: dict[str, Any] | None = None) -> Any:
        cache = build(backend, redis_server.url, options)
        made.append(cache)
        return cache

    redis_server.flushall()
    yield factory
    for cache in made:
        cache.close()


def pair(caches: Callable[..., Any], serializer: str, compressor: str) -> tuple[Any, Any]:
    """Return (django-redis, redoxide) caches with matching SERIALIZER and COMPRESSOR."""
    theirs = caches(
        DJANGO_REDIS_BACKEND,
        {"SERIALIZER": SERIALIZERS[serializer][0], "COMPRESSOR": COMPRESSORS[compressor][0]},
    )
    ours = caches(
        REDOXIDE_BACKEND,
        {"SERIALIZER": SERIALIZERS[serializer][1], "COMPRESSOR": redoxide_compressor(compressor)},
    )
    return theirs, ours


def assert_reads(cache: Any, values: dict[str, Any]) -> None:
    for key, value in values.items():
        got = cache.get(key, "MISSING")
        assert got == value, key
        assert type(got) is type(value), key
    assert cache.get_many(list(values)) == values


MATRIX = pytest.mark.parametrize(
    ("serializer", "compressor"),
    [(s, c) for s in SERIALIZERS for c in COMPRESSORS],
)


@MATRIX
def test_redoxide_reads_what_django_redis_wrote(
    caches: Callable[..., Any], serializer: str, compressor: str
) -> None:
    theirs, ours = pair(caches, serializer, compressor)
    values = values_for(serializer)
    theirs.set_many(values, timeout=None)
    assert_reads(ours, values)
    assert asyncio.run(ours.aget_many(list(values))) == values


@MATRIX
def test_django_redis_reads_what_redoxide_wrote(
    caches: Callable[..., Any], serializer: str, compressor: str
) -> None:
    theirs, ours = pair(caches, serializer, compressor)
    values = values_for(serializer, reader="django-redis")
    ours.set_many(values, timeout=None)
    assert_reads(theirs, values)
    theirs.clear()
    for key, value in values.items():
        ours.set(key, value, timeout=None)
    assert_reads(theirs, values)


@pytest.mark.parametrize(
    ("serializer", "compressor"),
    [(s, c) for s in SERIALIZERS for c in COMPRESSORS if c != "none"],
)
def test_redoxide_compresses_the_large_value_as_django_redis_does(
    caches: Callable[..., Any], redis_client: Any, serializer: str, compressor: str
) -> None:
    theirs, ours = pair(caches, serializer, compressor)
    theirs.set("theirs", LARGE)
    ours.set("ours", LARGE)
    their_raw = redis_client.get("interop:3:theirs")
    our_raw = redis_client.get("interop:3:ours")
    # The same format (magic bytes) and a similar size: levels and JSON spacing may differ.
    assert our_raw[:2] == their_raw[:2]
    assert len(our_raw) < 2 * len(their_raw)
    assert len(our_raw) < len(ours._serializer.dumps(LARGE)) / 2


@pytest.mark.parametrize("serializer", list(SERIALIZERS))
def test_incr_across_backends(caches: Callable[..., Any], serializer: str) -> None:
    theirs, ours = pair(caches, serializer, "zlib")
    theirs.set("n", 10)
    assert ours.incr("n") == 11
    assert theirs.incr("n", 5) == 16
    assert ours.get("n") == 16
    assert theirs.get("n") == 16


# -- Django's builtin RedisCache: pickle, no compression -----------------------------------

BUILTIN_VALUES = values_for("pickle")


@pytest.mark.parametrize("compressor", list(COMPRESSORS))
def test_redoxide_reads_what_the_builtin_wrote(caches: Callable[..., Any], compressor: str) -> None:
    # Any COMPRESSOR reads uncompressed values: they are recognised by their first byte.
    builtin = caches(BUILTIN_BACKEND)
    ours = caches(REDOXIDE_BACKEND, {"COMPRESSOR": redoxide_compressor(compressor)})
    builtin.set_many(BUILTIN_VALUES, timeout=None)
    assert_reads(ours, BUILTIN_VALUES)
    assert asyncio.run(ours.aget_many(list(BUILTIN_VALUES))) == BUILTIN_VALUES


def test_builtin_reads_what_redoxide_wrote(caches: Callable[..., Any]) -> None:
    builtin = caches(BUILTIN_BACKEND)
    ours = caches(REDOXIDE_BACKEND)
    ours.set_many(BUILTIN_VALUES, timeout=None)
    assert_reads(builtin, BUILTIN_VALUES)
    builtin.clear()
    for key, value in BUILTIN_VALUES.items():
        asyncio.run(ours.aset(key, value, timeout=None))
    assert_reads(builtin, BUILTIN_VALUES)


def test_builtin_reads_what_redoxide_wrote_with_pickle_protocol_options(
    caches: Callable[..., Any],
) -> None:
    builtin = caches(BUILTIN_BACKEND)
    ours = caches(REDOXIDE_BACKEND, {"PICKLE_VERSION": 2})
    ours.set("large", LARGE)
    assert builtin.get("large") == LARGE


# -- default settings: the backend under test, the builtin and django-redis --------------------


COMPAT_PARAMS = {"KEY_PREFIX": "compat", "VERSION": 2}


COMPAT_VALUES: dict[str, Any] = {
    "int": 42,
    "negative_int": -7,
    "zero": 0,
    "big_int": 2**70,
    "bool": True,
    "float": 3.5,
    "str": "héllo wörld",
    "empty_str": "",
    "bytes": b"\x00\x01binary\xff",
    "dict": {"a": [1, 2, {"b": None}], "c": ("t", 1.5)},
    "list": [1, "two", 3.0],
    "set": {1, 2, 3},
    "datetime": datetime.datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=datetime.timezone.utc),
    "date": datetime.date(2024, 2, 29),
    "decimal": Decimal("1234.5678"),
}


@pytest.fixture
def backends(redis_server: RedisServer) -> Iterator[dict[str, Any]]:
    """Yield the backend under test and both reference backends, on one flushed server."""
    import redis.utils

    assert redis.utils.HIREDIS_AVAILABLE, "the builtin backend should run on hiredis here"
    redis_server.cli("flushall")
    made = {
        "under_test": build_cache(redis_server.url, COMPAT_PARAMS),
        "builtin": build_cache_of(BUILTIN_BACKEND, redis_server.url),
        "django_redis": build_cache_of(DJANGO_REDIS_BACKEND, redis_server.url),
    }
    yield made
    for cache in made.values():
        cache.close()


def build_cache_of(backend: str, location: str) -> Any:
    from django.utils.module_loading import import_string

    return import_string(backend)(location, dict(COMPAT_PARAMS))


REFERENCES = ["builtin", "django_redis"]


@pytest.mark.parametrize("writer", REFERENCES)
def test_reads_what_a_reference_backend_wrote(backends: dict[str, Any], writer: str) -> None:
    backends[writer].set_many(COMPAT_VALUES, timeout=None)
    reader = backends["under_test"]
    for name, value in COMPAT_VALUES.items():
        got = reader.get(name)
        assert got == value, name
        assert type(got) is type(value), name
    assert reader.get_many(list(COMPAT_VALUES)) == COMPAT_VALUES


@pytest.mark.parametrize("reader", REFERENCES)
def test_reference_backend_reads_what_we_wrote(backends: dict[str, Any], reader: str) -> None:
    backends["under_test"].set_many(COMPAT_VALUES, timeout=None)
    for name, value in COMPAT_VALUES.items():
        got = backends[reader].get(name)
        assert got == value, name
        assert type(got) is type(value), name


@pytest.mark.parametrize("reader", REFERENCES)
def test_reference_backend_reads_single_sets(backends: dict[str, Any], reader: str) -> None:
    for name, value in COMPAT_VALUES.items():
        backends["under_test"].set(name, value)
    assert backends[reader].get_many(list(COMPAT_VALUES)) == COMPAT_VALUES


@pytest.mark.parametrize("writer", REFERENCES)
def test_async_reads_what_a_reference_backend_wrote(backends: dict[str, Any], writer: str) -> None:
    import asyncio

    for name, value in COMPAT_VALUES.items():
        backends[writer].set(name, value)

    async def read() -> tuple[dict[str, Any], dict[str, Any]]:
        cache = backends["under_test"]
        singles = {name: await cache.aget(name) for name in COMPAT_VALUES}
        return singles, await cache.aget_many(list(COMPAT_VALUES))

    singles, many = asyncio.run(read())
    assert singles == COMPAT_VALUES
    assert many == COMPAT_VALUES


def test_ints_are_stored_as_raw_digits(backends: dict[str, Any], redis_client: Any) -> None:
    cache = backends["under_test"]
    cache.set("n", 42)
    cache.set("neg", -7)
    cache.set("big", 2**70)
    cache.set_many({"m": 5})
    assert redis_client.get("compat:2:n") == b"42"
    assert redis_client.get("compat:2:neg") == b"-7"
    assert redis_client.get("compat:2:big") == str(2**70).encode()
    assert redis_client.get("compat:2:m") == b"5"


def test_async_ints_are_stored_as_raw_digits(backends: dict[str, Any], redis_client: Any) -> None:
    import asyncio

    cache = backends["under_test"]

    async def write() -> None:
        await cache.aset("n", 42)
        await cache.aset_many({"m": 5})
        await cache.aadd("a", 6)

    asyncio.run(write())
    assert redis_client.get("compat:2:n") == b"42"
    assert redis_client.get("compat:2:m") == b"5"
    assert redis_client.get("compat:2:a") == b"6"


@pytest.mark.parametrize("name", [n for n in COMPAT_VALUES if type(COMPAT_VALUES[n]) is not int])
def test_other_values_are_pickled(backends: dict[str, Any], redis_client: Any, name: str) -> None:
    backends["under_test"].set(name, COMPAT_VALUES[name])
    raw = redis_client.get(f"compat:2:{name}")
    assert raw[:1] == b"\x80", raw  # the pickle protocol opcode
    assert pickle.loads(raw) == COMPAT_VALUES[name]


def test_bool_is_pickled_not_raw(backends: dict[str, Any], redis_client: Any) -> None:
    backends["under_test"].set("flag", False)
    raw = redis_client.get("compat:2:flag")
    assert raw != b"0"
    assert pickle.loads(raw) is False
    assert backends["under_test"].get("flag") is False


@pytest.mark.parametrize("writer", REFERENCES)
def test_incr_on_a_value_a_reference_backend_wrote(
    backends: dict[str, Any], redis_client: Any, writer: str
) -> None:
    backends[writer].set("counter", 10)
    assert backends["under_test"].incr("counter", 5) == 15
    assert backends["under_test"].decr("counter") == 14
    assert redis_client.get("compat:2:counter") == b"14"
    assert backends[writer].get("counter") == 14


@pytest.mark.parametrize("other", REFERENCES)
def test_reference_backend_incr_on_a_value_we_wrote(
    backends: dict[str, Any], redis_client: Any, other: str
) -> None:
    backends["under_test"].set("counter", 10)
    assert backends[other].incr("counter", 3) == 13
    assert backends["under_test"].get("counter") == 13
    assert redis_client.get("compat:2:counter") == b"13"


def test_incr_beyond_64_bits_on_a_value_the_builtin_wrote(
    backends: dict[str, Any], redis_client: Any
) -> None:
    backends["builtin"].set("big", 2**70)
    assert backends["under_test"].incr("big") == 2**70 + 1
    assert redis_client.get("compat:2:big") == str(2**70 + 1).encode()
    assert backends["builtin"].get("big") == 2**70 + 1


def test_async_incr_on_a_value_the_builtin_wrote(backends: dict[str, Any]) -> None:
    import asyncio

    backends["builtin"].set("counter", 100)
    assert asyncio.run(backends["under_test"].aincr("counter", 11)) == 111
    assert backends["builtin"].get("counter") == 111


def test_versions_and_prefixes_line_up(backends: dict[str, Any], redis_client: Any) -> None:
    backends["builtin"].set("v", "version three", version=3)
    assert backends["under_test"].get("v", version=3) == "version three"
    assert backends["under_test"].get("v") is None
    backends["under_test"].set("w", "ours", version=9)
    assert backends["django_redis"].get("w", version=9) == "ours"
    assert redis_client.exists("compat:9:w") == 1


def test_keys_are_identical_across_backends(backends: dict[str, Any], redis_client: Any) -> None:
    def stored_keys(cache: Any) -> list[bytes]:
        redis_client.flushdb()
        cache.set("k", "v")
        cache.set_many({"a": 1, "ü": 2})
        return sorted(redis_client.keys("*"))

    ours = stored_keys(backends["under_test"])
    assert ours == stored_keys(backends["builtin"])
    assert ours == stored_keys(backends["django_redis"])


def test_has_key_and_delete_across_backends(backends: dict[str, Any]) -> None:
    backends["django_redis"].set("shared", {"x": 1})
    assert backends["under_test"].has_key("shared") is True
    assert backends["under_test"].delete("shared") is True
    assert backends["builtin"].has_key("shared") is False
