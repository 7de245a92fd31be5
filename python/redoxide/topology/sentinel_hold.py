"""A failover's hold on writes (see sentinel_events.py for when one starts and ends), and how
long it may last.

A hold that neither a promotion nor an abort ends comes up for review HOLD_LIMIT after it
began: the sentinels (the one leading the failover first) are asked ``SENTINEL MASTER``, and
while one of them says a failover is in progress (flag ``failover_in_progress``) the hold goes
on, reviewed again every HOLD_RECHECK: releasing the writes to the old primary then would lose
them when it is demoted. It lapses (the writes go where the sentinels name, as without the
watcher) when no sentinel that answers reports a failover in progress, when none answers, or at
the latest the failover's ``failover-timeout`` (as that sentinel reports it: the time Sentinel
gives a promotion before it aborts it) plus HOLD_LIMIT after it began, and never later than
HOLD_CAP. Each held write still waits at most its SOCKET_TIMEOUT, then raises CacheTimeout
without having been sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

__all__ = ["HOLD_CAP", "HOLD_LIMIT", "HOLD_RECHECK", "Hold"]

#: A hold comes up for review this long after it began (see above).
HOLD_LIMIT = 5.0
#: While a sentinel reports the failover in progress, the hold is reviewed again this often.
HOLD_RECHECK = 0.25
#: No hold outlasts this, whatever the sentinels report (Sentinel's default failover-timeout).
HOLD_CAP = 180.0


class Hold:
    """A failover's hold on writes (the replica it promotes is `target`), ended once by
    ``end()``: sync writers wait on its event, async ones on one future per event loop.

    Its poller (SentinelPrimary._await_promotion) reviews it (``lapses()``) when `until` comes;
    `grace` is how long past `until` that review may take: a writer that finds it overdue by
    more (the poller is gone) lets the hold lapse itself."""

    __slots__ = (
        "_ended", "_futures", "_lock", "cap", "grace", "reviews", "sentinel", "started",
        "target", "until", "waiting",
    )  # fmt: skip

    def __init__(self, target: tuple[str, int], sentinel: tuple[str, int], grace: float) -> None:
        self.target = target
        self.sentinel = sentinel  # the sentinel leading that failover
        self.started = time.monotonic()
        self.until = self.started + HOLD_LIMIT
        self.cap: float | None = None  # set at the first review that keeps it on
        self.grace = grace
        self.reviews = 0  # reviews that kept it on
        self.waiting = 0  # writes waiting on it now
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._futures: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}

    def lapses(self, underway: Callable[[tuple[str, int]], float | None]) -> bool:
        """Whether the hold lapses now: never before `until`; then only if `underway(first)`
        (the sentinels asked, `first` first: the failover-timeout, in seconds, of one that
        reports a failover in progress, or None) says no failover is in progress, or the cap
        has passed. Else `until` moves on by HOLD_RECHECK."""
        if time.monotonic() < self.until:
            return False
        failover_timeout = underway(self.sentinel)
        now = time.monotonic()
        if failover_timeout is None:
            return True
        if self.cap is None:
            self.cap = self.started + min(HOLD_CAP, failover_timeout + HOLD_LIMIT)
        if now >= self.cap:
            return True
        self.until = min(self.cap, now + HOLD_RECHECK)
        self.reviews += 1
        return False

    def overdue(self) -> bool:
        """Past `until` by more than `grace`: nobody reviewed it in time."""
        return time.monotonic() >= self.until + self.grace

    def ended(self, timeout: float) -> bool:
        """Wait at most `timeout` for the end; whether it came."""
        return self._ended.wait(timeout)

    def wait(self, timeout: float) -> bool:
        """Wait for the end, counted as a waiting write, at most `timeout` and no longer than
        the hold may last (`until` moves on while its reviews keep it on); whether it came."""
        end = time.monotonic() + timeout
        with self._lock:
            self.waiting += 1
        try:
            while True:
                left = min(end, self.until + self.grace) - time.monotonic()
                if left <= 0:
                    return self._ended.is_set()
                if self._ended.wait(left):
                    return True
        finally:
            with self._lock:
                self.waiting -= 1

    async def await_end(self, timeout: float) -> bool:
        """As wait(), for a coroutine: one future per event loop, resolved once at the end."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        with self._lock:
            if self._ended.is_set():
                return True
            entry = self._futures.get(id(loop))
            if entry is None:
                entry = self._futures[id(loop)] = (loop, loop.create_future())
            self.waiting += 1
        try:
            while True:
                left = min(end - loop.time(), self.until + self.grace - time.monotonic())
                if left <= 0:
                    return self._ended.is_set()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(entry[1]), left)
                    return True
        finally:
            with self._lock:
                self.waiting -= 1

    def end(self) -> None:
        with self._lock:
            self._ended.set()
            futures, self._futures = list(self._futures.values()), {}
        for loop, future in futures:
            with contextlib.suppress(RuntimeError):  # a loop closed since
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
