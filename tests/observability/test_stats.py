"""cache.stats(): the Rust core's counters, checked against the server's own view of the same
traffic (INFO commandstats and stats, CLIENT LIST) on a server of each test's own, so no other
test's traffic is counted. Sync and async paths both."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from cache_calls import call, prepare, server_methods
from django.test import override_settings
from redoxide import _redoxide, _scripts
from redoxide.exceptions import CacheTimeout
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own counters")


def counted_cache(location: str, params: dict[str, Any] | None = None) -> Any:
    """A cache whose counters start from zero: they belong to the client of the address, which
    an earlier test's server on the same (reused) port may have counted on."""
    cache = build_cache(location, params or {})
    cache.reset_stats()
    return cache


def commandstats(server: RedisServer) -> dict[str, dict[str, int]]:
    """Return {command: {calls, failed_calls, rejected_calls}} from INFO commandstats."""
    out = {}
    for name, value in server.info("commandstats").items():
        fields = dict(f.split("=", 1) for f in value.split(","))
        out[name.removeprefix("cmdstat_")] = {
            k: int(v) for k, v in fields.items() if k.endswith("calls")
        }
    return out


def client_list(server: RedisServer) -> list[dict[str, str]]:
    """Return CLIENT LIST's entries, except the observer's own."""
    entries = []
    for line in server.cli("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("cmd") not in ("client|list", "client"):  # 6.2 says "client"
            entries.append(fields)
    return entries


def traffic(ops: Ops) -> None:
    """3 hits and 2 misses by get, 2 and 2 by get_many, 1 and 1 by has_key."""
    for i in range(3):
        ops.set(f"k{i}", f"value {i}")
    for key in ("k0", "k1", "k2", "nope1", "nope2"):
        ops.get(key)
    assert ops.get_many(["k0", "k1", "nope1", "nope2"]) == {"k0": "value 0", "k1": "value 1"}
    assert ops.has_key("k2")
    assert not ops.has_key("nope")
    ops.delete("k0")


def test_calls_hits_and_misses_match_the_servers_count(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    cache = counted_cache(fresh_redis_server.url)
    before = commandstats(fresh_redis_server)
    server_before = fresh_redis_server.info("stats")
    traffic(Ops(cache, mode))
    stats = cache.stats()
    after = commandstats(fresh_redis_server)
    server_after = fresh_redis_server.info("stats")
    totals = stats["totals"]
    for family in ("SET", "GET", "MGET", "EXISTS", "DEL"):
        name = family.lower()
        server_calls = after[name]["calls"] - before.get(name, {}).get("calls", 0)
        assert totals["calls"][family] == server_calls, family
    assert (totals["hits"], totals["misses"]) == (6, 5)
    for ours, theirs in (("hits", "keyspace_hits"), ("misses", "keyspace_misses")):
        assert totals[ours] == int(server_after[theirs]) - int(server_before[theirs])
    assert totals["errors"] == {}
    assert stats["nodes"] == {
        f"127.0.0.1:{fresh_redis_server.port}": stats["nodes"][
            f"127.0.0.1:{fresh_redis_server.port}"
        ]
    }


def test_error_replies_are_counted_by_family_and_class(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    cache = counted_cache(fresh_redis_server.url)
    ops = Ops(cache, mode)
    ops.set("n", 1)
    # The first incr finds the script missing (NOSCRIPT), then sends it whole.
    assert ops.incr("n") == 2
    assert ops.incr("n") == 3
    stats = cache.stats()["totals"]
    server = commandstats(fresh_redis_server)
    assert stats["calls"]["EVALSHA"] == server["evalsha"]["calls"] == 2
    assert stats["calls"]["EVAL"] == server["eval"]["calls"] == 1
    refused = server["evalsha"].get("failed_calls", 0) + server["evalsha"].get("rejected_calls", 0)
    assert stats["errors"] == {"EVALSHA": {"ResponseError": refused}}
    assert refused == 1


@pytest.mark.parametrize("sync_connections", ["per-thread", "shared"])
def test_bytes_match_the_servers_network_counters(
    fresh_redis_server: RedisServer, mode: str, sync_connections: str
) -> None:
    # The observer is a client of its own, so its INFO traffic is known to the byte.
    observer = _redoxide.Client(fresh_redis_server.url, connect_timeout=5, response_timeout=5)
    observer.execute(("PING",))

    def info() -> tuple[dict[str, int], dict[str, Any]]:
        seen = observer.stats()
        text = observer.execute(("INFO", "stats")).decode()
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        net = {k: int(fields[k]) for k in ("total_net_input_bytes", "total_net_output_bytes")}
        return net, {k: observer.stats()[k] - seen[k] for k in ("bytes_sent", "bytes_received")}

    server_before, first_info = info()
    options = {"SYNC_CONNECTIONS": sync_connections}
    cache = counted_cache(fresh_redis_server.url, {"OPTIONS": options})
    traffic(Ops(cache, mode))
    server_after, _ = info()
    ours = cache.stats()["totals"]
    assert ours["bytes_sent"] > 0
    # In: our commands, then the second INFO. Out: the first INFO's reply, then our replies.
    server_in = server_after["total_net_input_bytes"] - server_before["total_net_input_bytes"]
    server_out = server_after["total_net_output_bytes"] - server_before["total_net_output_bytes"]
    assert ours["bytes_sent"] == server_in - first_info["bytes_sent"]
    assert ours["bytes_received"] == server_out - first_info["bytes_received"]


def test_open_connections_match_client_list(fresh_redis_server: RedisServer) -> None:
    cache = counted_cache(fresh_redis_server.url)
    ready, done = threading.Barrier(4), threading.Event()

    def worker() -> None:
        cache.get("k")  # this thread's own connection
        ready.wait()
        done.wait(10)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        ready.wait(10)
        asyncio.run(cache.aget("k"))  # the process' one multiplexed connection
        assert cache.stats()["totals"]["connections"] == 4 == len(client_list(fresh_redis_server))
    finally:
        done.set()
        for t in threads:
            t.join()
    # The threads' connections close as they exit (after join() returns: a thread's own
    # storage is freed last); the multiplexed one stays.
    deadline = time.monotonic() + 10
    while cache.stats()["totals"]["connections"] > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.stats()["totals"]["connections"] == 1


def test_threads_sharing_the_sync_connection_count_one(
    fresh_redis_server: RedisServer,
) -> None:
    cache = counted_cache(fresh_redis_server.url, {"OPTIONS": {"SYNC_CONNECTIONS": "shared"}})
    threads = [threading.Thread(target=cache.get, args=("k",)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.stats()["totals"]["connections"] == 1 == len(client_list(fresh_redis_server))
    # Async calls have the multiplexed connection: one more.
    asyncio.run(cache.aget("k"))
    totals = cache.stats()["totals"]
    assert totals["connections"] == 2 == len(client_list(fresh_redis_server))
    assert (totals["calls"], totals["misses"]) == ({"GET": 4}, 4)


def test_a_server_restart_counts_one_reconnect_per_connection(
    fresh_redis_server: RedisServer,
) -> None:
    cache = counted_cache(fresh_redis_server.url)
    cache.set("k", 1)
    asyncio.run(cache.aset("k", 1))
    cache.reset_stats()
    fresh_redis_server.restart()
    assert cache.get("k") is None
    for _ in range(2):  # the first async call may meet the broken connection
        try:
            assert asyncio.run(cache.aget("k")) is None
            break
        except ConnectionError:
            continue
    stats = cache.stats()["totals"]
    assert stats["reconnects"] == 2
    assert stats["connections"] == 2 == len(client_list(fresh_redis_server))


def test_a_stalled_server_counts_timeouts(fresh_redis_server: RedisServer, mode: str) -> None:
    cache = counted_cache(fresh_redis_server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 0.2}})
    ops = Ops(cache, mode)
    ops.set("k", 1)
    fresh_redis_server.pause()
    try:
        with pytest.raises(CacheTimeout):
            ops.get("k")
    finally:
        fresh_redis_server.resume()
    stats = cache.stats()["totals"]
    assert stats["timeouts"] == 1
    assert stats["errors"] == {"GET": {"CacheTimeout": 1}}


def test_fail_open_misses_are_counted(mode: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    cache = build_cache(url, {"OPTIONS": {"IGNORE_EXCEPTIONS": True}})
    ops = Ops(cache, mode)
    assert ops.get("k", "fallback") == "fallback"
    assert ops.get_many(["a", "b"]) == {}
    stats = cache.stats()
    assert stats["fail_open_misses"] == 2
    assert stats["totals"]["errors"] == {
        "GET": {"ConnectionInterrupted": 1},
        "MGET": {"ConnectionInterrupted": 1},
    }
    cache.reset_stats()
    assert cache.stats()["fail_open_misses"] == 0


def test_latency_histograms_count_every_round_trip(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    cache = counted_cache(fresh_redis_server.url)
    ops = Ops(cache, mode)
    for _ in range(5):
        ops.get("k")
    ops.touch("k", None)  # PERSIST + EXISTS in one pipeline
    latency = cache.stats()["totals"]["latency"]
    get = latency["GET"]
    assert get["count"] == sum(get["counts"]) == 5
    assert len(get["counts"]) == len(get["bounds_us"]) + 1
    assert get["bounds_us"] == sorted(get["bounds_us"])
    assert get["sum_us"] > 0
    assert latency["PIPELINE"]["count"] == 1
    assert cache.stats()["totals"]["calls"]["PERSIST"] == 1


def test_reset_zeroes_the_counters_but_not_open_connections(
    fresh_redis_server: RedisServer,
) -> None:
    cache = counted_cache(fresh_redis_server.url)
    cache.set("k", 1)
    cache.get("k")
    cache.reset_stats()
    totals = cache.stats()["totals"]
    assert totals["calls"] == {} and totals["latency"] == {}
    assert (totals["hits"], totals["bytes_sent"], totals["bytes_received"]) == (0, 0, 0)
    assert totals["connections"] == 1


def test_stats_are_plain_json_and_name_the_alias(fresh_redis_server: RedisServer) -> None:
    url = fresh_redis_server.url
    caches = {"sessions": {"BACKEND": "redoxide.RedisCache", "LOCATION": url, "KEY_PREFIX": "s"}}
    with override_settings(CACHES=caches):
        from django.core.cache import CacheHandler

        cache = CacheHandler()["sessions"]
        cache.get("k")
        stats = cache.stats()
        assert json.loads(json.dumps(stats)) == stats
        assert stats["alias"] == "sessions"
    # Not in CACHES: named by its LOCATION (passwords hidden).
    other = build_cache(url, {"KEY_PREFIX": "elsewhere"})
    assert other.stats()["alias"] == f"redis://127.0.0.1:{fresh_redis_server.port}/0"


def test_a_router_sums_its_nodes(
    replica_set: tuple[RedisServer, list[RedisServer]],
    make_cache: Callable[..., Any],
) -> None:
    primary, replicas = replica_set
    cache = build_cache(
        [primary.url] + [r.url for r in replicas], {"OPTIONS": {"READ_FROM_REPLICAS": True}}
    )
    cache.reset_stats()
    cache.set("k", 1)
    for _ in range(4):
        cache.get("k")
    stats = cache.stats()
    assert set(stats["nodes"]) == {f"127.0.0.1:{s.port}" for s in [primary, *replicas]}
    per_node = [node["calls"].get("GET", 0) for node in stats["nodes"].values()]
    assert sum(per_node) == stats["totals"]["calls"]["GET"] == 4
    assert stats["nodes"][f"127.0.0.1:{primary.port}"]["calls"] == {"SET": 1}


@pytest.mark.slow
def test_a_cluster_counts_its_fan_outs_on_each_node(request: pytest.FixtureRequest) -> None:
    cluster = request.getfixturevalue("cluster")
    cache = build_cache(cluster.urls[:2], {"OPTIONS": {"CLUSTER": True}, "KEY_PREFIX": "fan"})
    keys = [f"key{i}" for i in range(30)]
    cache.set_many(dict.fromkeys(keys, 1))
    for get_many in (cache.get_many, lambda keys: asyncio.run(cache.aget_many(keys))):
        cache.reset_stats()
        assert len(get_many([*keys, "absent"])) == 30
        stats = cache.stats()
        totals = stats["totals"]
        # An MGET per node (or per slot), each key counted once.
        assert (totals["hits"], totals["misses"]) == (30, 1)
        assert totals["calls"]["MGET"] >= 3
        nodes = [n for n in stats["nodes"].values() if n["calls"].get("MGET")]
        assert len(nodes) == 3  # the three primaries
        assert sum(n["hits"] for n in nodes) == 30


def test_a_forked_child_counts_from_zero(fresh_redis_server: RedisServer) -> None:
    cache = counted_cache(fresh_redis_server.url)
    cache.set("k", 1)
    asyncio.run(cache.aget("k"))
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock: the backend
        # handles it (tests/reliability/test_processes.py).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report its counters before and after one call, then leave
        try:
            before = cache.stats()["totals"]
            cache.get("k")
            after = cache.stats()["totals"]
            report = [before["calls"], before["connections"], after["calls"], after["connections"]]
            os.write(write, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        if not select.select([pipe], [], [], 15)[0]:
            os.kill(pid, signal.SIGKILL)
        report = json.loads(pipe.read() or "null")
    os.waitpid(pid, 0)
    assert report == [{}, 0, {"GET": 1}, 1]
    # The parent's own counters are untouched.
    assert cache.stats()["totals"]["calls"] == {"SET": 1, "GET": 1}


# -- every command family ----------------------------------------------------------------------

# Commands counted by the server that these tests' observer or a connection's handshake send
# (HELLO and COMMAND INFO: what the server offers, learnt on each new connection).
_NOT_OURS = {"info", "hello", "command", "client", "select", "auth", "ping", "script", "config"}


def _counted_like_the_server(
    cache: Any, server: RedisServer, before: dict[str, dict[str, int]]
) -> dict[str, int]:
    """Check the cache counted each command the server ran under its own family, as many
    times as the server did; return the families counted."""
    calls = cache.stats()["totals"]["calls"]
    assert "OTHER" not in calls, calls
    after = commandstats(server)
    ran = {
        name: stats["calls"] - before.get(name, {}).get("calls", 0)
        for name, stats in after.items()
        if name.split("|")[0] not in _NOT_OURS
    }
    ran = {name: n for name, n in ran.items() if n}
    ours = {family: n for family, n in calls.items() if family.lower() not in _NOT_OURS}
    ours.pop("PIPELINE", None)  # a round trip, not a command
    theirs = {name.upper(): n for name, n in ran.items()}
    # The server also counts what redoxide's Lua scripts call (redis.call('GET', ...)).
    scripted = set(re.findall(r"redis\.p?call\('(\w+)'", inspect.getsource(_scripts)))
    for name in scripted:
        assert ours.get(name, 0) <= theirs.get(name, 0), name
        ours.pop(name, None), theirs.pop(name, None)
    assert ours == theirs
    return calls


def test_every_cache_method_counts_its_commands_under_their_own_families(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    cache = counted_cache(fresh_redis_server.url)
    before = commandstats(fresh_redis_server)
    for method in server_methods():
        prepare(cache)
        call(cache, method, mode)
    calls = _counted_like_the_server(cache, fresh_redis_server, before)
    for family in ("LPUSH", "LRANGE", "LMOVE", "SADD", "SSCAN", "HSET", "HGETALL", "ZADD"):
        assert calls[family] >= 1, family


def test_every_raw_command_counts_under_its_own_family(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    from compat.test_django_redis_client import SCRIPT  # the raw client's commands

    cache = counted_cache(fresh_redis_server.url)
    before = commandstats(fresh_redis_server)
    conn = Ops(cache.client.get_client(), mode)
    for name, args, kwargs in SCRIPT:
        getattr(conn, name)(*args, **kwargs)
    pipe = cache.client.get_client().pipeline()
    for name, args, kwargs in SCRIPT:
        getattr(pipe, name)(*args, **kwargs)
    pipe.execute() if mode == "sync" else asyncio.run(pipe.aexecute())
    calls = _counted_like_the_server(cache, fresh_redis_server, before)
    assert calls["MULTI"] == calls["EXEC"] == 1
