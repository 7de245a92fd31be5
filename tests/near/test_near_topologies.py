"""The near cache on every topology: tracking on the primary (or each cluster primary),
fills read from it, another client's writes seen within the stale bound."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from support.backend import build_cache, topology_settings
from support.dispatch import Ops
from support.near import (
    after_stale_bound,
    near_options,
    serving,
    stop_tracking,
    wait_for,
    warm,
)


def _pair(
    topology: str, request: pytest.FixtureRequest, replica_reads: bool = True, **limits: Any
) -> tuple[Any, Any]:
    """A near-cached cache (NEAR_CACHE with `limits`) and a plain one (the other client) on
    the same keys; on replicas both read from the replicas unless `replica_reads` is False."""
    settings = topology_settings(topology, request)
    options = dict(settings.get("OPTIONS", {}))
    if topology == "replicas" and replica_reads:
        options["READ_FROM_REPLICAS"] = True  # fills still read the primary
    prefix = f"t{uuid.uuid4().hex[:8]}"
    plain = build_cache(settings["LOCATION"], {"KEY_PREFIX": prefix, "OPTIONS": options})
    near = build_cache(
        settings["LOCATION"],
        {"KEY_PREFIX": prefix, "OPTIONS": {**options, "NEAR_CACHE": near_options(**limits)}},
    )
    return near, plain


@pytest.mark.parametrize("topology", ["cluster", "sentinel", "replicas"])
def test_writes_by_another_client_are_seen_on_every_topology(
    topology: str, request: pytest.FixtureRequest, mode: str
) -> None:
    near, plain = _pair(topology, request)
    try:
        ops = Ops(near, mode)
        keys = [f"cfg:{i}" for i in range(20)]  # spread over the cluster's slots
        plain.set_many({k: 1 for k in keys})
        serving(near)
        assert ops.get_many(keys) == {k: 1 for k in keys}
        assert ops.get_many(keys) == {k: 1 for k in keys}
        stats = near.near_cache_stats()
        assert stats["hits"] >= 20, stats
        plain.set_many({k: 2 for k in keys})
        plain.delete("cfg:0")
        after_stale_bound()
        assert ops.get("cfg:0") is None
        assert ops.get_many(keys) == {k: 2 for k in keys[1:]}
        assert ops.get("cfg:5") == 2
        assert near.near_cache_stats()["invalidations"] >= 20
        plain.delete_many(keys)
    finally:
        stop_tracking(near)


@pytest.mark.parametrize("topology", ["cluster", "sentinel", "replicas"])
def test_hot_keys_another_client_wrote_come_back_at_once(
    topology: str, request: pytest.FixtureRequest
) -> None:
    # The keys another client wrote while they were being hit are read again at once on the
    # tracking connection that named them, to the primary that owns them (a cluster's each
    # from its own). MAX_STALE_MS of a minute: the gate cannot shut on a loaded host and turn
    # a hit into a miss.
    near, plain = _pair(topology, request, MAX_STALE_MS=60_000)
    try:
        keys = [f"cfg:r{i}" for i in range(10)]
        plain.set_many(dict.fromkeys(keys, 1))
        serving(near)
        for _ in range(2):  # filled, then hit
            assert [near.get(k) for k in keys] == [1] * len(keys)
        before = near.near_cache_stats()
        plain.set_many(dict.fromkeys(keys, 2))
        wait_for(
            "the refresh to be installed",
            lambda: near.near_cache_stats()["installs"] >= before["installs"] + len(keys),
        )
        assert [near.get(k) for k in keys] == [2] * len(keys)
        after = near.near_cache_stats()
        assert after["refreshes"] - before["refreshes"] == len(keys)
        assert after["misses"] == before["misses"], (before, after)
        plain.delete_many(keys)
    finally:
        stop_tracking(near)


@pytest.mark.parametrize("topology", ["cluster", "replicas"])
def test_a_write_through_the_read_client_drops_the_kept_key(
    topology: str, request: pytest.FixtureRequest
) -> None:
    # get_client(write=False) is the near-cached client's too: a command sent through it that
    # writes drops the keys it names from process memory first, as any write does. On a
    # cluster it lands (and the next read sees it at once); a replica refuses it (READONLY).
    from redoxide.exceptions import ReadOnlyError

    near, plain = _pair(topology, request)
    try:
        near.set("cfg:r", 1)
        assert warm(near, "cfg:r") == 1
        reads = near.client.get_client(write=False)
        server_key = near.make_and_validate_key("cfg:r")
        before = near.near_cache_stats()["misses"]
        if topology == "cluster":
            reads.set(server_key, 2)
            assert near.get("cfg:r") == 2
        else:
            with pytest.raises(ReadOnlyError):
                reads.set(server_key, 2)
            assert near.get("cfg:r") == 1
        assert near.near_cache_stats()["misses"] == before + 1, "the kept value was served"
    finally:
        stop_tracking(near)
        plain.delete("cfg:r")


@pytest.mark.parametrize("topology", ["cluster", "sentinel", "replicas"])
def test_admission_by_use_on_every_topology(
    topology: str, request: pytest.FixtureRequest, mode: str
) -> None:
    # ADMIT_AFTER_READS: keys are kept from their second read, filled through the tracking
    # connection of the primary that owns them (OPTIN: that read is what the server tracks),
    # and another client's writes are heard there, again and again (each refresh tracks the
    # key anew). MAX_STALE_MS of a minute: no hit turns into a miss on a loaded host.
    near, plain = _pair(topology, request, ADMIT_AFTER_READS=2, MAX_STALE_MS=60_000)
    try:
        ops = Ops(near, mode)
        keys = [f"cfg:u{i}" for i in range(20)]  # spread over the cluster's slots
        plain.set_many(dict.fromkeys(keys, 1))
        serving(near)
        first = near.near_cache_stats()
        assert ops.get_many(keys) == dict.fromkeys(keys, 1)
        second = near.near_cache_stats()
        assert second["not_admitted"] - first["not_admitted"] == len(keys), second
        assert second["installs"] == first["installs"]
        assert ops.get_many(keys) == dict.fromkeys(keys, 1)
        third = near.near_cache_stats()
        assert third["admitted"] - second["admitted"] == len(keys), third
        assert third["installs"] - second["installs"] == len(keys), third
        assert [ops.get(k) for k in keys] == [1] * len(keys)
        assert near.near_cache_stats()["hits"] - third["hits"] == len(keys)
        for n in (2, 3):
            before = near.near_cache_stats()
            plain.set_many(dict.fromkeys(keys, n))
            wait_for(
                f"write {n} to be heard and the keys refreshed",
                lambda before=before: (
                    near.near_cache_stats()["installs"] >= before["installs"] + len(keys)
                ),
            )
            assert [ops.get(k) for k in keys] == [n] * len(keys)
            after = near.near_cache_stats()
            assert after["hits"] - before["hits"] == len(keys), (before, after)
        plain.delete_many(keys)
    finally:
        stop_tracking(near)


@pytest.mark.parametrize("topology", ["cluster", "sentinel", "replicas"])
@pytest.mark.parametrize("by_use", [False, True], ids=["prefixes", "by-use"])
def test_own_writes_of_kept_keys_stay_kept_on_every_topology(
    topology: str, by_use: bool, request: pytest.FixtureRequest, mode: str
) -> None:
    # This process' sets of kept keys go through the tracking connection of the primary that
    # owns each (on a cluster, each key's own primary): the value written is kept, and no read
    # of it goes back to the server (no fill, no miss); another client's writes are still
    # heard after them. (Before, a router's writes dropped the keys: on a 3-primary cluster 20
    # sets of kept keys read three times each cost 42-44 refills.) Reads of keys not kept go to
    # the primary: a replica's lag behind the writes is not what this checks.
    limits: dict[str, Any] = {"MAX_STALE_MS": 60_000}
    if by_use:
        limits["ADMIT_AFTER_READS"] = 2
    near, plain = _pair(topology, request, replica_reads=False, **limits)
    try:
        ops = Ops(near, mode)
        keys = [f"cfg:w{i}" for i in range(20)]  # spread over the cluster's slots
        plain.set_many(dict.fromkeys(keys, 0))
        serving(near)
        for _ in range(3):
            assert ops.get_many(keys) == dict.fromkeys(keys, 0)
        before = near.near_cache_stats()
        assert before["entries"] >= len(keys), before
        for n, key in enumerate(keys):
            ops.set(key, n)
        want = {key: n for n, key in enumerate(keys)}
        for _ in range(3):
            assert ops.get_many(keys) == want
            assert [ops.get(k) for k in keys] == list(want.values())
        after = near.near_cache_stats()
        assert after["own_writes_kept"] - before["own_writes_kept"] == len(keys), after
        # (An own write kept counts as an install: no other install, no miss, means no fill.)
        assert after["installs"] - before["installs"] == len(keys), (before, after)
        assert after["misses"] == before["misses"], (before, after)
        assert after["hits"] - before["hits"] == 6 * len(keys), (before, after)
        assert {k: v for k, v in plain.get_many(keys).items()} == want
        # set_many too, of keys one primary owns (on a cluster, keys of one slot).
        group = [f"cfg:{{w}}:{i}" for i in range(5)]
        plain.set_many(dict.fromkeys(group, 0))
        for _ in range(3):
            assert ops.get_many(group) == dict.fromkeys(group, 0)
        before = near.near_cache_stats()
        ops.set_many(dict.fromkeys(group, "many"))
        for _ in range(2):
            assert ops.get_many(group) == dict.fromkeys(group, "many")
        after = near.near_cache_stats()
        assert after["own_writes_kept"] - before["own_writes_kept"] == len(group), after
        assert after["misses"] == before["misses"], (before, after)
        # And set_many of keys every primary owns (on a cluster, of many slots: each slot's
        # through its primary's tracking connection), with keys not kept among them, which
        # are written the usual way.
        before = near.near_cache_stats()
        want = {key: f"m{n}" for n, key in enumerate(keys)}
        ops.set_many({**want, "other:a": 1, "other:b": 2})
        for _ in range(2):
            assert ops.get_many(keys) == want
        after = near.near_cache_stats()
        assert after["own_writes_kept"] - before["own_writes_kept"] == len(keys), after
        assert after["misses"] == before["misses"], (before, after)
        assert plain.get_many([*keys, "other:a", "other:b"]) == {**want, "other:a": 1, "other:b": 2}
        plain.set_many(dict.fromkeys(keys, "theirs"))
        wait_for(
            "another client's write after ours",
            lambda: ops.get_many(keys) == dict.fromkeys(keys, "theirs"),
        )
        plain.delete_many(keys)
    finally:
        stop_tracking(near)


def _server_of(topology: str, request: pytest.FixtureRequest, port: int) -> Any:
    """The running server on `port` among `topology`'s data nodes (not Sentinel's)."""
    if topology == "cluster":
        return request.getfixturevalue("cluster").node_for_port(port)
    if topology == "replicas":
        primary, replicas = request.getfixturevalue("replica_set")
        nodes = [primary, *replicas]
    else:
        nodes = [request.getfixturevalue("redis_server")]
    return next(node for node in nodes if node.port == port)


@pytest.mark.parametrize("topology", ["standalone", "cluster", "replicas"])
def test_a_write_through_another_near_cache_of_the_process_drops_this_ones_copy_first(
    topology: str, request: pytest.FixtureRequest, mode: str
) -> None:
    # Two near caches over the same keys (different limits: two stores). A set or a delete
    # through one drops the other's copy before it is sent (the store's peers), not when the
    # server's invalidation arrives: seen with the key's primary frozen, so that no
    # invalidation can have been sent. (Not on Sentinel: its primary is the replicas' kind of
    # home, and a frozen primary is what its sentinels act on.)
    from redoxide.topology.nodes import address_of

    reader, plain = _pair(topology, request, replica_reads=False, MAX_STALE_MS=60_000)
    settings = topology_settings(topology, request)
    options = {**settings.get("OPTIONS", {}), "NEAR_CACHE": near_options(MAX_BYTES=2**20)}
    params = {"KEY_PREFIX": reader.key_prefix, "OPTIONS": options}
    writer = build_cache(settings["LOCATION"], params)
    store = reader._client._store
    try:
        keys = [f"cfg:p{i}" for i in range(12)]
        plain.set_many(dict.fromkeys(keys, 1))
        serving(reader)
        serving(writer)
        for _ in range(2):
            assert reader.get_many(keys) == dict.fromkeys(keys, 1)
            assert writer.get_many(keys) == dict.fromkeys(keys, 1)
        ops = Ops(writer, mode)
        made = reader.make_and_validate_key(keys[0])
        owner = address_of(reader._client.owner(made))
        assert owner is not None
        server = _server_of(topology, request, owner[1])
        for write, want in ((lambda: ops.set(keys[0], 2), 2), (lambda: ops.delete(keys[0]), None)):
            assert reader.get(keys[0]) is not None and store.has(made)  # kept
            with ThreadPoolExecutor(1) as pool:
                server.pause()
                try:
                    done = pool.submit(write)
                    wait_for("the reader's copy to be dropped", lambda: not store.has(made), 5.0)
                finally:
                    server.resume()
                done.result(timeout=10)
            assert reader.get(keys[0]) == want
            if want is not None:
                assert reader.get(keys[0]) == want and store.has(made)  # kept again
        # A set_many over every primary: read back fresh at once.
        ops.set_many(dict.fromkeys(keys[1:], 3))
        assert reader.get_many(keys[1:]) == dict.fromkeys(keys[1:], 3)
    finally:
        stop_tracking(reader)
        stop_tracking(writer)
