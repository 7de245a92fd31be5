"""Plans: an operation written once, run by a blocking driver and by an async driver.

A plan is a generator. Each step it yields is ``(call, args)``: a callable that follows the
client convention (``call(*args)`` returns the reply; ``call(*args, bridge)`` returns an
awaitable of it), usually a method of a client or router, and its positional arguments. The
driver sends the reply back into the plan, or throws the ``CacheError`` the call raised into
it (a plan catches what it can recover from), and returns what the plan returns. So a sync
method and its async twin share every line of logic, and only the two drivers below differ.

Steps other than commands follow the same convention: ``pause`` (time.sleep or asyncio.sleep),
a router's re-learning of its topology, a cluster's send-to-every-node.

Fail-open lives here too: ``FailOpen`` turns the errors IGNORE_EXCEPTIONS covers into the
caller's fallback, logging them if asked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar, overload

from redoxide._redoxide import Bridge
from redoxide.exceptions import CacheError, CacheTimeout, ConnectionInterrupted, SerializationError

__all__ = [
    "FAIL_OPEN_ERRORS",
    "Computed",
    "FailOpen",
    "Plan",
    "Step",
    "arun",
    "attempt",
    "drive",
    "pause",
    "run",
]

T = TypeVar("T")
# A step: a callable following the client convention, and its positional arguments.
Step = tuple[Callable[..., Any], tuple[Any, ...]]
Plan = Generator[Step, Any, T]

#: What IGNORE_EXCEPTIONS turns into a miss by default: the server being away or slow, and a
#: stored value that cannot be decoded. Server error replies (WRONGTYPE, OOM, ...) always raise.
FAIL_OPEN_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionInterrupted,
    CacheTimeout,
    SerializationError,
)


def run(plan: Plan[T]) -> T:
    """Drive a plan with blocking calls; return its result."""
    try:
        call, args = next(plan)
        while True:
            try:
                reply = call(*args)
            except CacheError as exc:
                call, args = plan.throw(exc)
            else:
                call, args = plan.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun(plan: Plan[T], bridge: Bridge) -> T:
    """Drive a plan with awaits on an event loop's bridge; return its result."""
    try:
        call, args = next(plan)
        while True:
            try:
                reply = await call(*args, bridge)
            except CacheError as exc:
                call, args = plan.throw(exc)
            else:
                call, args = plan.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


@overload
def drive(plan: Plan[T], bridge: None) -> T: ...
@overload
def drive(plan: Plan[T], bridge: Bridge) -> Awaitable[T]: ...
def drive(plan: Plan[T], bridge: Bridge | None) -> T | Awaitable[T]:
    """Run a plan the caller's way: blocking without a bridge, an awaitable with one."""
    return run(plan) if bridge is None else arun(plan, bridge)


def attempt(
    first: Callable[..., Any],
    args: tuple[Any, ...],
    recovery: Callable[..., Plan[T]],
    how: tuple[Any, ...],
    bridge: Bridge | None,
) -> T | Awaitable[T]:
    """``first(*args)`` the caller's way (a call that usually answers: no plan is made for
    it), else, if it raises a CacheError, the plan ``recovery(error, *how)``: a router's call
    on the node it expects, and what it does when that node refuses."""
    if bridge is not None:
        try:
            pending = first(*args, bridge)
        except CacheError as exc:  # (refused before anything was awaited)
            return arun(recovery(exc, *how), bridge)
        return _attempt(pending, recovery, how, bridge)
    try:
        return first(*args)  # type: ignore[no-any-return]
    except CacheError as exc:
        return run(recovery(exc, *how))


async def _attempt(
    pending: Awaitable[T], recovery: Callable[..., Plan[T]], how: tuple[Any, ...], bridge: Bridge
) -> T:
    try:
        return await pending
    except CacheError as exc:
        return await arun(recovery(exc, *how), bridge)


def pause(seconds: float, bridge: Bridge | None = None) -> Awaitable[None] | None:
    """A step that waits: time.sleep in sync code, asyncio.sleep in async code."""
    if bridge is None:
        time.sleep(seconds)
        return None
    return asyncio.sleep(seconds)


async def done(value: T) -> T:
    """An awaitable of a value known already (the async side of a step with nothing to do)."""
    return value


async def then(waiting: Awaitable[Any], finish: Callable[[Any], T]) -> T:
    """An awaitable of ``finish(await waiting)``."""
    return finish(await waiting)


class Computed:
    """A value worked out only when needed, and at most once (get_or_set's default: the plan
    computes it, and a fail-open fallback after that returns the same value instead of
    calling the function again)."""

    __slots__ = ("default", "done", "value")

    def __init__(self, default: Any) -> None:
        self.default = default
        self.done = False
        self.value: Any = None

    def __call__(self) -> Any:
        if not self.done:
            self.value = self.default() if callable(self.default) else self.default
            self.done = True
        return self.value


class FailOpen:
    """IGNORE_EXCEPTIONS: which errors become the caller's fallback, who decides about each
    (EXCEPTION_HANDLER), and whether and how loudly to log them."""

    __slots__ = ("_counting", "enabled", "errors", "handler", "ignored", "level", "log", "logger")

    def __init__(
        self,
        enabled: bool,
        errors: tuple[type[BaseException], ...] = FAIL_OPEN_ERRORS,
        log: bool = False,
        logger_name: str = "redoxide",
        handler: Callable[[Any, BaseException], Any] | None = None,
        level: int = logging.ERROR,
    ) -> None:
        self.enabled = enabled
        #: Caught around every call (fail-open or not), so the hot path needs one except
        #: clause; `failed` re-raises them when fail-open is off.
        self.errors = errors
        self.log = log
        self.logger = logging.getLogger(logger_name)
        self.handler = handler
        self.level = level
        #: Calls answered by their fallback (cache.stats()'s fail_open_misses).
        self.ignored = 0
        # Shared by every instance of a configuration, so by threads: `+=` is a read and a
        # write, which only the GIL kept whole (the failure path can afford the lock).
        self._counting = threading.Lock()

    def failed(self, exc: BaseException, fallback: Any, cache: Any = None) -> Any:
        """Re-raise `exc`, or under IGNORE_EXCEPTIONS hand it to the handler (which may raise
        instead) or log it, and return the fallback."""
        if not (self.enabled and isinstance(exc, self.errors)):
            raise exc
        if self.handler is not None:
            # django-redis' convention: handler(cache, exception) replaces the log; whatever
            # it raises reaches the caller as it is.
            self.handler(cache, exc)
        elif self.log:
            self.logger.log(self.level, "redoxide: ignored %s: %s", type(exc).__name__, exc)
        with self._counting:
            self.ignored += 1
        return fallback() if isinstance(fallback, Computed) else fallback
