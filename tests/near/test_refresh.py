"""Hot keys another client wrote come back in one round trip: the keys the server invalidated
while this process was reading them ride along with its next fill (one server, or one primary
with replicas), instead of each costing a round trip of its own when next missed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support.dispatch import Ops
from support.near import near_options, serving, wait_for

KEYS = [f"cfg:hot{i}" for i in range(10)]


def test_keys_written_elsewhere_while_hit_are_refreshed_together(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    # MAX_STALE_MS of a minute: the gate cannot shut on a loaded host and turn a hit into a
    # miss; what is counted here is built by construction.
    cache = make_near(near=near_options(MAX_STALE_MS=60_000))
    ops = Ops(cache, mode)
    serving(cache)
    cache.set_many(dict.fromkeys(KEYS, 0))
    cache.set("cfg:cold", 0)  # kept (an own write), never read
    for key in KEYS:
        assert cache.get(key) == 0
    before = cache.near_cache_stats()
    assert before["hits"] >= len(KEYS), before
    names = {str(cache.make_and_validate_key(k)): b"1" for k in [*KEYS, "cfg:cold"]}
    writer.mset(names)
    wait_for(
        "the invalidations",
        lambda: cache.near_cache_stats()["invalidations"] >= before["invalidations"] + len(names),
    )

    assert ops.get(KEYS[0]) == 1
    after = cache.near_cache_stats()
    # One miss, and the nine other hot keys came with its fill (not the cold one).
    assert after["misses"] - before["misses"] == 1, (before, after)
    assert after["refreshes"] - before["refreshes"] == len(KEYS) - 1, (before, after)
    for key in KEYS[1:]:
        assert ops.get(key) == 1
    final = cache.near_cache_stats()
    assert final["misses"] == after["misses"], (after, final)
    assert final["hits"] - after["hits"] == len(KEYS) - 1
    # The cold key was dropped, not refreshed: read when asked for.
    assert ops.get("cfg:cold") == 1
    assert cache.near_cache_stats()["misses"] == final["misses"] + 1


def test_get_many_carries_the_refresh_too(make_near: Callable[..., Any], writer: Any) -> None:
    cache = make_near(near=near_options(MAX_STALE_MS=60_000))
    serving(cache)
    cache.set_many(dict.fromkeys(KEYS, 0))
    assert cache.get_many(KEYS) == dict.fromkeys(KEYS, 0)
    assert cache.get_many(KEYS) == dict.fromkeys(KEYS, 0)  # hits
    before = cache.near_cache_stats()
    writer.mset({str(cache.make_and_validate_key(k)): b"2" for k in KEYS})
    wait_for(
        "the invalidations",
        lambda: cache.near_cache_stats()["invalidations"] >= before["invalidations"] + len(KEYS),
    )
    assert cache.get_many(KEYS[:2]) == dict.fromkeys(KEYS[:2], 2)
    after = cache.near_cache_stats()
    assert after["refreshes"] - before["refreshes"] == len(KEYS) - 2, (before, after)
    assert cache.get_many(KEYS) == dict.fromkeys(KEYS, 2)
    assert cache.near_cache_stats()["misses"] == after["misses"]
