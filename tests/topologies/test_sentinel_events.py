"""Sentinel's events move writes at once: after a planned failover (SENTINEL FAILOVER, the old
primary still up), the first write once a sentinel names the new primary lands on the new
primary, never on the old one (which loses it when it is turned into a replica); a near cache
drops what it kept from the old primary; a forked child follows the events too, and closes its
copies of the parent's connections; a cache that lists one sentinel follows the others too; a
hold outlasts HOLD_LIMIT while a sentinel reports the failover in progress.

The tests share one sentinel set of their own (each planned failover moves its primary); its
teardown closes the watchers the tests made (SentinelSet.stop). A hold on writes is made here
by handing the watcher the event a failover's leader publishes (+selected-slave), for a
replica the sentinels are not promoting, and ended by the abort event: overlap by construction.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redoxide.topology import sentinel_hold
from support.backend import build_cache, is_redoxide
from support.forking import fd_open, fork_child, reap, spawn
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


def _cache(sset: SentinelSet, prefix: str = "", timeout: float = 2.0, **options: Any) -> Any:
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
                "SOCKET_TIMEOUT": timeout + next(_configurations) / 1000,
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


def _planned_failover(sset: SentinelSet, cache: Any) -> tuple[RedisServer, RedisServer]:
    """SENTINEL FAILOVER; return (old primary, new primary) once the cache's watcher has
    switched to the new one (the old primary is still up: the sentinels turn it into a replica
    seconds later)."""
    old_port = _settled(sset)
    primary = _primary(cache)
    switches = primary.switches
    sset.sentinels[1].cli("sentinel", "failover", sset.service)
    assert primary.wait_switches(switches + 1, 30), "the watcher saw no switch"
    new_port = int(primary.node.address.rsplit(":", 1)[1])
    assert new_port != old_port
    assert sset.wait_for_new_primary(old_port) == new_port  # what the sentinels all name
    return sset.node_for_port(old_port), sset.node_for_port(new_port)


def _primary(cache: Any) -> Any:
    """The cache's SentinelPrimary."""
    client = cache._client
    router = getattr(client, "_inner", client)  # under a near cache
    return router.primary


def _watcher(cache: Any) -> Any:
    """The cache's SentinelPrimary's watcher of events (None where there is none)."""
    return getattr(_primary(cache), "watcher", None)


def _announce(sset: SentinelSet, cache: Any, channel: str, data: str) -> None:
    """Hand the cache's watcher an event as the second sentinel would publish it."""
    message = [b"pmessage", b"*", channel.encode(), data.encode()]
    _watcher(cache)._message(message, sset.sentinel_addresses[1])


def _hold(
    sset: SentinelSet, cache: Any, monkeypatch: pytest.MonkeyPatch, limit: float = 300.0
) -> tuple[Any, int]:
    """Start a hold on the cache's writes for a replica that is not being promoted (so only
    the abort event ends it, HOLD_LIMIT being lifted, unless `limit` is short); return it and
    the primary's port."""
    monkeypatch.setattr(sentinel_hold, "HOLD_LIMIT", limit)
    port = _settled(sset)
    replica = next(r for r in sset.data_nodes if r.port != port)
    _announce(
        sset, cache, "+selected-slave",
        f"slave 127.0.0.1:{replica.port} 127.0.0.1 {replica.port} @ {sset.service} "
        f"127.0.0.1 {port}",
    )  # fmt: skip
    hold = _primary(cache)._hold
    assert hold is not None
    return hold, port


def _abort(sset: SentinelSet, cache: Any, port: int) -> None:
    _announce(sset, cache, "-failover-abort-not-elected", f"master {sset.service} 127.0.0.1 {port}")


