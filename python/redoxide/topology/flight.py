"""Topology discovery, one at a time.

Many callers meet a failover at once; one of them asks the cluster (or the sentinels) again,
the others wait for its answer: blocking callers on a lock, async callers on the discovery
already running on their event loop (50 tasks that meet a failover send one CLUSTER SLOTS,
not 50).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from redoxide import plans
from redoxide._redoxide import Bridge
from redoxide._registry import track

__all__ = ["Flight"]


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
