"""Topology discovery, one at a time.

Many callers meet a failover at once; one of them asks the cluster (or the sentinels) again,
the others wait for its answer: blocking callers on a lock, async callers on the discovery
already running on their event loop (50 tasks that meet a failover send one CLUSTER SLOTS,
not 50).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redoxide import plans
from redoxide._redoxide import Bridge
from redoxide._registry import track

__all__ = ["Flight", "always"]

T = TypeVar("T")


def always() -> bool:
    """A `Flight.then` whose discovery is always asked for (the lock's holder still asks
    whether it is needed)."""
    return True


class Flight:
    """At most one run of a discovery plan at a time, per process and per event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, asyncio.Future[None]] = {}
        track(self)

    def after_fork(self) -> None:
        self._lock = threading.Lock()
        self._running = {}

    def run(self, plan: Callable[[], plans.Plan[Any]], needed: Callable[[], bool]) -> None:
        """Run plan() unless, once the lock is ours, it is no longer needed."""
        with self._lock:
            if needed():
                plans.run(plan())

    async def arun(
        self, plan: Callable[[], plans.Plan[Any]], needed: Callable[[], bool], bridge: Bridge
    ) -> None:
        """Run plan() with awaits, or wait for the run already in flight on this loop."""
        loop = asyncio.get_running_loop()
        running = self._running.get(id(loop))
        if running is not None and not running.done():
            await asyncio.wait([running])  # its outcome is the leader's to report
            return
        if not needed():
            return
        done: asyncio.Future[None] = loop.create_future()
        self._running[id(loop)] = done
        try:
            await plans.arun(plan(), bridge)
        finally:
            if self._running.get(id(loop)) is done:
                del self._running[id(loop)]
            done.set_result(None)

    def then(
        self,
        plan: Callable[[], plans.Plan[Any]],
        needed: Callable[[], bool],
        answer: Callable[[], T],
        bridge: Bridge | None,
        due: Callable[[], bool] | None = None,
    ) -> T | Awaitable[T]:
        """A step: a discovery if `due()` says so (by default `needed()`; `run` and `arun` ask
        `needed()` again once it is this caller's turn), then `answer()`: blocking without a
        bridge, an awaitable with one."""
        if bridge is not None:
            return self._athen(plan, needed, answer, bridge, due or needed)
        if (due or needed)():
            self.run(plan, needed)
        return answer()

    async def _athen(
        self,
        plan: Callable[[], plans.Plan[Any]],
        needed: Callable[[], bool],
        answer: Callable[[], T],
        bridge: Bridge,
        due: Callable[[], bool],
    ) -> T:
        if due():
            await self.arun(plan, needed, bridge)
        return answer()
