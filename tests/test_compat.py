"""Stored-format compatibility with Django's builtin RedisCache and django-redis.

On one server, with the same KEY_PREFIX and VERSION, what the builtin backend (redis-py with
hiredis) or django-redis (default pickle serializer) wrote reads back through the backend
under test, and the other way round. Ints are raw digits (so INCR works across backends),
everything else pickled.
"""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import BUILTIN_BACKEND, build_cache
from redis_server import RedisServer

PARAMS = {"KEY_PREFIX": "compat", "VERSION": 2}
DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"

VALUES: dict[str, Any] = {
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
        "under_test": build_cache(redis_server.url, PARAMS),
        "builtin": build_cache_of(BUILTIN_BACKEND, redis_server.url),
        "django_redis": build_cache_of(DJANGO_REDIS_BACKEND, redis_server.url),
    }
    yield made
    for cache in made.values():
        cache.close()


def build_cache_of(backend: str, location: str) -> Any:
    from django.utils.module_loading import import_string

    return import_string(backend)(location, dict(PARAMS))


REFERENCES = ["builtin", "django_redis"]


@pytest.mark.parametrize("writer", REFERENCES)
def test_reads_what_a_reference_backend_wrote(backends: dict[str, Any], writer: str) -> None:
    backends[writer].set_many(VALUES, timeout=None)
    reader = backends["under_test"]
    for name, value in VALUES.items():
        got = reader.get(name)
        assert got == value, name
        assert type(got) is type(value), name
    assert reader.get_many(list(VALUES)) == VALUES


@pytest.mark.parametrize("reader", REFERENCES)
def test_reference_backend_reads_what_we_wrote(backends: dict[str, Any], reader: str) -> None:
    backends["under_test"].set_many(VALUES, timeout=None)
    for name, value in VALUES.items():
        got = backends[reader].get(name)
        assert got == value, name
        assert type(got) is type(value), name


@pytest.mark.parametrize("reader", REFERENCES)
def test_reference_backend_reads_single_sets(backends: dict[str, Any], reader: str) -> None:
    for name, value in VALUES.items():
        backends["under_test"].set(name, value)
    assert backends[reader].get_many(list(VALUES)) == VALUES


@pytest.mark.parametrize("writer", REFERENCES)
def test_async_reads_what_a_reference_backend_wrote(backends: dict[str, Any], writer: str) -> None:
    import asyncio

    for name, value in VALUES.items():
        backends[writer].set(name, value)

    async def read() -> tuple[dict[str, Any], dict[str, Any]]:
        cache = backends["under_test"]
        singles = {name: await cache.aget(name) for name in VALUES}
        return singles, await cache.aget_many(list(VALUES))

    singles, many = asyncio.run(read())
    assert singles == VALUES
    assert many == VALUES


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


@pytest.mark.parametrize("name", [n for n in VALUES if type(VALUES[n]) is not int])
def test_other_values_are_pickled(backends: dict[str, Any], redis_client: Any, name: str) -> None:
    backends["under_test"].set(name, VALUES[name])
    raw = redis_client.get(f"compat:2:{name}")
    assert raw[:1] == b"\x80", raw  # the pickle protocol opcode
    assert pickle.loads(raw) == VALUES[name]


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
