"""The one fill protocol (NearCache.fill, in the core): a miss's token, GET and PTTL in one
round trip to the server that owns the key, installed only if the token survived and that
server is one the near cache tracks. One server's get runs it inside the core; a router's get
runs it on the primary its topology names (``owner``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redoxide import _redoxide
from redoxide._protocols import owner
from support.near import serving
from support.servers import RedisServer


def test_a_fill_answered_by_a_server_not_tracked_is_not_installed(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    # A router's fill reads the primary that owned the key when it was asked; a failover may
    # have taken that server out of the tracked set since: its reply is returned, not kept.
    cache = make_near()
    serving(cache)
    store = cache._client._store
    key = cache.make_and_validate_key("cfg:f")
    with RedisServer() as other:
        elsewhere = _redoxide.Client(other.url, connect_timeout=1.0, response_timeout=2.0)
        there = redis.Redis(host="127.0.0.1", port=other.port)
        there.set(key, b"there")
        there.close()
        writer.set(key, b"here")  # another process's write: nothing kept here yet
        before = cache.near_cache_stats()

        def fill(client: Any) -> Any:
            token = store.lookup(key)
            assert type(token) is int, token  # a miss: the fill's token
            if mode == "sync":
                return store.fill(client, key, token)

            async def awaited() -> Any:
                from redoxide._bridges import bridge

                return await store.fill(client, key, token, bridge())

            return asyncio.run(awaited())

        assert fill(elsewhere) == b"there"
        assert cache.near_cache_stats()["installs"] == before["installs"]
        assert fill(owner(cache._client, key)) == b"here"  # the tracked server's reply
        assert cache.near_cache_stats()["installs"] == before["installs"] + 1
        assert type(store.lookup(key)) is bytes  # kept now


@pytest.mark.parametrize("topology", ["cluster", "sentinel", "replicas"])
def test_a_router_fills_from_the_primary_its_topology_names(
    topology: str, request: pytest.FixtureRequest
) -> None:
    from support.backend import build_cache, topology_settings
    from support.near import near_options, stop_tracking

    settings = topology_settings(topology, request)
    options = {**settings.get("OPTIONS", {}), "NEAR_CACHE": near_options()}
    if topology == "replicas":
        options["READ_FROM_REPLICAS"] = True  # get reads replicas; a fill still reads the primary
    near = build_cache(settings["LOCATION"], {"KEY_PREFIX": "fills", "OPTIONS": options})
    try:
        near.set("cfg:o", 5)
        serving(near)
        key = near.make_and_validate_key("cfg:o")
        node = owner(near._client, key)
        assert isinstance(node, _redoxide.Client)
        assert node in (near._client.primaries() or ())
        host, _, port = node.address.rpartition(":")
        server = redis.Redis(host=host.strip("[]"), port=int(port))

        def pttls() -> int:
            return int(server.info("commandstats").get("cmdstat_pttl", {}).get("calls", 0))

        calls = pttls()
        before = near.near_cache_stats()
        assert near.get("cfg:o") == 5  # a miss: filled from the owner
        assert pttls() == calls + 1
        assert near.near_cache_stats()["installs"] == before["installs"] + 1
        assert near.get("cfg:o") == 5
        assert near.near_cache_stats()["hits"] > before["hits"]
        server.close()
    finally:
        stop_tracking(near)
