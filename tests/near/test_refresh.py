"""Hot keys another client wrote come back in one round trip, off every caller's path: the
keys an invalidation names that this process was reading are read again at once on the
tracking connection that named them (the node that owns them), in order with its
invalidations; more than one batch of them ride along with the process' next fill (one
server, or one primary with replicas). Keys not read since their last fill are dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support.dispatch import Ops
from support.near import near_options, serving, wait_for

KEYS = [f"cfg:hot{i}" for i in range(10)]
#: What one invalidation refreshes at once, at most (`REFRESH_NOW` in src/near/tracking.rs).
AT_ONCE = 64


def _written_elsewhere(cache: Any, writer: Any, keys: list[str], value: bytes) -> dict[str, int]:
    """Another client's MSET of `keys`; return the near cache's counters from before it, once
    its invalidations have been applied and the refresh they started is installed."""
    before = cache.near_cache_stats()
    writer.mset({str(cache.make_and_validate_key(k)): value for k in keys})
    wait_for(
        "the invalidations",
        lambda: cache.near_cache_stats()["invalidations"] >= before["invalidations"] + len(keys),
    )
    return before


def test_keys_written_elsewhere_while_hit_are_refreshed_at_once(
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
    before = _written_elsewhere(cache, writer, [*KEYS, "cfg:cold"], b"1")
    wait_for(
        "the refresh to be installed",
        lambda: cache.near_cache_stats()["installs"] >= before["installs"] + len(KEYS),
    )
    after = cache.near_cache_stats()
    # The ten hot keys were read again together, not the cold one.
    assert after["refreshes"] - before["refreshes"] == len(KEYS), (before, after)
    for key in KEYS:
        assert ops.get(key) == 1
    final = cache.near_cache_stats()
    assert final["misses"] == before["misses"], (before, final)
    assert final["hits"] - after["hits"] == len(KEYS)
    # The cold key was dropped, not refreshed: read when asked for.
    assert ops.get("cfg:cold") == 1
    assert cache.near_cache_stats()["misses"] == final["misses"] + 1


def test_more_than_a_batch_rides_along_with_the_next_fill(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    # One invalidation naming more hot keys than are refreshed at once: the rest come with the
    # first fill this process sends (the first get of one of them), not one by one.
    cache = make_near(near=near_options(MAX_STALE_MS=60_000))
    ops = Ops(cache, mode)
    serving(cache)
    keys = [f"cfg:many{i}" for i in range(AT_ONCE + 6)]
    cache.set_many(dict.fromkeys(keys, 0))
    for _ in range(2):  # (filled, if the own write was not kept), then hit
        assert cache.get_many(keys) == dict.fromkeys(keys, 0)
    before = _written_elsewhere(cache, writer, keys, b"3")
    wait_for(
        "the first batch to be installed",
        lambda: cache.near_cache_stats()["installs"] >= before["installs"] + AT_ONCE,
    )
    assert [ops.get(k) for k in keys] == [3] * len(keys)
    after = cache.near_cache_stats()
    assert after["misses"] - before["misses"] == 1, (before, after)
    assert after["refreshes"] - before["refreshes"] == len(keys) - 1, (before, after)


def test_get_many_reads_the_refreshed_keys_locally(
    make_near: Callable[..., Any], writer: Any
) -> None:
    cache = make_near(near=near_options(MAX_STALE_MS=60_000))
    serving(cache)
    cache.set_many(dict.fromkeys(KEYS, 0))
    assert cache.get_many(KEYS) == dict.fromkeys(KEYS, 0)
    assert cache.get_many(KEYS) == dict.fromkeys(KEYS, 0)  # hits
    before = _written_elsewhere(cache, writer, KEYS, b"2")
    wait_for(
        "the refresh to be installed",
        lambda: cache.near_cache_stats()["installs"] >= before["installs"] + len(KEYS),
    )
    assert cache.get_many(KEYS) == dict.fromkeys(KEYS, 2)
    after = cache.near_cache_stats()
    assert after["misses"] == before["misses"], (before, after)
    assert after["refreshes"] - before["refreshes"] == len(KEYS)
