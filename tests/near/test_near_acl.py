"""The near cache under an ACL user limited to the application's keys (``~app:*``, what
managed services hand out): it needs no key outside the cache's own names, so it stays on,
serves hits and hears other clients' writes. Where even its database marker is refused (a
pattern narrower than KEY_PREFIX:*), it stays on and coherent, and only SWAPDB goes unseen,
which it says once."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.backend import is_redoxide
from support.dispatch import Ops
from support.near import serving, wait_for, warm
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's near cache")

PASSWORD = "near-acl-pw"


@pytest.fixture
def acl_user(near_server: RedisServer) -> Iterator[Callable[..., tuple[str, str]]]:
    """Return a factory: ``acl_user(pattern_of, *rules)`` makes an ACL user whose key pattern
    is ``pattern_of(prefix)`` for a fresh KEY_PREFIX; it returns (LOCATION, KEY_PREFIX). The
    users are deleted when the test ends."""
    made: list[str] = []

    def factory(pattern_of: Callable[[str], str], *rules: str) -> tuple[str, str]:
        tag = uuid.uuid4().hex[:8]
        user, prefix = f"app{tag}", f"app{tag}"
        near_server.cli(
            "ACL", "SETUSER", user, "on", f">{PASSWORD}", pattern_of(prefix), "+@all", *rules
        )
        made.append(user)
        return f"redis://{user}:{PASSWORD}@127.0.0.1:{near_server.port}/0", prefix

    yield factory
    for user in made:
        near_server.cli("ACL", "DELUSER", user)


def _server_key(cache: Any, key: str) -> str:
    return str(cache.make_and_validate_key(key))


@pytest.mark.parametrize("rules", [(), ("-ping", "-echo")], ids=["all-commands", "no-ping"])
def test_a_user_limited_to_the_apps_keys_keeps_the_near_cache(
    make_near: Callable[..., Any],
    acl_user: Callable[..., tuple[str, str]],
    writer: Any,
    mode: str,
    rules: tuple[str, ...],
) -> None:
    location, prefix = acl_user(lambda p: f"~{p}:*", *rules)
    cache = make_near(location, KEY_PREFIX=prefix)
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1  # a hit from process memory
    before = cache.near_cache_stats()["hits"]
    assert ops.get("cfg:a") == 1
    assert cache.near_cache_stats()["hits"] == before + 1
    stats = cache.near_cache_stats()
    assert stats["enabled"] is True
    assert stats["swapdb_watched"] is True
    # Its marker is one of the cache's own names (the ACL lets it write it), but no key of
    # the cache's version: keys() and delete_pattern() never meet it.
    markers = [k.decode() for k in writer.scan_iter(match=f"{prefix}:*")]
    assert [m for m in markers if not m.startswith(f"{prefix}:1:")], markers
    assert cache.keys("*") == ["cfg:a"]
    # Another client's write reaches it: the new value is read once its invalidation came.
    writer.set(_server_key(cache, "cfg:a"), b"5")
    wait_for("the new value", lambda: ops.get("cfg:a") == 5, timeout=5)
    assert cache.near_cache_stats()["invalidations"] >= 1


def test_a_refused_marker_leaves_the_near_cache_on_without_swapdb_detection(
    make_near: Callable[..., Any],
    acl_user: Callable[..., tuple[str, str]],
    writer: Any,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    # Only the keys of version 1 (so not the marker), and no ECHO either: nothing but PING,
    # HELLO, CLIENT TRACKING and the kept keys' own reads and writes.
    location, prefix = acl_user(lambda p: f"~{p}:1:*", "-echo")
    cache = make_near(location, KEY_PREFIX=prefix)
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    with caplog.at_level(logging.WARNING, logger="redoxide"):
        assert warm(cache, "cfg:a") == 1
        for _ in range(3):
            assert ops.get("cfg:a") == 1
    stats = cache.near_cache_stats()
    assert stats["enabled"] is True
    assert stats["serving"] is True
    assert stats["swapdb_watched"] is False
    said = [r.getMessage() for r in caplog.records if "SWAPDB" in r.getMessage()]
    assert len(said) == 1, said
    assert "NOPERM" in said[0]
    assert "near cache is off" not in said[0]
    # Still coherent through tracking.
    writer.set(_server_key(cache, "cfg:a"), b"5")
    wait_for("the new value", lambda: ops.get("cfg:a") == 5, timeout=5)
    serving(cache)
    assert warm(cache, "cfg:a") == 5
    assert cache.near_cache_stats()["enabled"] is True


def test_a_refused_probe_turns_the_near_cache_off_with_one_warning(
    make_near: Callable[..., Any],
    acl_user: Callable[..., tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No marker and no PING: nothing proves the tracking connection is alive, so nothing is
    # served from memory; the cache works as without a near cache, and says why once.
    location, prefix = acl_user(lambda p: f"~{p}:1:*", "-ping")
    cache = make_near(location, KEY_PREFIX=prefix)
    cache.set("cfg:a", 1)
    with caplog.at_level(logging.WARNING, logger="redoxide"):
        wait_for(
            "the refusal",
            lambda: cache.get("cfg:a") == 1 and not cache.near_cache_stats()["enabled"],
        )
        for _ in range(3):
            assert cache.get("cfg:a") == 1
    said = [r.getMessage() for r in caplog.records if "near cache is off" in r.getMessage()]
    assert len(said) == 1, said
    assert "PING (NOPERM)" in said[0]
    assert cache.near_cache_stats()["hits"] == 0


def test_a_refused_pttl_turns_the_near_cache_off_with_one_warning(
    make_near: Callable[..., Any],
    acl_user: Callable[..., tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    # A fill reads GET and PTTL (a kept copy never outlives the key): a user who may read
    # the key but not its PTTL could never keep anything. Off, said once; reads still work.
    location, prefix = acl_user(lambda p: f"~{p}:*", "-pttl")
    cache = make_near(location, KEY_PREFIX=prefix)
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    with caplog.at_level(logging.WARNING, logger="redoxide"):
        wait_for(
            "the refusal",
            lambda: ops.get("cfg:a") == 1 and not cache.near_cache_stats()["enabled"],
        )
        for _ in range(3):
            assert ops.get("cfg:a") == 1
            assert ops.get_many(["cfg:a"]) == {"cfg:a": 1}
    said = [r.getMessage() for r in caplog.records if "near cache is off" in r.getMessage()]
    assert len(said) == 1, said
    assert "PTTL (NOPERM)" in said[0]
    stats = cache.near_cache_stats()
    assert stats["hits"] == 0
    assert stats["entries"] == 0


def _slashed(key: str, key_prefix: str, version: Any) -> str:
    return f"{key_prefix}/{version}/{key}"


def _slashed_numbered(key: str, key_prefix: str, version: Any) -> str:
    return f"{key_prefix}/v{int(version)}/{key}"


@pytest.mark.parametrize(
    ("key_func", "watched"),
    [(_slashed, True), (_slashed_numbered, False)],
    ids=["version-as-text", "version-as-number"],
)
def test_a_custom_key_function_names_the_marker(
    make_near: Callable[..., Any],
    acl_user: Callable[..., tuple[str, str]],
    writer: Any,
    caplog: pytest.LogCaptureFixture,
    key_func: Callable[..., str],
    watched: bool,
) -> None:
    # The user may touch only what this KEY_FUNCTION makes with KEY_PREFIX (~prefix/*). One
    # that takes the version as text names the marker too; one that wants a number cannot,
    # and the marker's refusal leaves the near cache on without SWAPDB detection.
    location, prefix = acl_user(lambda p: f"~{p}/*")
    version_part = "1" if watched else "v1"
    near = {"PREFIXES": [f"{prefix}/{version_part}/cfg:"], "MAX_STALE_MS": 200}
    cache = make_near(location, near=near, KEY_PREFIX=prefix, KEY_FUNCTION=key_func)
    cache.set("cfg:a", 1)
    with caplog.at_level(logging.WARNING, logger="redoxide"):
        assert warm(cache, "cfg:a") == 1
    stats = cache.near_cache_stats()
    assert stats["enabled"] is True
    assert stats["swapdb_watched"] is watched
    said = [r.getMessage() for r in caplog.records if "SWAPDB" in r.getMessage()]
    assert len(said) == (0 if watched else 1), said
    writer.set(_server_key(cache, "cfg:a"), b"5")
    wait_for("the new value", lambda: cache.get("cfg:a") == 5, timeout=5)


def test_clear_of_the_caches_own_keys_keeps_the_near_cache(
    make_near: Callable[..., Any],
    acl_user: Callable[..., tuple[str, str]],
    writer: Any,
) -> None:
    # CLEAR_PREFIX_ONLY (the only clear() such a user may run: FLUSHDB touches every key) and
    # delete_pattern() delete the cache's keys; whether or not the marker goes with them, the
    # near cache goes on serving, and another client's write still reaches it.
    location, prefix = acl_user(lambda p: f"~{p}:*")
    cache = make_near(location, KEY_PREFIX=prefix, CLEAR_PREFIX_ONLY=True)
    cache.set("cfg:a", 1)
    assert warm(cache, "cfg:a") == 1
    assert cache.clear() is True
    assert cache.get("cfg:a") is None
    cache.set("cfg:a", 2)
    assert warm(cache, "cfg:a") == 2
    cache.delete_pattern("*")
    assert cache.get("cfg:a") is None
    cache.set("cfg:a", 3)
    assert warm(cache, "cfg:a") == 3
    writer.set(_server_key(cache, "cfg:a"), b"5")
    wait_for("the new value", lambda: cache.get("cfg:a") == 5, timeout=5)
    assert cache.near_cache_stats()["enabled"] is True
