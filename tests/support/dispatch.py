"""Run one test body through the sync methods and through their async twins.

The ``mode`` fixture (tests/conftest.py) is parametrized over MODES, so a test that asks for
it (or for ``ops``, an Ops on the default cache) runs once per mode:

    def test_set_then_get(ops: Ops) -> None:
        ops.set("k", 1)
        assert ops.get("k") == 1

    def test_on_my_cache(make_cache: Callable[..., Any], mode: str) -> None:
        ops = Ops(make_cache(KEY_PREFIX="p"), mode)

Tests whose two paths differ in more than the method name (locks, pipelines, threads) branch
on ``mode == "async"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

MODES = ("sync", "async")


class Ops:
    """Call a cache method by its sync name, either directly or through its async twin.

    ``Ops(cache, "async").set("k", 1)`` runs ``asyncio.run(cache.aset("k", 1))``, so one
    scenario body checks both paths (and every async call runs on a fresh event loop).
    """

    def __init__(self, cache: Any, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.cache = cache
        self.mode = mode

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.mode == "sync":
            method: Callable[..., Any] = getattr(self.cache, name)
            return method
        amethod: Callable[..., Coroutine[Any, Any, Any]] = getattr(self.cache, "a" + name)

        def run(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run(amethod(*args, **kwargs))

        return run
