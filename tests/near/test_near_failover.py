"""The near cache across a failover (Sentinel, Cluster) and the server's own evictions: the
new primary is tracked, the store is flushed on the switch, and writes made on the new
primary are read."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from redoxide.exceptions import CacheError
from support.backend import build_cache
from support.near import after_stale_bound, near_options, serving, wait_for, warm
from support.servers import Cluster, RedisServer, SentinelSet


def _read(cache: Any, key: str) -> Any:
    """get, or the error class name while the topology settles."""
    try:
        return cache.get(key)
    except CacheError as exc:
        return type(exc).__name__


def _pair(location: Any, options: dict[str, Any]) -> tuple[Any, Any]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    plain = build_cache(location, {"KEY_PREFIX": prefix, "OPTIONS": options})
    near = build_cache(
        location,
        {"KEY_PREFIX": prefix, "OPTIONS": {**options, "NEAR_CACHE": near_options()}},
    )
    return near, plain


def _after_switch(near: Any, plain: Any, keys: list[str]) -> None:
    """Write new values on the new primary; the near cache must read them."""
    wait_for("writes on the new primary", lambda: _write_all(plain, keys), timeout=30)
    after_stale_bound()
    wait_for("reads after the switch", lambda: _read(near, keys[0]) == "new", timeout=30)
    for key in keys:
        assert _read(near, key) == "new"
    assert near.near_cache_stats()["flushes"]["topology"] >= 2  # the first nodes, the new ones
    serving(near)
    assert warm(near, keys[0]) == "new"


def _write_all(cache: Any, keys: list[str]) -> bool:
    try:
        cache.set_many({k: "new" for k in keys})
    except CacheError:
        return False
    return True


@pytest.mark.slow
def test_sentinel_failover_tracks_the_new_primary() -> None:
    with SentinelSet() as sset:
        options = {"SENTINELS": sset.sentinel_addresses, "SOCKET_TIMEOUT": 0.5,
                   "SOCKET_CONNECT_TIMEOUT": 0.5}  # fmt: skip
        near, plain = _pair(f"redis://{sset.service}/0", options)
        keys = [f"cfg:{i}" for i in range(5)]
        plain.set_many({k: "old" for k in keys})
        assert warm(near, keys[0]) == "old"
        old_port = sset.current_primary_port()
        sset.node_for_port(old_port).kill()
        sset.wait_for_new_primary(old_port)
        _after_switch(near, plain, keys)


@pytest.mark.slow
def test_cluster_failover_tracks_the_promoted_primary() -> None:
    with Cluster() as own:
        options = {"CLUSTER": True, "SOCKET_TIMEOUT": 0.5, "SOCKET_CONNECT_TIMEOUT": 0.5}
        near, plain = _pair(own.urls, options)
        keys = [f"cfg:{i}" for i in range(20)]
        plain.set_many({k: "old" for k in keys})
        serving(near)
        assert near.get_many(keys) == {k: "old" for k in keys}
        own.primaries()[0].kill()
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "no replica was promoted"
            try:
                own.wait_ok(timeout=0.2)
                if len(own.primaries()) == 3:
                    break
            except RuntimeError:
                pass
        _after_switch(near, plain, keys)


@pytest.mark.slow
def test_a_slot_moved_between_primaries_stays_coherent() -> None:
    from redoxide._redoxide import key_slot

    with Cluster() as own:
        near, plain = _pair(own.urls, {"CLUSTER": True})
        plain.set("cfg:moving", "old")
        serving(near)
        assert warm(near, "cfg:moving") == "old"
        made = near.make_and_validate_key("cfg:moving")
        own.migrate(key_slot(made), [made], finish=True)
        # Written on the new owner, which this process tracks as well (BCAST on every primary).
        wait_for("a write on the new owner", lambda: _write_all(plain, ["cfg:moving"]))
        after_stale_bound()
        assert _read(near, "cfg:moving") == "new"
        assert warm(near, "cfg:moving") == "new"
        plain.set("cfg:moving", "newer")
        after_stale_bound()
        assert near.get("cfg:moving") == "newer"


@pytest.mark.slow
def test_an_own_write_of_a_kept_key_whose_slot_moved_goes_through_the_router() -> None:
    # The near client's table still names the old owner: the write sent through that node's
    # tracking connection is refused (MOVED) and applied by the router on the new owner; the
    # near cache keeps nothing stale, and reads the new owner's value.
    from redoxide._redoxide import key_slot

    with Cluster() as own:
        near, plain = _pair(own.urls, {"CLUSTER": True})
        plain.set("cfg:moving", "old")
        serving(near)
        assert warm(near, "cfg:moving") == "old"
        before = near.near_cache_stats()
        near.set("cfg:kept", "mine")  # a key that does not move: kept as written
        assert near.get("cfg:kept") == "mine"
        assert near.near_cache_stats()["own_writes_kept"] == before["own_writes_kept"] + 1
        made = near.make_and_validate_key("cfg:moving")
        own.migrate(key_slot(made), [made], finish=True)
        near.set("cfg:moving", "rerouted")
        assert plain.get("cfg:moving") == "rerouted"
        wait_for("the new owner tracked", lambda: _read(near, "cfg:moving") == "rerouted")
        assert warm(near, "cfg:moving") == "rerouted"
        plain.set("cfg:moving", "theirs")
        wait_for("another client's write", lambda: _read(near, "cfg:moving") == "theirs")
        # The same refusal met by an awaited write.
        plain.set("cfg:moving2", "old")
        assert warm(near, "cfg:moving2") == "old"
        made = near.make_and_validate_key("cfg:moving2")
        own.migrate(key_slot(made), [made], finish=True)
        asyncio.run(near.aset("cfg:moving2", "rerouted"))
        assert plain.get("cfg:moving2") == "rerouted"
        wait_for("the new owner's value", lambda: _read(near, "cfg:moving2") == "rerouted")
        # A set_many over several slots, one of which moved: the other slots' keys go through
        # their primaries' tracking connections and stay kept as written; the moved slot's
        # part, refused, goes through the router. Sync, then awaited.
        for run in ("sync", "async"):
            many = {f"cfg:{run}:{i}": f"{run}{i}" for i in range(4)}
            slots = {key_slot(near.make_and_validate_key(k)) for k in many}
            assert len(slots) == len(many)  # four slots
            plain.set_many(dict.fromkeys(many, "old"))
            for key in many:
                assert warm(near, key) == "old"
            first = near.make_and_validate_key(f"cfg:{run}:0")
            own.migrate(key_slot(first), [first], finish=True)
            before = near.near_cache_stats()
            if run == "sync":
                near.set_many(many)
            else:
                asyncio.run(near.aset_many(many))
            assert plain.get_many(list(many)) == many
            kept = near.near_cache_stats()["own_writes_kept"] - before["own_writes_kept"]
            assert kept == len(many) - 1
            for key, value in many.items():
                wait_for(f"{key} read back", lambda k=key, v=value: _read(near, k) == v)


def test_keys_the_server_evicts_are_dropped(make_near: Callable[..., Any]) -> None:
    import redis

    with RedisServer("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru") as server:
        cache = make_near(server.url)
        cache.set("cfg:a", "kept")
        assert warm(cache, "cfg:a") == "kept"
        writer = redis.Redis(port=server.port)
        made = cache.make_and_validate_key("cfg:a")
        i = 0
        while writer.exists(made):
            writer.set(f"flood:{i}", b"z" * 10_000)
            i += 1
            assert i < 100_000, "the server never evicted the key"
        after_stale_bound()
        assert cache.get("cfg:a") is None
        assert cache.near_cache_stats()["invalidations"] >= 1
        writer.close()