def _until_waiting(hold: Any, count: int, writers: list[threading.Thread]) -> None:
    """Wait until `count` writes wait on the hold; fail if a writer ended first (its write
    was sent, not held)."""
    deadline = time.monotonic() + 30
    while hold.waiting < count:
        assert all(w.is_alive() for w in writers), "a write was not held"
        assert time.monotonic() < deadline, f"{hold.waiting} writes held, not {count}"
        time.sleep(0.005)


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

    def child() -> int:  # its own watcher, started by its first call
        cache.set("child", 7)
        watcher = _watcher(cache)
        if cache.get("child") != 7 or not watcher.subscribed.wait(10):
            return 2
        return 0 if watcher._thread is not None and watcher._thread.is_alive() else 3

    assert fork_child(child) == 0
    # The parent's watcher still runs.
    watcher = _watcher(cache)
    assert watcher._thread is not None and watcher._thread.is_alive()


def test_a_forked_child_drops_the_parents_hold_and_closes_its_sentinel_connections(
    sset: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(sset, timeout=60)
    _watching(cache)
    watcher = _watcher(cache)
    socks = [link.sock for link in watcher._links.values()]
    assert len(socks) == 3
    fds = [sock.fileno() for sock in socks]
    ends = {"{}:{}".format(*sock.getsockname()[:2]) for sock in socks}  # CLIENT LIST's addr=
    hold, _ = _hold(sset, cache, monkeypatch)
    ready_r, ready_w = os.pipe()
    go_on_r, go_on_w = os.pipe()

    def child() -> int:
        os.close(ready_r)
        os.close(go_on_w)
        primary = _primary(cache)
        if primary._hold is not None or hold._ended.is_set():
            return 2  # the parent's hold is dropped, never ended (its lock may be held)
        if any(fd_open(fd) for fd in fds):
            return 3  # the watcher's sentinel connections are the parent's
        cache.set("child", 7)  # not held: the child asks the sentinels itself
        if cache.get("child") != 7:
            return 4
        os.write(ready_w, b"r")
        os.read(go_on_r, 1)  # alive until the parent has looked at the sentinels
        return 0

    pid, code = spawn(child), -1
    os.close(ready_w)
    os.close(go_on_r)
    try:
        readable, _, _ = select.select([ready_r], [], [], 60)
        if not (readable and os.read(ready_r, 1) == b"r"):
            # 2: the child ended the parent's hold; 3: it had the watcher's sockets open
            code, pid = reap(pid), 0
            pytest.fail(f"the child failed its checks: exit code {code}")
        assert not hold._ended.is_set()  # the child ended nothing of the parent's
        # The parent closes its watcher (twice: closing is idempotent): each sentinel drops the
        # subscription, which it would keep while the child held a copy of the socket.
        _primary(cache).close()
        _primary(cache).close()
        assert watcher._thread is None or not watcher._thread.is_alive()
        deadline = time.monotonic() + 20
        while True:
            listed = "".join(s.cli("client", "list", "type", "pubsub") for s in sset.sentinels)
            kept = [end for end in ends if f"addr={end} " in listed]
            if not kept:
                break
            assert time.monotonic() < deadline, f"the sentinels keep {kept}"
            time.sleep(0.01)
    finally:
        os.close(go_on_w)
        os.close(ready_r)
        code = reap(pid) if pid else code
    assert code == 0


def test_a_sentinel_that_never_answers_does_not_stall_the_others(sset: SentinelSet) -> None:
    # A listener that never accepts nor answers (a paused sentinel, say), listed first, with a
    # long connect timeout: the watcher's thread still subscribes to the three real sentinels
    # at once and reads their events (it waited on the silent one before each of them).
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        cache = _cache(
            sset,
            SENTINELS=[silent.getsockname()[:2], *sset.sentinel_addresses],
            SOCKET_CONNECT_TIMEOUT=60,
        )
        cache.set("k", 1)  # asks the sentinels (the silent one times out): starts the watcher
        watcher = _watcher(cache)
        deadline = time.monotonic() + 10
        while watcher.links < 3:
            assert time.monotonic() < deadline, f"{watcher.links} sentinels followed"
            time.sleep(0.01)
        made = watcher.connections
        sset.sentinels[0].cli("client", "kill", "type", "pubsub")  # read, and made again
        while watcher.connections == made:
            assert time.monotonic() < deadline + 10, "the dropped link was not made again"
            time.sleep(0.01)
        _primary(cache).close()
    finally:
        silent.close()


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


def _setter(cache: Any, key: str, value: int) -> threading.Thread:
    writer = threading.Thread(target=cache.set, args=(key, value))
    writer.start()
    return writer


def test_writes_wait_on_a_hold_and_are_sent_when_it_ends(
    sset: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(sset, timeout=60)
    _watching(cache)
    hold, port = _hold(sset, cache, monkeypatch)
    primary = sset.node_for_port(port)
    # A sync write, and two async ones on one event loop (which wait on one future).

    async def both() -> None:
        await asyncio.gather(cache.aset("a1", 1), cache.aset("a2", 2))

    loop = asyncio.new_event_loop()
    writers = [
        _setter(cache, "s", 3),
        threading.Thread(target=loop.run_until_complete, args=(both(),)),
    ]
    writers[1].start()
    try:
        _until_waiting(hold, 3, writers)
        assert len(hold._futures) == 1
        for key in ("s", "a1", "a2"):  # held, not sent
            assert primary.cli("exists", cache.make_key(key)) == "0"
    finally:
        _abort(sset, cache, port)  # the failover is aborted: they go to the primary
        for writer in writers:
            writer.join(60)
        loop.close()
    assert [w.is_alive() for w in writers] == [False, False]
    for key, value in (("s", 3), ("a1", 1), ("a2", 2)):
        assert primary.cli("get", cache.make_key(key)) == str(value)


def test_a_discovery_during_a_hold_does_not_release_the_writes(
    sset: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call that asks the sentinels while a failover promotes a replica (the sentinels still
    # name the old primary) must leave the writes held: the replica may be promoted any moment.
    cache = _cache(sset, timeout=60)
    _watching(cache)
    hold, port = _hold(sset, cache, monkeypatch)
    _primary(cache).relearn()
    writer = _setter(cache, "k", 5)
    try:
        _until_waiting(hold, 1, [writer])
        assert sset.node_for_port(port).cli("exists", cache.make_key("k")) == "0"
    finally:
        _abort(sset, cache, port)
        writer.join(60)
    assert sset.node_for_port(port).cli("get", cache.make_key("k")) == "5"


def test_first_write_after_a_planned_failover_lands_on_the_new_primary(sset: SentinelSet) -> None:
    cache = _cache(sset)
    _watching(cache)
    old, new = _planned_failover(sset, cache)
    # Once the watcher has switched, a write goes to the new primary (sync and async).
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
    _, new = _planned_failover(sset, near)
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
    made = watcher.connections
    for sentinel in sset.sentinels:  # every subscriber connection is closed by the sentinels
        sentinel.cli("client", "kill", "type", "pubsub")
    deadline = time.monotonic() + 10
    while True:  # connected again, to each sentinel, as new connections
        if watcher.connections >= made + 3 and watcher.links == 3:
            break
        assert time.monotonic() < deadline, f"{watcher.connections - made} reconnections"
        time.sleep(0.01)
    _, new = _planned_failover(sset, cache)
    cache.set("after", 43)
    assert new.cli("get", cache.make_key("after")) == "43"


def _until(check: Any, what: str, timeout: float = 30) -> None:
    """Wait until check() holds; fail, saying `what` did not happen, after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_one_listed_sentinel_that_does_not_lead_the_failover_loses_no_write(
    sset: SentinelSet,
) -> None:
    # SENTINELS lists one sentinel, and another runs the failover: only that one publishes
    # +selected-slave, so the watcher follows the sentinels the listed one names too. A
    # thread writes all through the failover: every write acknowledged is on the new primary
    # (without the hold the old one acknowledges ~1 s of writes, lost at its demotion).
    prefix = f"t{uuid.uuid4().hex[:8]}"
    cache = _cache(sset, prefix, SENTINELS=sset.sentinel_addresses[:1])
    _watching(cache)  # three sentinels followed: two learnt from the listed one
    ours = {  # sentinel port: our subscribed connection's address there
        link.peer[1]: "{}:{}".format(*link.sock.getsockname()[:2])
        for link in _watcher(cache)._links.values()
    }
    for sentinel in sset.sentinels:
        subscribers = sentinel.cli("client", "list", "type", "pubsub")
        assert f"addr={ours.get(sentinel.port)} " in subscribers, f"none on {sentinel!r}"
    acked: list[int] = []
    failed: list[str] = []  # not acknowledged: not lost
    stop = threading.Event()

    def write() -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            try:
                cache.set(f"w{i}", i)
                acked.append(i)
            except Exception as exc:
                failed.append(repr(exc))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        _until(lambda: len(acked) >= 20, "no write acknowledged")
        _, new = _planned_failover(sset, cache)  # led by the second sentinel
        count = len(acked)
        _until(lambda: len(acked) >= count + 20, "no write after the switch")
    finally:
        stop.set()
        writer.join(60)
    assert not writer.is_alive()
    there = build_cache(new.url, {"KEY_PREFIX": prefix}).get_many([f"w{i}" for i in acked])
    lost = [i for i in acked if there.get(f"w{i}") != i]
    assert lost == [], f"{len(lost)} of {len(acked)} acknowledged writes lost ({failed[:3]})"


def test_a_hold_outlasts_hold_limit_while_a_sentinel_reports_the_failover(
    sset: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failover whose promotion cannot happen: the replicas refuse SLAVEOF, so the leader's
    # SLAVEOF NO ONE fails and it waits for the promotion until its failover-timeout (made
    # long). Past HOLD_LIMIT it reports failover_in_progress: the hold goes on, and a write
    # made then is held until the failover is aborted, then sent to the primary.
    monkeypatch.setattr(sentinel_hold, "HOLD_LIMIT", 0.2)
    cache = _cache(sset, timeout=60)
    _watching(cache)
    port = _settled(sset)
    replicas = [node for node in sset.data_nodes if node.port != port]
    leader, primary, writer = sset.sentinels[1], _primary(cache), None
    try:
        for replica in replicas:
            replica.cli("acl", "setuser", "default", "-slaveof", "-replicaof")
        leader.cli("sentinel", "set", sset.service, "failover-timeout", "120000")
        assert leader.cli("sentinel", "failover", sset.service) == "OK"
        _until(lambda: primary._hold is not None, "no hold")
        hold = primary._hold
        deadline = time.monotonic() + 30
        while hold.reviews < 2:  # reviewed twice past HOLD_LIMIT, kept on each time
            assert primary._hold is hold, "the hold lapsed at HOLD_LIMIT"
            assert time.monotonic() < deadline, "the hold was not reviewed"
            time.sleep(0.005)
        writer = _setter(cache, "k", 5)
        _until_waiting(hold, 1, [writer])
        assert sset.node_for_port(port).cli("exists", cache.make_key("k")) == "0"
        assert "failover_in_progress" in leader.cli("sentinel", "master", sset.service)
    finally:
        for replica in replicas:
            replica.cli("acl", "setuser", "default", "+slaveof", "+replicaof")
        leader.cli("sentinel", "set", sset.service, "failover-timeout", "100")  # aborts it
        _settled(sset)
        leader.cli("sentinel", "set", sset.service, "failover-timeout", "3000")
        if writer is not None:
            writer.join(60)
    assert writer is not None and not writer.is_alive()
    assert hold._ended.is_set() and primary._hold is None
    assert sset.node_for_port(port).cli("get", cache.make_key("k")) == "5"


def test_a_hold_no_sentinel_reports_a_failover_for_lapses_at_hold_limit(
    sset: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sentinels run no failover (the hold is made by hand): at HOLD_LIMIT it lapses, and the
    # held write goes to the primary then, not after its SOCKET_TIMEOUT.
    cache = _cache(sset, timeout=60)
    _watching(cache)
    hold, port = _hold(sset, cache, monkeypatch, limit=1.0)
    done: list[float] = []
    writer = threading.Thread(target=lambda: (cache.set("k", 6), done.append(time.monotonic())))
    writer.start()
    writer.join(30)
    assert done and done[0] >= hold.started + 1.0  # held until the limit, not sent before
    assert hold._ended.is_set() and hold.reviews == 0
    assert sset.node_for_port(port).cli("get", cache.make_key("k")) == "6"
