"""Sentinel's events move writes at once: after a planned failover (SENTINEL FAILOVER, the old
primary still up), the first write once a sentinel names the new primary lands on the new
primary, never on the old one (which loses it when it is turned into a replica); a near cache
drops what it kept from the old primary; a forked child follows the events too.

The tests share one sentinel set of their own (each planned failover moves its primary).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from support.backend import build_cache, is_redoxide
from support.near import near_options, serving, warm
from support.servers import RedisServer, SentinelSet

pytestmark = [
    pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies"),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def sset() -> Iterator[SentinelSet]:
    with SentinelSet() as running:
        yield running


_configurations = itertools.count()


def _cache(sset: SentinelSet, prefix: str = "", **options: Any) -> Any:
    """A cache with a client of its own (SOCKET_TIMEOUT tells it apart), made once the set has
    settled after an earlier test's failover: a client that learnt a primary demoted since
    would find the new one by READONLY, which is not what these tests are about."""
    _settled(sset)
    return build_cache(
        f"redis://{sset.service}/0",
        {
            "KEY_PREFIX": prefix or f"t{uuid.uuid4().hex[:8]}",
            "OPTIONS": {
                "SENTINELS": sset.sentinel_addresses,
                "SOCKET_TIMEOUT": 2.0 + next(_configurations) / 1000,
                "SOCKET_CONNECT_TIMEOUT": 1.0,
                **options,
            },
        },
    )


def _primaries(sset: SentinelSet) -> set[int]:
    """The primary port each sentinel names."""
    ports = set()
    for sentinel in sset.sentinels:
        reply = sentinel.cli("sentinel", "get-master-addr-by-name", sset.service).split()
        ports.add(int(reply[1]))
    return ports


def _settled(sset: SentinelSet) -> int:
    """Wait until no failover is under way and every sentinel names one primary, which says
    it is a primary, and has both replicas linked; return its port."""
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the sentinel set did not settle"
        ports = _primaries(sset)
        if len(ports) == 1:
            port = ports.pop()
            flags = [s.cli("sentinel", "master", sset.service).splitlines() for s in sset.sentinels]
            busy = any("failover_in_progress" in "".join(f) for f in flags)
            info = sset.node_for_port(port).info("replication")
            if (
                not busy
                and info.get("role") == "master"
                and info.get("connected_slaves") == str(len(sset.replicas))
            ):
                return port
        time.sleep(0.05)


def _planned_failover(sset: SentinelSet) -> tuple[RedisServer, RedisServer]:
    """SENTINEL FAILOVER; return (old primary, new primary) once one sentinel names the new
    one (the old primary is still up: the sentinels turn it into a replica seconds later)."""
    old_port = _settled(sset)
    sset.sentinels[1].cli("sentinel", "failover", sset.service)
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "no sentinel named a new primary"
        moved = _primaries(sset) - {old_port}
        if moved:
            return sset.node_for_port(old_port), sset.node_for_port(moved.pop())
        time.sleep(0.005)


def _watcher(cache: Any) -> Any:
    """The cache's SentinelPrimary's watcher of events (None where there is none)."""
    client = cache._client
    router = getattr(client, "_inner", client)  # under a near cache
    return getattr(router.primary, "watcher", None)


def _watching(cache: Any) -> None:
    """Make the cache ask the sentinels once (which starts following their events)."""
    cache.set("warm-up", 1)
    watcher = _watcher(cache)
    if watcher is not None:  # this tree follows the events: wait until it hears them
        assert watcher.subscribed.wait(10)
        deadline = time.monotonic() + 10
        while watcher.links < 3:
            assert time.monotonic() < deadline, "the watcher did not reach every sentinel"
            time.sleep(0.01)


def test_a_forked_child_follows_the_events_of_its_own(sset: SentinelSet) -> None:
    cache = _cache(sset)
    _watching(cache)
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock: the child's
        # own watcher, made after the fork, is what this test checks.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its own watcher, started by its first call
        code = 1
        try:
            cache.set("child", 7)
            watcher = _watcher(cache)
            if cache.get("child") == 7 and watcher.subscribed.wait(10):
                code = 0 if watcher._thread is not None and watcher._thread.is_alive() else 3
            else:
                code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's watcher still runs.
    watcher = _watcher(cache)
    assert watcher._thread is not None and watcher._thread.is_alive()


def test_the_events_are_read_as_the_sentinel_kwargs_user(sset: SentinelSet) -> None:
    # Sentinels with ACL users: the cache follows their events with SENTINEL_KWARGS' login.
    user = f"u{uuid.uuid4().hex[:6]}"
    for sentinel in sset.sentinels:
        sentinel.cli("acl", "setuser", user, "on", ">s3cret", "+@all", "&*")
    cache = _cache(sset, SENTINEL_KWARGS={"username": user, "password": "s3cret"})
    _watching(cache)
    for sentinel in sset.sentinels:
        deadline = time.monotonic() + 10
        while True:
            clients = [
                dict(f.split("=", 1) for f in line.split() if "=" in f)
                for line in sentinel.cli("client", "list").splitlines()
            ]
            if any(c.get("user") == user and "P" in c.get("flags", "") for c in clients):
                break  # subscribed (flag P), logged in as the user
            assert time.monotonic() < deadline, f"no subscriber as {user}: {clients}"
            time.sleep(0.01)


def test_a_sentinel_user_without_pubsub_is_warned_about(
    sset: SentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    # An ACL user that may not subscribe: the cache works (it asks the sentinels when a call
    # fails), and says once per sentinel that failovers are not followed as they happen.
    user = f"n{uuid.uuid4().hex[:6]}"
    for sentinel in sset.sentinels:
        sentinel.cli("acl", "setuser", user, "on", ">s3cret", "+@all", "resetchannels")
    caplog.set_level(logging.WARNING, logger="redoxide")
    cache = _cache(sset, SENTINEL_KWARGS={"username": user, "password": "s3cret"})
    cache.set("k", 1)
    assert cache.get("k") == 1
    deadline = time.monotonic() + 10
    while True:
        warned = [r.getMessage() for r in caplog.records if "PSUBSCRIBE" in r.getMessage()]
        if len(warned) == len(sset.sentinels):
            break
        assert time.monotonic() < deadline, f"warnings: {warned}"
        time.sleep(0.01)
    assert all("s3cret" not in message for message in warned)
    assert all(sset.service in message for message in warned)


def test_first_write_after_a_planned_failover_lands_on_the_new_primary(sset: SentinelSet) -> None:
    cache = _cache(sset)
    _watching(cache)
    old, new = _planned_failover(sset)
    # Once a sentinel names the new primary, a write goes there (sync and async).
    cache.set("after", 41)
    asyncio.run(cache.aset("aafter", 42))
    made, amade = cache.make_key("after"), cache.make_key("aafter")
    assert new.cli("get", made) == "41"
    assert new.cli("get", amade) == "42"
    if old.info("replication").get("role") == "master":  # not turned into a replica yet
        assert old.cli("get", made) == ""
        assert old.cli("get", amade) == ""
    assert cache.get("after") == 41


def test_near_cache_drops_old_values_on_a_planned_failover(sset: SentinelSet) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    near = _cache(sset, prefix, NEAR_CACHE=near_options())
    _watching(near)
    near.set("cfg:k", "old")
    serving(near)
    assert warm(near, "cfg:k") == "old"
    _, new = _planned_failover(sset)
    # A write through this cache goes to the new primary (so it has switched), then another
    # process writes the key there: the near cache must not answer with what it kept.
    near.set("other", 1)
    assert new.cli("get", near.make_key("other")) == "1"
    elsewhere = build_cache(new.url, {"KEY_PREFIX": prefix})  # another process, say
    elsewhere.set("cfg:k", "new")
    assert near.get("cfg:k") == "new"


def test_events_are_followed_again_after_the_sentinels_drop_the_connection(
    sset: SentinelSet,
) -> None:
    cache = _cache(sset)
    _watching(cache)
    watcher = _watcher(cache)
    for sentinel in sset.sentinels:  # every subscriber connection is closed by the sentinels
        sentinel.cli("client", "kill", "type", "pubsub")
    deadline = time.monotonic() + 10
    while True:  # connected again, to each sentinel, as new connections
        subscribers = [s.cli("client", "list", "type", "pubsub") for s in sset.sentinels]
        if all(subscribers) and watcher is not None and watcher.links == 3:
            break
        assert time.monotonic() < deadline, f"not subscribed again: {subscribers}"
        time.sleep(0.01)
    _, new = _planned_failover(sset)
    cache.set("after", 43)
    assert new.cli("get", cache.make_key("after")) == "43"
