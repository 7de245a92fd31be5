"""incr / decr: missing keys raise ValueError (and create nothing), and increments are atomic
on the server across threads and under asyncio.gather. Serializer-specific cases (raw digits,
serialized floats) are in values/test_serializers.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.dispatch import Ops


def test_incr_decr_of_a_missing_key_raise_value_error(
    cache: Any, redis_client: Any, mode: str
) -> None:
    ops = Ops(cache, mode)
    with pytest.raises(ValueError):
        ops.incr("missing")
    with pytest.raises(ValueError):
        ops.decr("missing", 5)
    with pytest.raises(ValueError):
        ops.incr("missing", version=3)
    assert redis_client.exists(":1:missing", ":3:missing") == 0  # not created


def test_incr_is_atomic_across_threads(make_cache: Callable[..., Any]) -> None:
    make_cache().set("counter", 0)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            cache = make_cache()  # one instance per thread, as Django's `caches` gives
            for _ in range(500):
                cache.incr("counter")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert make_cache().get("counter") == 2000


def test_aincr_is_atomic_under_gather(cache: Any) -> None:
    cache.set("counter", 0)

    async def bump() -> list[int]:
        return await asyncio.gather(*(cache.aincr("counter") for _ in range(300)))

    results = asyncio.run(bump())
    assert sorted(results) == list(range(1, 301))
    assert cache.get("counter") == 300
