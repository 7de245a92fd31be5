"""Admission by use (NEAR_CACHE's ADMIT_AFTER_READS): a key is kept only from the read that
makes it read often enough, and only then does the server track it (OPTIN tracking: the
fills go through the tracking connection, after CLIENT CACHING YES). Keys read less often
are read from the server every time and cost it nothing; kept keys stay coherent, also after
a refresh (which must track the key again) and after this process' own writes."""

from __future__ import annotations

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


def test_a_key_is_kept_from_the_read_that_makes_it_frequent(
    make_near: Callable[..., Any], near_server: RedisServer, mode: str
) -> None:
    cache = make_near(near=OPTIONS)
    ops = Ops(cache, mode)
    serving(cache)
    cache.set_many({"page:a": "A", "page:b": "B"})
    base = _counts(cache)
    assert cache.near_cache_stats()["admit_after"] == AFTER
    assert int(near_server.info("stats")["tracking_total_prefixes"]) == 0
    for n in range(1, AFTER):
        assert ops.get("page:a") == "A"
        assert _counts(cache) == (base[0], base[1], base[2], base[3] + n)
    assert tracked_keys(near_server) == 0
    assert ops.get("page:a") == "A"  # the third read: admitted, filled and kept
    assert _counts(cache) == (base[0], base[1] + 1, base[2] + 1, base[3] + AFTER - 1)
    assert tracked_keys(near_server) == 1
    assert ops.get("page:a") == "A"
    assert _counts(cache)[0] == base[0] + 1  # a hit
    # A key read once is read from the server and not tracked.
    assert ops.get("page:b") == "B"
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
    cache.set_many({k: k for k in hot + cold})
    for _ in range(AFTER - 1):
        assert ops.get_many(hot) == {k: k for k in hot}
    assert tracked_keys(near_server) == 0
    # The hot keys' third read and the cold keys' first, in one call.
    assert ops.get_many(hot + cold) == {k: k for k in hot + cold}
    assert tracked_keys(near_server) == len(hot)
    hits = cache.near_cache_stats()["hits"]
    assert ops.get_many(hot + cold) == {k: k for k in hot + cold}
    assert cache.near_cache_stats()["hits"] == hits + len(hot)
    writer.set(str(cache.make_and_validate_key(hot[0])), 7)
    wait_for("the write to be heard", lambda: ops.get_many(hot[:1]) == {hot[0]: 7})


def test_keys_written_as_often_as_read_are_never_kept(
    make_near: Callable[..., Any], near_server: RedisServer, mode: str
) -> None:
    # What a view that writes a key and reads it back does (and a get_many of keys a set_many
    # just wrote): each write forgets the reads counted, so such keys are read from the server
    # and never tracked. A key in use (served from here) keeps its count through a write.
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
