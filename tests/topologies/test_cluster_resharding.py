"""Cluster resharding: MOVED and ASK redirects, for single calls and pipelined ones, and
retries that neither re-apply what was applied nor skip the pause CLUSTERDOWN asks for.

Tests that migrate slots on or pause servers use `own`, a cluster of the topology tests' own
(topologies/conftest.py); the session's `cluster` and `sentinel_set` are only read and written.
Tests marked "Regression test" come from a review of the topology routers and showed a bug
(fixed since); the other review cases are controls that pin down the behaviour the bugs were
measured against.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redoxide._redoxide import key_slot
from redoxide.exceptions import ResponseError
from redoxide.topology.parts import RETRY_PAUSE
from support.backend import build_cache, is_redoxide
from support.servers import Cluster
from support.topology import cluster_cache, name_on, node_keys, owner_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")


def test_cluster_follows_moved_and_ask_redirects() -> None:
    with Cluster() as own:
        cache = build_cache(own.urls[:1], {"OPTIONS": {"CLUSTER": True}})
        cache.set("moving", "before")
        made = cache.make_key("moving")
        slot = key_slot(made)
        # Half-way: the key is on the target, the source answers ASK.
        own.migrate(slot, [made], finish=False)
        assert cache.get("moving") == "before"
        assert asyncio.run(cache.aget("moving")) == "before"
        # Done: the source answers MOVED; the client learns the new owner.
        source = own.primary_of_slot(slot)
        target_id = next(n.cli("cluster", "myid") for n in own.primaries() if n is not source)
        for node in own.primaries():
            node.cli("cluster", "setslot", str(slot), "node", target_id)
        cache.set("moving", "after")
        assert cache.get("moving") == "after"
        assert asyncio.run(cache.aget("moving")) == "after"
        assert made in node_keys(own.primary_of_slot(slot))


# Regression test (review finding, fixed): ClusterRouter.pipeline treats ASK like MOVED: it re-
# learns the (unchanged) table and re-sends without ASKING, 6 times, then raises
# ResponseError('ASK ...'); set_many, multi-key delete_many and touch(timeout=None) all go through
# it, so they fail mid-resharding
@pytest.mark.parametrize("op", ["set_many", "delete_many", "touch"])
def test_cluster_pipelined_calls_follow_ask_during_resharding(
    own: Cluster, op: str, mode: str
) -> None:
    cache = cluster_cache(own.urls[:1])
    name = f"ask-{op}-{mode}"
    cache.set(name, "before", timeout=60)
    made = cache.make_key(name)
    slot = key_slot(made)
    target = own.migrate(slot, [made], finish=False)
    try:
        assert cache.get(name) == "before"  # single-key calls do follow ASK (control)

        async def run() -> Any:
            if op == "set_many":
                return await cache.aset_many({name: "after"})
            if op == "delete_many":
                return await cache.adelete_many([name, f"{name}-elsewhere"])
            return await cache.atouch(name, None)

        if mode == "async":
            asyncio.run(run())
        elif op == "set_many":
            cache.set_many({name: "after"})
        elif op == "delete_many":
            cache.delete_many([name, f"{name}-elsewhere"])
        else:
            assert cache.touch(name, None) is True
        expected = {"set_many": "after", "delete_many": None, "touch": "before"}[op]
        assert cache.get(name) == expected
    finally:
        own.finish_migration(slot, target)


# Regression test (review finding, fixed): after a MOVED in one node's part,
# ClusterRouter.pipeline (sync and awaited) re-sent every part, including those already
# applied: INCR counted twice, DEL's summed count too low
@pytest.mark.parametrize("what", ["incr", "del-count"])
def test_cluster_pipeline_retry_does_not_reapply_applied_commands(own: Cluster, what: str) -> None:
    cache = cluster_cache(own.urls[:1], SOCKET_TIMEOUT=2.11 if what == "incr" else 2.12)
    cache.get("warm-up")  # the router learns the slot table now
    first = f"reapply-{what}-a"
    port = owner_port(cache, first)
    moving = name_on(cache, port, f"reapply-{what}-b", on=False)
    a, b = cache.make_key(first), cache.make_key(moving)
    cache.client.execute("DEL", a)
    cache.client.execute("DEL", b)
    if what == "del-count":
        cache.set_many({first: 1, moving: 2})
    # The slot of `moving` changes owner behind the router's back (a finished resharding).
    own.migrate(key_slot(b), [b] if what == "del-count" else [], finish=True)
    if what == "incr":
        replies = cache.client.pipeline(("INCR", a), ("SET", b, "x"))
        assert replies == [1, True]
        assert cache.client.execute("GET", a) == b"1"
    else:
        assert cache.client.execute("DEL", a, b) == 2


# Regression test (review finding, fixed): the sync ClusterRouter.pipeline retries TRYAGAIN /
# CLUSTERDOWN with no pause (a single-slot call and the awaited pipeline sleep RETRY_PAUSE):
# its 5 retries are spent in about a millisecond, so set_many / delete_many fail on a blip that
# set() and aset_many() wait out
def test_cluster_sync_pipeline_pauses_before_retrying_clusterdown(own: Cluster) -> None:
    cache = cluster_cache(own.urls[:1], SOCKET_TIMEOUT=2.16)
    name = "blip"
    slot = key_slot(cache.make_key(name))
    cache.set(name, 0)  # the router learns the table now
    owner = own.primary_of_slot(slot)
    for node in own.live_nodes():
        node.cli("cluster", "delslots", str(slot))  # nobody serves it: CLUSTERDOWN
    try:
        start = time.monotonic()
        with pytest.raises(ResponseError, match=r"(?i)clusterdown"):
            cache.set(name, 1)
        single = time.monotonic() - start
        start = time.monotonic()
        with pytest.raises(ResponseError, match=r"(?i)clusterdown"):
            cache.set_many({name: 1})
        many = time.monotonic() - start
    finally:
        owner.cli("cluster", "addslots", str(slot))
        own.wait_ok()
    assert single >= 4 * RETRY_PAUSE  # control: set() pauses between its retries
    assert many >= 4 * RETRY_PAUSE, f"set_many gave up after {many * 1000:.1f} ms"
