"""django-redis extras on the main class: set(nx/xx), the raw client, stampede protection,
CLEAR_PREFIX_ONLY. The fail-open settings (IGNORE_EXCEPTIONS and its kin) are tested in
reliability/test_fail_open.py.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from support.dispatch import Ops

pytestmark = pytest.mark.skipif(
    os.environ.get("REDOXIDE_TEST_BACKEND", "redoxide") != "redoxide",
    reason="redoxide extras",
)


def test_set_nx_and_xx_report_whether_they_stored(cache: Any, mode: str) -> None:
    call = Ops(cache, mode).set

    assert call("k", 1, xx=True) is False
    assert cache.get("k") is None
    assert call("k", 1, nx=True) is True
    assert call("k", 2, nx=True) is False
    assert cache.get("k") == 1
    assert call("k", 3, xx=True) is True
    assert cache.get("k") == 3
    assert call("k", 4) is None
    # Expire-now conditional sets store nothing but say what they would have done.
    assert call("gone", 1, timeout=0, nx=True) is True
    assert cache.get("gone") is None
    assert call("k", 5, timeout=0, xx=True) is True
    assert cache.get("k") is None


def test_raw_client_runs_any_command_on_the_same_connections(cache: Any) -> None:
    key = cache.make_key("h")
    assert cache.client.execute("HSET", key, "f", "v") == 1
    assert cache.client.execute("HGET", key, "f") == b"v"
    assert cache.client.pipeline(("HINCRBY", key, "n", 2), ("HGET", key, "n")) == [2, b"2"]
    # A pipeline of one command still answers with a list (regression).
    assert cache.client.pipeline(("HGET", key, "n")) == [b"2"]
    assert asyncio.run(cache.client.apipeline(("HGET", key, "n"))) == [b"2"]

    async def run() -> Any:
        await cache.client.aexecute("HSET", key, "g", "w")
        return await cache.client.apipeline(("HGET", key, "g"), ("HLEN", key))

    assert asyncio.run(run()) == [b"w", 3]
    # An empty pipeline sends nothing and answers an empty list, sync and async (regression:
    # the async one returned a list where an awaitable was due).
    assert cache.client.pipeline() == []
    assert asyncio.run(cache.client.apipeline()) == []


def stampede_cache(make_cache: Any) -> Any:
    return make_cache(STAMPEDE_PROTECTION=True, STAMPEDE_WINDOW=0.5, STAMPEDE_LOCK_TIMEOUT=2.0)


def test_stampede_cold_key_computes_once_across_threads(make_cache: Any) -> None:
    import threading
    import time

    cache = stampede_cache(make_cache)
    calls = []

    def expensive() -> str:
        calls.append(1)
        time.sleep(0.2)
        return "fresh"

    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get_or_set("k", expensive, 30)))
        for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == ["fresh"] * 16
    assert len(calls) == 1


def test_stampede_near_expiry_one_task_recomputes_others_get_current(make_cache: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    cache = stampede_cache(make_cache)
    calls = []
    others: list[Any] = []

    async def arrive_meanwhile() -> list[Any]:
        return list(
            await asyncio.gather(*(cache.aget_or_set("k", recompute, 10) for _ in range(49)))
        )

    def recompute() -> str:
        calls.append(1)
        if len(calls) == 1:
            # While the first caller recomputes (holding the lock), 49 more arrive together,
            # on an event loop of their own: each gets the current value at once. (Arriving
            # on the first caller's loop, they could be served after it, whenever its replies
            # came back within the poll: then "new" would be the current value.)
            with ThreadPoolExecutor(1) as pool:
                others.extend(pool.submit(asyncio.run, arrive_meanwhile()).result(timeout=30))
        return "new"

    async def run() -> Any:
        await cache.aset("k", "old", timeout=10)
        # 3 s of a 10 s life left: in the last half (STAMPEDE_WINDOW 0.5), without a pause.
        assert cache.client.execute("PEXPIRE", cache.make_key("k"), 3000) == 1
        return await cache.aget_or_set("k", recompute, 10)

    assert asyncio.run(run()) == "new"
    assert len(calls) == 1
    assert others == ["old"] * 49
    assert cache.get("k") == "new"
    assert 5000 < cache.client.execute("PTTL", cache.make_key("k")) <= 10000
    # Plain readers and the stored format are untouched: no lock key is left behind either.
    assert cache.client.execute("EXISTS", "{" + cache.make_key("k") + "}:redoxide-recompute") == 0


def test_clear_prefix_only_leaves_other_data_alone(
    make_cache: Any, redis_client: Any, mode: str
) -> None:
    mine = make_cache(KEY_PREFIX="app*1", CLEAR_PREFIX_ONLY=True)
    other = make_cache(KEY_PREFIX="app11")
    mine.set_many({"a": 1, "b": 2})
    mine.set("c", 3, version=7)
    other.set("a", "keep")
    redis_client.set("unrelated", "keep")
    assert Ops(mine, mode).clear() is True
    assert mine.get_many(["a", "b"]) == {}
    assert mine.get("c", version=7) is None
    assert other.get("a") == "keep"
    assert redis_client.get("unrelated") == b"keep"
