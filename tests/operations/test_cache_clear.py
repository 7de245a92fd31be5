"""``manage.py cache_clear``: what each filter deletes (and what it leaves), FLUSHDB refused
without --yes, and failures that say so instead of reporting success."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import caches
from support.backend import is_redoxide
from support.operations import run
from support.secrecy import SECRET
from support.servers import Cluster, RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's app")

Use = Callable[..., None]


@pytest.fixture
def filled(project: Use, server_cache: dict[str, Any], redis_client: Any) -> Any:
    """A cache with KEY_PREFIX "site": keys of versions 1 and 2, and a key of someone else."""
    project({"default": {**server_cache, "KEY_PREFIX": "site"}})
    cache = caches["default"]
    cache.set_many({"user:1": 1, "user:2": 2, "page:1": 3})
    cache.set_many({"user:1": 10, "page:9": 90}, version=2)
    redis_client.set("foreign", "not the cache's")
    return cache


def raw_keys(redis_client: Any) -> list[str]:
    return sorted(k.decode() for k in redis_client.keys("*"))


def test_clear_without_yes_refuses_to_flush_and_deletes_nothing(
    filled: Any, redis_client: Any
) -> None:
    before = raw_keys(redis_client)
    outcome = run("cache_clear")
    assert outcome.code == 2
    assert "FLUSHDB" in outcome.err and "--yes" in outcome.err
    assert "database 0 of redis://127.0.0.1:" in outcome.err
    assert raw_keys(redis_client) == before


def test_clear_with_yes_flushes_the_database(filled: Any, redis_client: Any) -> None:
    outcome = run("cache_clear", "default", "--yes", "--json")
    assert outcome.code == 0
    assert outcome.json()["action"] == "flushdb"
    assert raw_keys(redis_client) == []


def test_clear_prefix_only_deletes_every_version_under_the_prefix(
    filled: Any, redis_client: Any
) -> None:
    outcome = run("cache_clear", "--prefix-only")
    assert outcome.code == 0 and "'site'" in outcome.out
    assert raw_keys(redis_client) == ["foreign"]


def test_clear_of_a_version_deletes_only_that_version(filled: Any, redis_client: Any) -> None:
    report = run("cache_clear", "--version", "2", "--json").json()
    assert report["deleted"] == 2 and report["version"] == 2
    assert raw_keys(redis_client) == ["foreign", "site:1:page:1", "site:1:user:1", "site:1:user:2"]


def test_clear_of_a_pattern_deletes_only_the_matching_keys(filled: Any, redis_client: Any) -> None:
    outcome = run("cache_clear", "--pattern", "user:*")
    assert outcome.code == 0
    assert outcome.out.strip() == "Deleted 2 key(s) matching 'user:*', version 1."
    assert raw_keys(redis_client) == ["foreign", "site:1:page:1", "site:2:page:9", "site:2:user:1"]


def test_clear_of_a_cache_that_clears_its_prefix_only_needs_no_yes(
    project: Use, server_cache: dict[str, Any], redis_client: Any
) -> None:
    entry = {**server_cache, "KEY_PREFIX": "p", "OPTIONS": {"clear_prefix_only": True}}
    project({"default": entry})
    caches["default"].set("k", 1)
    redis_client.set("foreign", 1)
    assert run("cache_clear").code == 0
    assert raw_keys(redis_client) == ["foreign"]


def test_clear_of_a_cluster_pattern_deletes_on_every_primary(
    project: Use, cluster: Cluster
) -> None:
    entry = {"BACKEND": "redoxide.RedisCache", "LOCATION": cluster.urls[:1]}
    project({"default": {**entry, "OPTIONS": {"CLUSTER": True}}})
    cluster.flushall()
    cache = caches["default"]
    cache.set_many({f"c{i}": i for i in range(50)} | {"keep": 1})
    report = run("cache_clear", "--pattern", "c*", "--json").json()
    assert report["deleted"] == 50
    assert cache.keys("*") == ["keep"]


def test_clear_with_the_server_down_fails_even_with_fail_open(project: Use) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    options = {"IGNORE_EXCEPTIONS": True, "LOG_IGNORED_EXCEPTIONS": True}
    project({"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": url, "OPTIONS": options}})
    for args in (["--yes"], ["--prefix-only"], ["--pattern", "x*"]):
        outcome = run("cache_clear", *args)
        assert outcome.code == 1, args
        assert outcome.out == "" and "ConnectionInterrupted" in outcome.err


def test_a_refused_flush_names_the_server_without_its_password(
    project: Use, auth_server: RedisServer
) -> None:
    project({"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": auth_server.url}})
    outcome = run("cache_clear")
    assert outcome.code == 2
    assert f"127.0.0.1:{auth_server.port}" in outcome.err
    assert SECRET not in outcome.err and "***" in outcome.err


def test_prefix_only_leaves_a_cache_whose_prefix_extends_this_ones_and_foreign_names(
    project: Use, server_cache: dict[str, Any], redis_client: Any
) -> None:
    project(
        {
            "default": {**server_cache, "KEY_PREFIX": "site"},
            "sessions": {**server_cache, "KEY_PREFIX": "site:sessions"},
        }
    )
    caches["default"].set_many({"a": 1, "b:c": 2})
    caches["default"].set("a", 3, version=4)
    caches["sessions"].set_many({"abc": 1, "x": 2})
    redis_client.set("site:lock", "no version part: no cache of this shape wrote it")
    outcome = run("cache_clear", "--prefix-only")
    assert outcome.code == 0, outcome.err
    left = ["site:lock", "site:sessions:1:abc", "site:sessions:1:x"]
    assert raw_keys(redis_client) == left
    # The same with CLEAR_PREFIX_ONLY in the settings and no flag.
    caches["default"].set("a", 1)
    entry = {**server_cache, "KEY_PREFIX": "site", "OPTIONS": {"CLEAR_PREFIX_ONLY": True}}
    project({"default": entry, "sessions": {**server_cache, "KEY_PREFIX": "site:sessions"}})
    assert run("cache_clear").code == 0
    assert raw_keys(redis_client) == left


def test_prefix_only_needs_yes_when_another_caches_names_are_of_its_shape(
    project: Use, server_cache: dict[str, Any], redis_client: Any
) -> None:
    entry = {**server_cache, "KEY_PREFIX": "site", "OPTIONS": {"CLEAR_PREFIX_ONLY": True}}
    project({"default": entry, "nested": {**server_cache, "KEY_PREFIX": "site:1"}})
    caches["default"].set("a", 1)
    caches["nested"].set("k", 2)
    before = raw_keys(redis_client)
    for args in (["--prefix-only"], []):
        outcome = run("cache_clear", *args)
        assert outcome.code == 2, args
        assert "CACHES['nested']" in outcome.err and "--yes" in outcome.err
        assert raw_keys(redis_client) == before
    # "site:1"'s --pattern can take "site"'s keys ("site:1:a" is its key "a" too).
    outcome = run("cache_clear", "nested", "--pattern", "*")
    assert outcome.code == 2 and "CACHES['default']" in outcome.err
    assert raw_keys(redis_client) == before

    assert run("cache_clear", "--prefix-only", "--yes").code == 0
    assert raw_keys(redis_client) == []


def versionless(key: Any, key_prefix: str, version: Any) -> str:
    return f"{key_prefix}:{key}"


def test_prefix_only_needs_yes_when_the_names_hold_no_version(
    project: Use, server_cache: dict[str, Any], redis_client: Any
) -> None:
    # Its names are "site:<key>": another writer's "site:lock" is of that shape too.
    entry = {**server_cache, "KEY_PREFIX": "site", "KEY_FUNCTION": f"{__name__}.versionless"}
    project({"default": {**entry, "OPTIONS": {"CLEAR_PREFIX_ONLY": True}}})
    caches["default"].set("a", 1)
    redis_client.set("site:lock", "held by another writer")
    redis_client.set("other", "x")
    before = raw_keys(redis_client)
    for args in (["--prefix-only"], []):
        outcome = run("cache_clear", *args)
        assert outcome.code == 2, args
        assert "'site:*'" in outcome.err and "redoxide.W008" in outcome.err
        assert raw_keys(redis_client) == before

    assert run("cache_clear", "--yes").code == 0
    assert raw_keys(redis_client) == ["other"]
