"""Admission by use (NEAR_CACHE's ADMIT_AFTER_READS): a key is kept only from the read that
makes it read often enough, and only then does the server track it (OPTIN tracking: the
fills go through the tracking connection, after CLIENT CACHING YES). Keys read less often
are read from the server every time and cost it nothing; kept keys stay coherent, also after
a refresh (which must track the key again) and after this process' own writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from support.dispatch import Ops
from support.near import serving, wait_for
from support.servers import RedisServer

AFTER = 3
#: A minute: the gate cannot shut on a loaded host and turn a hit into a miss.
OPTIONS = {"ADMIT_AFTER_READS": AFTER, "MAX_STALE_MS": 60_000}


def tracked_keys(server: RedisServer) -> int:
    """How many keys the server tracks for its clients (OPTIN: only those read after CLIENT
    CACHING YES; BCAST tracks prefixes, not keys)."""
    return int(server.info("stats")["tracking_total_keys"])


def _counts(cache: Any) -> tuple[int, int, int, int]:
    s = cache.near_cache_stats()
    return s["hits"], s["installs"], s["admitted"], s["not_admitted"]


def _stored(cache: Any, writer: Any, values: dict[str, int]) -> None:
    """Store `values` as another client would (a write by this process counts against a key's
    reads: see the last tests)."""
    writer.mset({str(cache.make_and_validate_key(k)): v for k, v in values.items()})


def test_a_key_is_kept_from_the_read_that_makes_it_frequent(
    make_near: Callable[..., Any], near_server: RedisServer, writer: Any, mode: str
) -> None:
    cache = make_near(near=OPTIONS)
    ops = Ops(cache, mode)
    serving(cache)
    _stored(cache, writer, {"page:a": 1, "page:b": 2})
    base = _counts(cache)
    assert cache.near_cache_stats()["admit_after"] == AFTER
    assert int(near_server.info("stats")["tracking_total_prefixes"]) == 0
    for n in range(1, AFTER):
        assert ops.get("page:a") == 1
        assert _counts(cache) == (base[0], base[1], base[2], base[3] + n)
    assert tracked_keys(near_server) == 0
    assert ops.get("page:a") == 1  # the third read: admitted, filled and kept
    assert _counts(cache) == (base[0], base[1] + 1, base[2] + 1, base[3] + AFTER - 1)
    assert tracked_keys(near_server) == 1
    assert ops.get("page:a") == 1
    assert _counts(cache)[0] == base[0] + 1  # a hit
    # A key read once is read from the server and not tracked.
    assert ops.get("page:b") == 2
    assert tracked_keys(near_server) == 1


def test_kept_keys_stay_coherent_through_refreshes(
    make_near: Callable[..., Any], near_server: RedisServer, writer: Any, mode: str
) -> None:
    cache = make_near(near=OPTIONS)
    ops = Ops(cache, mode)
    serving(cache)
    key = "page:hot"
    server_key = str(cache.make_and_validate_key(key))
    cache.set(key, 0)
    for _ in range(AFTER + 1):
        assert ops.get(key) == 0
    # Another client's writes, one after another: each is heard (the key in use is read
    # again at once on the tracking connection, and must be tracked again by that read, or
    # the next write would go unheard and the copy kept would be stale).
    for n in range(1, 4):
        before = cache.near_cache_stats()
        writer.set(server_key, n)
        wait_for(
            f"write {n} to be heard and the key refreshed",
            lambda before=before: cache.near_cache_stats()["installs"] > before["installs"],
        )
        assert ops.get(key) == n
        after = cache.near_cache_stats()
        assert after["refreshes"] > before["refreshes"]
        assert after["hits"] == before["hits"] + 1, (before, after)


@pytest.mark.parametrize("timeout", [None, 60], ids=["no-expiry", "expiry"])
def test_own_writes_of_keys_in_use_are_kept_and_stay_coherent(
    make_near: Callable[..., Any], near_server: RedisServer, writer: Any, mode: str, timeout: Any
) -> None:
    # On one server a write of keys in use goes through the tracking connection, as a
    # transaction that tracks them again (OPTIN, NOLOOP: the write itself ends the server's
    # tracking of them), and the written values are kept; another client's later writes are
    # still heard. Keys not in use in the same set_many are written, and not kept.
    cache = make_near(near=OPTIONS, TIMEOUT=timeout)
    ops = Ops(cache, mode)
    serving(cache)
    hot = [f"page:mine{i}" for i in range(3)]
    cache.set_many(dict.fromkeys(hot, "old"))
    for _ in range(AFTER + 1):
        assert ops.get_many(hot) == dict.fromkeys(hot, "old")
    before = cache.near_cache_stats()
    ops.set(hot[0], "one")
    ops.set_many({**dict.fromkeys(hot[1:], "many"), "page:cold": "cold"})
    after = cache.near_cache_stats()
    assert after["own_writes_kept"] - before["own_writes_kept"] == len(hot), after
    expected = {hot[0]: "one", **dict.fromkeys(hot[1:], "many"), "page:cold": "cold"}
    assert ops.get_many([*hot, "page:cold"]) == expected
    final = cache.near_cache_stats()
    assert final["hits"] - after["hits"] == len(hot)  # the cold key was read from the server
    assert final["installs"] == after["installs"]
    assert tracked_keys(near_server) == len(hot)
    if timeout is not None:
        assert 0 < int(near_server.cli("TTL", str(cache.make_and_validate_key(hot[0])))) <= 60
    for n, key in enumerate(hot):
        writer.set(str(cache.make_and_validate_key(key)), n)
        wait_for(f"the write of {key} to be heard", lambda key=key, n=n: ops.get(key) == n)
    ops.delete(hot[0])
    assert ops.get(hot[0]) is None


def test_get_many_keeps_only_the_keys_read_often_enough(
    make_near: Callable[..., Any], near_server: RedisServer, writer: Any, mode: str
) -> None:
    cache = make_near(near=OPTIONS)
    ops = Ops(cache, mode)
    serving(cache)
    hot = [f"page:h{i}" for i in range(5)]
    cold = [f"page:c{i}" for i in range(5)]
    values = {k: i for i, k in enumerate(hot + cold)}
    _stored(cache, writer, values)
    for _ in range(AFTER - 1):
        assert ops.get_many(hot) == {k: values[k] for k in hot}
    assert tracked_keys(near_server) == 0
    # The hot keys' third read and the cold keys' first, in one call.
    assert ops.get_many(hot + cold) == values
    assert tracked_keys(near_server) == len(hot)
    hits = cache.near_cache_stats()["hits"]
    assert ops.get_many(hot + cold) == values
    assert cache.near_cache_stats()["hits"] == hits + len(hot)
    writer.set(str(cache.make_and_validate_key(hot[0])), 7)
    wait_for("the write to be heard", lambda: ops.get_many(hot[:1]) == {hot[0]: 7})


def test_keys_written_as_often_as_read_are_never_kept(
    make_near: Callable[..., Any], near_server: RedisServer, mode: str
) -> None:
    # What a view that writes a key and reads it back does (and a get_many of keys a set_many
    # just wrote): a key must be read four times as often as it is written (while not in use)
    # to be kept, so such keys are read from the server and never tracked. A write of a key in
    # use (served from here) does not count against it.
    cache = make_near(near=OPTIONS)
    ops = Ops(cache, mode)
    serving(cache)
    base = cache.near_cache_stats()
    batch = {f"page:b{i}": i for i in range(5)}
    for n in range(3 * AFTER):
        ops.set("page:item", n)
        assert ops.get("page:item") == n
        ops.set_many(batch)
        assert ops.get_many(list(batch)) == batch
    stats = cache.near_cache_stats()
    assert (stats["admitted"], stats["installs"]) == (base["admitted"], base["installs"]), stats
    assert tracked_keys(near_server) == 0
    cache.set("page:hot", 0)
    for _ in range(AFTER + 1):
        assert ops.get("page:hot") == 0
    before = cache.near_cache_stats()
    ops.set("page:hot", 1)
    assert ops.get("page:hot") == 1
    # Kept again at once (filled by that read, or refreshed before it): still frequent.
    wait_for(
        "the key kept again", lambda: cache.near_cache_stats()["installs"] > before["installs"]
    )
    assert cache.near_cache_stats()["admitted"] == before["admitted"]


def test_the_only_near_cache_of_a_process_goes_straight_to_the_core(
    near_server: RedisServer,
) -> None:
    # A process with one near cache on one server (what a site runs) sends get, set,
    # set_many and every command straight to the store's methods, which drop a write's keys
    # themselves: the same guarantees, checked in a process of its own, sync and async
    # (this test process holds many near caches, and takes the path for several).
    near_server.flushall()
    script = textwrap.dedent(
        f"""
        import asyncio, time
        import django
        from django.conf import settings
        common = {{"BACKEND": "redoxide.RedisCache", "LOCATION": {near_server.url!r},
                   "KEY_PREFIX": "alone"}}
        settings.configure(CACHES={{
            "default": {{**common, "OPTIONS": {{"NEAR_CACHE": {OPTIONS!r}}}}},
            "plain": common,
        }})
        django.setup()
        from django.core.cache import cache, caches
        plain = caches["plain"]
        assert {{"get", "execute", "set", "set_many", "mget"}} <= set(cache._client.__dict__)

        def until(what, check):
            deadline = time.monotonic() + 10
            while not check():
                assert time.monotonic() < deadline, what
                time.sleep(0.005)

        until("serving", lambda: cache.get("x") is None and cache.near_cache_stats()["serving"])
        plain.set_many({{"hot": 0, "other": 0}})
        for _ in range({AFTER + 1}):
            assert cache.get("hot") == 0
        stats = cache.near_cache_stats()
        assert stats["installs"] == 1 and stats["hits"] == 1, stats
        cache.set("hot", 1)  # in use: through the tracking connection, kept
        assert cache.get("hot") == 1
        assert cache.near_cache_stats()["own_writes_kept"] == 1
        plain.set("hot", 2)
        until("another client's write", lambda: cache.get("hot") == 2)
        assert cache.incr("hot") == 3 and cache.get("hot") == 3
        cache.set_many({{"hot": 4, "other": 4}})
        assert cache.get_many(["hot", "other"]) == {{"hot": 4, "other": 4}}
        assert cache.delete("hot") and cache.get("hot") is None
        assert cache.has_key("other") and not cache.has_key("hot")

        # get_many: keys not kept read with one MGET; the read that admits them fills them
        # (back in Python); then all hits, answered by the store alone.
        def get_many_rounds(name, get_many):
            plain.set_many({{f"{{name}}{{i}}": i for i in range(3)}})
            keys = [f"{{name}}{{i}}" for i in range(3)] + [f"{{name}}-missing"]
            want = {{f"{{name}}{{i}}": i for i in range(3)}}
            before = cache.near_cache_stats()
            for _ in range({AFTER}):
                assert get_many(keys) == want
            mid = cache.near_cache_stats()
            assert mid["installs"] - before["installs"] == 3, (before, mid)
            assert get_many(keys) == want
            after = cache.near_cache_stats()
            assert after["hits"] - mid["hits"] == 3, (mid, after)
            plain.set(keys[0], "new")
            until("another client's write", lambda: get_many(keys)[keys[0]] == "new")

        get_many_rounds("many", cache.get_many)

        async def main():
            await cache.aset("hot", 5)
            assert await cache.aget("hot") == 5
            assert await cache.aincr("hot") == 6 and await cache.aget("hot") == 6
            await cache.aset_many({{"hot": 7}})
            assert await cache.aget("hot") == 7
            assert await cache.adelete("hot") and await cache.aget("hot") is None
            loop = asyncio.get_running_loop()
            # (Each round's reads awaited from a thread of their own: `until` blocks.)
            await loop.run_in_executor(None, get_many_rounds, "amany", lambda keys:
                asyncio.run_coroutine_threadsafe(cache.aget_many(keys), loop).result())
            cache.clear()
            assert await cache.aget("other") is None

        asyncio.run(main())
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
