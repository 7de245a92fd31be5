"""Interop with the real packages on one server, both directions, for every serializer x
compressor that django-redis offers, and with Django's builtin RedisCache.

What django-redis (or the builtin) wrote, redoxide reads with the matching settings (same
KEY_PREFIX and VERSION); what redoxide wrote, they read. Values are small ones (below
redoxide's default COMPRESS_MIN_LENGTH, above django-redis' 15 bytes, so only django-redis
compresses them) and a ~14 KiB list of 80 user-like dicts (both compress it).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import BUILTIN_BACKEND
from django.utils.module_loading import import_string
from redis_server import RedisServer

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
