"""A near-cached get on a router enters the core (calls into ``redoxide._redoxide``) no more
often than a plain get on the same router: hit, miss or key not kept, sync and awaited; a
get_many's fills on a cluster are placed by one slot lookup for all their keys.

Counted with ``sys.setprofile`` (every call from Python into a C function is an event), so
the counts are exact, whatever the host's speed."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from support.backend import build_cache, topology_settings
from support.entries import awaited_entries as _awaited_entries
from support.entries import check_set_entries
from support.entries import entries as _entries
from support.near import near_options, serving, stop_tracking

TOPOLOGIES = ["cluster", "sentinel", "replicas"]


async def _aget_many(cache: Any, names: list[str]) -> Any:
    return await cache.aget_many(names)


def _cache(topology: str, request: pytest.FixtureRequest, near: bool) -> Any:
    settings = topology_settings(topology, request)
    options = dict(settings.get("OPTIONS", {}))
    if near:
        options["NEAR_CACHE"] = near_options()
    prefix = f"e{uuid.uuid4().hex[:8]}"
    return build_cache(settings["LOCATION"], {"KEY_PREFIX": prefix, "OPTIONS": options})


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_near_cached_get_enters_the_core_no_more_than_a_plain_get(
    topology: str, request: pytest.FixtureRequest
) -> None:
    plain = _cache(topology, request, near=False)
    near = _cache(topology, request, near=True)
    try:
        for cache in (plain, near):
            cache.set_many({"cfg:a": 1, "cfg:b": 2, "other:c": 3})
        serving(near)
        assert near.get("cfg:a") == 1  # kept from here on
        store = near._client._store
        limit = sum(_entries(lambda: plain.get("cfg:a")).values())
        awaited_limit = sum(_awaited_entries(lambda: plain.aget("cfg:a")).values())
        assert limit >= 1 and awaited_limit >= 1

        def drop(name: str) -> None:
            store.forget_keys([near.make_and_validate_key(name)], False)

        hit = _entries(lambda: near.get("cfg:a"))
        assert hit == {"NearCache.get_routed": 1}
        drop("cfg:b")
        installs = near.near_cache_stats()["installs"]
        filled = _entries(lambda: near.get("cfg:b"))
        assert filled == {"NearCache.get_routed": 1}
        assert near.near_cache_stats()["installs"] == installs + 1  # the miss was filled
        not_kept = _entries(lambda: near.get("other:c"))
        for counts in (hit, filled, not_kept):
            assert sum(counts.values()) <= limit, counts

        awaited = [
            _awaited_entries(lambda: near.aget("cfg:a")),
            _awaited_entries(lambda: near.aget("cfg:b"), lambda: drop("cfg:b")),
            _awaited_entries(lambda: near.aget("other:c")),
        ]
        assert awaited[0] == awaited[1] == {"current_bridge": 1, "NearCache.get_routed": 1}
        for counts in awaited:
            assert sum(counts.values()) <= awaited_limit, counts
        assert near.near_cache_stats()["installs"] == installs + 2
        assert near.get("cfg:b") == 2 and near.get("other:c") == 3
    finally:
        stop_tracking(near)
        plain.close()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_near_cached_get_many_enters_the_core_no_more_than_a_plain_one(
    topology: str, request: pytest.FixtureRequest
) -> None:
    # Its keys span every primary of a cluster: the misses are placed by slot in the core,
    # and each primary's fill sent from there.
    plain = _cache(topology, request, near=False)
    near = _cache(topology, request, near=True)
    try:
        names = [f"cfg:m{i}" for i in range(12)]
        want = {name: i for i, name in enumerate(names)}
        for cache in (plain, near):
            cache.set_many(want)
        serving(near)
        limits = {
            False: sum(_entries(lambda: plain.get_many(names)).values()),
            True: sum(_awaited_entries(lambda: plain.aget_many(names)).values()),
        }
        store = near._client._store
        made = [near.make_and_validate_key(n) for n in names]

        def drop() -> None:
            store.forget_keys(made, False)

        for awaited in (False, True):
            drop()
            installs = near.near_cache_stats()["installs"]
            if awaited:  # (its first run fills them too: dropped again before the count)
                counts = _awaited_entries(lambda: near.aget_many(names), drop)
            else:
                got: list[Any] = []
                counts = _entries(lambda out=got: out.append(near.get_many(names)))
                assert got == [want]
            assert sum(counts.values()) <= limits[awaited], counts
            assert "key_slot" not in counts and "key_slots" not in counts, counts
            filled = near.near_cache_stats()["installs"] - installs
            assert filled == len(names) * (2 if awaited else 1)
        assert asyncio.run(_aget_many(near, names)) == want
        # Hits: one call, the values decoded.
        hits = _entries(lambda: near.get_many(names))
        assert sum(hits.values()) <= limits[False], hits
    finally:
        stop_tracking(near)
        plain.close()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_near_cached_set_enters_the_core_no_more_than_a_plain_set(
    topology: str, request: pytest.FixtureRequest
) -> None:
    # The store's `set_routed`: a kept key written through its primary's tracking connection
    # and kept as written, one not kept written on its primary with its drops (here and in
    # this process' other near caches, which it holds many of), in one call; no slot lookup
    # from Python.
    plain = _cache(topology, request, near=False)
    near = _cache(topology, request, near=True)
    try:
        check_set_entries(plain, near)
    finally:
        stop_tracking(near)
        plain.close()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_near_cached_command_on_a_router_enters_the_core_once_more_than_a_plain_one(
    topology: str, request: pytest.FixtureRequest
) -> None:
    # The store's `execute_routed` around the router's execute: the command's drops, here and
    # in this process' other near caches (which it holds many of), made in that one call, none
    # from Python; has_key of a kept key answered there, with no round trip.
    plain = _cache(topology, request, near=False)
    near = _cache(topology, request, near=True)
    try:
        for cache in (plain, near):
            cache.set_many({"cfg:a": 1, "cfg:b": 2, "cfg:c": 3, "other:d": 4})
        serving(near)
        assert [near.get(n) for n in ("cfg:a", "cfg:b", "cfg:c")] == [1, 2, 3]  # kept
        assert _entries(lambda: near.has_key("cfg:a")) == {"NearCache.execute_routed": 1}
        for name in ("cfg:b", "other:d"):
            limit = sum(_entries(lambda n=name: plain.delete(n)).values())
            counts = _entries(lambda n=name: near.delete(n))
            assert counts.get("NearCache.execute_routed") == 1, counts
            assert "NearCache.forget_keys" not in counts, counts
            assert sum(counts.values()) <= limit + 1, (counts, limit)
        plain.set("cfg:c", 3)
        awaited_limit = sum(_awaited_entries(lambda: plain.adelete("cfg:c")).values())
        counts = _awaited_entries(lambda: near.adelete("cfg:c"))
        assert counts.get("NearCache.execute_routed") == 1, counts
        assert "NearCache.forget_keys" not in counts, counts
        assert sum(counts.values()) <= awaited_limit + 1, (counts, awaited_limit)
        # Dropped, and gone from the servers: nothing served from memory.
        assert [near.get(n) for n in ("cfg:a", "cfg:b", "cfg:c", "other:d")] == [
            1,
            None,
            None,
            None,
        ]
        assert not near.has_key("cfg:b") and near.has_key("cfg:a")
    finally:
        stop_tracking(near)
        plain.close()
