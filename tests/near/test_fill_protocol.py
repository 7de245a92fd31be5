"""The one fill protocol (NearCache.fill, in the core): a miss's token, GET and PTTL in one
round trip to the server that owns the key, installed only if the token survived and that
server is one the near cache tracks. One server's get runs it inside the core; a router's get
runs it on the primary its topology names (``owner``). get_many runs the same protocol for
many keys (``fill_keys``: one round trip per owning primary, ``fill_fanout`` for several at
once), and reads through the router what a fill could not place."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redoxide import _redoxide
from redoxide._protocols import owner
from redoxide.exceptions import ConnectionInterrupted, RedirectError
from support.near import near_options, serving, stop_tracking, wait_for
from support.servers import RedisServer


def _run(mode: str, sync: Callable[[], Any], awaited: Callable[[Any], Any]) -> Any:
    """sync() in sync mode; else awaited(bridge) awaited on an event loop."""
    if mode == "sync":
        return sync()

    async def main() -> Any:
        from redoxide._bridges import bridge

        return await awaited(bridge())

    return asyncio.run(main())


def _written(cache: Any, writer: Any, values: dict[str, bytes]) -> None:
    """Another process's writes, each of a kept key heard back (its prefix is broadcast)
    before this returns: an invalidation still on its way would rightly spoil a fill's token
    taken after it (seen on a loaded host)."""
    heard = cache.near_cache_stats()["invalidations"]
    writer.mset(values)
    kept = sum(1 for key in values if key.split(":", 2)[-1].startswith(("cfg:", "flags:")))
    wait_for(
        "the writes' invalidations",
        lambda: cache.near_cache_stats()["invalidations"] >= heard + kept,
    )


def _router_cache(topology: str, request: pytest.FixtureRequest, prefix: str) -> Any:
    from support.backend import build_cache, topology_settings

    settings = topology_settings(topology, request)
    options = {**settings.get("OPTIONS", {}), "NEAR_CACHE": near_options()}
    if topology == "replicas":
        options["READ_FROM_REPLICAS"] = True  # reads go to replicas; fills still to the primary
    return build_cache(settings["LOCATION"], {"KEY_PREFIX": prefix, "OPTIONS": options})


def _commandstat(node: Any, command: str) -> int:
    host, _, port = node.address.rpartition(":")
    server = redis.Redis(host=host.strip("[]"), port=int(port))
    try:
        stats = server.info("commandstats").get(f"cmdstat_{command}", {})
        return int(stats.get("calls", 0))
    finally:
        server.close()


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
        _written(cache, writer, {key: b"here"})  # another process's write: nothing kept yet
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
    near = _router_cache(topology, request, "fills")
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


def test_fill_keys_installs_only_what_a_tracked_server_answered(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    cache = make_near()
    serving(cache)
    store = cache._client._store
    keys = [cache.make_and_validate_key(k) for k in ("cfg:a", "cfg:b", "other:c")]
    _written(cache, writer, {key: key.encode() for key in keys})

    def fill(client: Any) -> Any:
        tokens = [store.lookup(k) for k in keys]
        assert [type(t) for t in tokens] == [int, int, type(None)]  # other: is not kept
        return _run(
            mode,
            lambda: store.fill_keys(client, keys, tokens),
            lambda bridge: store.fill_keys(client, keys, tokens, bridge=bridge),
        )

    with RedisServer() as other:
        elsewhere = _redoxide.Client(other.url, connect_timeout=1.0, response_timeout=2.0)
        before = cache.near_cache_stats()
        assert fill(elsewhere) == [None, None, None]  # that server's (empty) answer
        after = cache.near_cache_stats()
        assert after["installs"] == before["installs"]
        assert after["fills_in_flight"] == before["fills_in_flight"]  # tokens cancelled
    assert fill(cache._client._inner) == [k.encode() for k in keys]
    assert cache.near_cache_stats()["installs"] == before["installs"] + 2
    assert [type(store.lookup(k)) for k in keys] == [bytes, bytes, type(None)]


def test_fill_fanout_reports_a_failed_part_and_cancels_only_its_tokens(
    make_near: Callable[..., Any], writer: Any
) -> None:
    cache = make_near()
    serving(cache)
    store = cache._client._store
    live, dead = (cache.make_and_validate_key(k) for k in ("cfg:live", "cfg:dead"))
    _written(cache, writer, {live: b"1"})
    with RedisServer() as gone:
        url = gone.url
    nowhere = _redoxide.Client(url, connect_timeout=1.0, response_timeout=1.0)
    before = cache.near_cache_stats()
    tokens = [store.lookup(live), store.lookup(dead)]
    assert cache.near_cache_stats()["fills_in_flight"] == before["fills_in_flight"] + 2
    here = cache._client._inner
    outcomes = store.fill_fanout([(here, [live], [tokens[0]]), (nowhere, [dead], [tokens[1]])])
    assert outcomes[0] == [b"1"]
    assert isinstance(outcomes[1], ConnectionInterrupted)
    stats = cache.near_cache_stats()
    assert stats["installs"] == before["installs"] + 1
    assert stats["fills_in_flight"] == before["fills_in_flight"]


@pytest.mark.parametrize("topology", ["cluster", "sentinel", "replicas"])
def test_a_routers_get_many_fills_each_key_from_its_owner(
    topology: str, mode: str, request: pytest.FixtureRequest
) -> None:
    near = _router_cache(topology, request, f"many{mode}")
    try:
        names = [f"cfg:m{i}" for i in range(12)]
        near.set_many(dict.fromkeys(names, 7))
        near.set("other:x", 8)
        serving(near)
        owners: dict[Any, int] = {}
        for name in names:
            node = owner(near._client, near.make_and_validate_key(name))
            assert node in (near._client.primaries() or ())
            owners[node] = owners.get(node, 0) + 1
        if topology == "cluster":
            assert len(owners) > 1  # the keys span primaries: one fill each, sent at once
        pttls = {node: _commandstat(node, "pttl") for node in owners}
        before = near.near_cache_stats()
        wanted = [*names, "other:x"]

        def get_many() -> Any:
            return _run(mode, lambda: near.get_many(wanted), lambda _: near.aget_many(wanted))

        assert get_many() == {**dict.fromkeys(names, 7), "other:x": 8}
        for node, count in owners.items():
            assert _commandstat(node, "pttl") == pttls[node] + count  # other:x had none
        after = near.near_cache_stats()
        assert after["installs"] == before["installs"] + len(names)
        assert after["fills_in_flight"] == before["fills_in_flight"]
        assert get_many() == {**dict.fromkeys(names, 7), "other:x": 8}
        assert near.near_cache_stats()["hits"] >= after["hits"] + len(names)
    finally:
        stop_tracking(near)


def test_a_fill_on_a_node_that_does_not_own_the_key_reads_through_the_router(
    mode: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    near = _router_cache("cluster", request, f"moved{mode}")
    try:
        names = [f"cfg:w{i}" for i in range(6)]
        near.set_many({name: i for i, name in enumerate(names)})
        serving(near)
        store = near._client._store
        keys = [near.make_and_validate_key(n) for n in names]
        nodes = near._client.primaries()
        right = owner(near._client, keys[0])
        wrong = next(n for n in nodes if n is not right)
        tokens = [store.lookup(keys[0])]
        # The protocol's answer from the wrong node: the redirect, as an instance; no install.
        (moved,) = store.fill_keys(wrong, keys[:1], tokens)
        assert isinstance(moved, RedirectError)
        # A get_many whose owners are all named wrong (the router's slot table, as the near
        # cache reads it, names another primary for every slot): every key is read through
        # the router.
        router = near._client._inner
        wrong = [next(n for n in nodes if n is not node) for node in router.homes()]
        monkeypatch.setattr(router, "homes", lambda: wrong)
        before = near.near_cache_stats()

        def get_many() -> Any:
            return _run(mode, lambda: near.get_many(names), lambda _: near.aget_many(names))

        assert get_many() == {name: i for i, name in enumerate(names)}
        # A get's fill meets the MOVED too (its error is met when it is awaited), and so does
        # a get of a key not kept, read where the table names: the router reads them.
        near.set("other:x", "x")
        for name, value in [(names[0], 0), (names[1], 1), ("other:x", "x")]:
            got = _run(mode, lambda n=name: near.get(n), lambda _, n=name: near.aget(n))
            assert got == value
        after = near.near_cache_stats()
        assert after["installs"] == before["installs"]
        assert after["fills_in_flight"] == before["fills_in_flight"]
    finally:
        stop_tracking(near)


def test_a_fail_open_get_many_keeps_what_answered_when_the_router_read_fails(
    mode: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keys a fill could not place are read through the router; when that read fails too, a
    # fail-open get_many returns what did answer (the filled keys, the router's partial read)
    # for every key asked, not an error about lengths.
    from support.backend import build_cache

    running = request.getfixturevalue("cluster")
    options = {
        "CLUSTER": True,
        "SOCKET_TIMEOUT": 0.5,
        "IGNORE_EXCEPTIONS": True,
        "NEAR_CACHE": near_options(),
    }
    near = build_cache(running.urls[:2], {"KEY_PREFIX": f"open{mode}", "OPTIONS": options})
    try:
        serving(near)
        by_port: dict[int, list[str]] = {}
        for i in range(60):
            name = f"cfg:p{i}"
            node = owner(near._client, near.make_and_validate_key(name))
            by_port.setdefault(int(node.address.rpartition(":")[2]), []).append(name)
        (paused_port, (stuck, *_)), (_, (answered, *_)) = list(by_port.items())[:2]
        near.set_many({stuck: "stuck", answered: "answered"})
        # (Kept as written, through the tracking connections: dropped, to be misses.)
        made = [near.make_and_validate_key(name) for name in (stuck, answered)]
        near._client._store.forget_keys(made, False)
        router = near._client._inner
        # The stuck key's slot is named on another primary (as a table not yet told of a
        # move would), whose MOVED sends it through the router; the other key is filled from
        # its owner.
        table = list(router.homes())
        slot = _redoxide.key_slot(near.make_and_validate_key(stuck))
        table[slot] = next(n for n in router.primaries() if n is not table[slot])
        monkeypatch.setattr(router, "homes", lambda: table)
        routed: list[Any] = []
        mget = router.mget
        monkeypatch.setattr(
            router, "mget", lambda keys, *bridge: routed.append(keys) or mget(keys, *bridge)
        )
        server = next(s for s in running.primaries() if s.port == paused_port)
        server.cli("CLIENT", "PAUSE", "5000", "ALL")
        try:
            wanted = [answered, stuck]
            got = _run(mode, lambda: near.get_many(wanted), lambda _: near.aget_many(wanted))
        finally:
            server.cli("CLIENT", "UNPAUSE")
        assert got == {answered: "answered"}
        assert routed == [[near.make_and_validate_key(stuck)]]
        assert near.near_cache_stats()["fills_in_flight"] == 0
    finally:
        stop_tracking(near)


def test_an_error_reply_in_a_get_many_fill_raises_it(
    make_near: Callable[..., Any], writer: Any, mode: str
) -> None:
    from redoxide.exceptions import WrongTypeError

    cache = make_near(IGNORE_EXCEPTIONS=True)  # an error reply is not a miss, even so
    serving(cache)
    cache.set("cfg:fine", 1)
    writer.rpush(cache.make_and_validate_key("cfg:list"), b"x")
    wanted = ["cfg:fine", "cfg:list"]
    with pytest.raises(WrongTypeError):
        _run(mode, lambda: cache.get_many(wanted), lambda _: cache.aget_many(wanted))
    assert cache.near_cache_stats()["fills_in_flight"] == 0


def test_a_fill_whose_keys_cannot_be_sent_cancels_every_token(
    make_near: Callable[..., Any],
) -> None:
    cache = make_near()
    serving(cache)
    store = cache._client._store
    here = cache._client._inner
    first, second = (cache.make_and_validate_key(k) for k in ("cfg:t1", "cfg:t2"))
    before = cache.near_cache_stats()["fills_in_flight"]
    tokens = [store.lookup(first), store.lookup(second)]
    assert cache.near_cache_stats()["fills_in_flight"] == before + 2
    with pytest.raises(UnicodeEncodeError):
        store.fill_keys(here, [first, "\ud800"], [tokens[0], None])
    with pytest.raises(TypeError):
        store.fill_fanout([(here, [second], [tokens[1]]), (here, [3], [None])])
    assert cache.near_cache_stats()["fills_in_flight"] == before
