"""One completion bridge per event loop: how the Rust core hands replies to asyncio.

The Rust ``Bridge`` of a loop owns a descriptor that the loop watches with ``add_reader`` (an
eventfd on Linux, a self-pipe elsewhere); a finished command queues its slot there and the loop
drains it. A loop without a working ``add_reader`` (Windows' proactor loop raises
``NotImplementedError``) gets a bridge that schedules the drain with ``call_soon_threadsafe``
instead. ``REDOXIDE_ASYNC_WAKEUP=eventfd|pipe|threadsafe`` overrides the choice (for tests).
``bridge()`` returns the running loop's bridge, making it on first use (``_bridge_of``); the
last one used is cached per thread, in the core (``_redoxide.current_bridge``: one call on the
request path).
"""

from __future__ import annotations

import asyncio
import atexit
import weakref
from collections.abc import Callable

from redoxide import _redoxide
from redoxide._registry import track

__all__ = ["bridge"]


class _Bridges:
    def __init__(self) -> None:
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _redoxide.Bridge] = (
            weakref.WeakKeyDictionary()
        )
        track(self)

    def after_fork(self) -> None:
        # A forked child must not share the parent's eventfds or loops (the core's per-thread
        # cache knows a forked child by itself).
        self.by_loop.clear()


_bridges = _Bridges()

# Before the interpreter finalizes, runtime threads stop attaching to it (a thread waiting for
# the GIL then would be ended in a way that aborts the process). Registered at import, so it
# runs after the exit hooks of whatever imported redoxide later (hooks run last-in first-out),
# which may still await the cache.
atexit.register(_redoxide._interpreter_exits)


#: Return the running event loop's bridge (made and registered with it on first use).
bridge: Callable[[], _redoxide.Bridge] = _redoxide.current_bridge


def _bridge_of(loop: asyncio.AbstractEventLoop) -> _redoxide.Bridge:
    """Return `loop`'s bridge, made and registered with it on first use (the core's
    ``current_bridge`` asks here when its cache misses)."""
    found = _bridges.by_loop.get(loop)
    if found is None:
        found = _attach(loop)
        _bridges.by_loop[loop] = found
    return found


def _attach(loop: asyncio.AbstractEventLoop) -> _redoxide.Bridge:
    """Return a new bridge for loop, registered with its ``add_reader`` if it has a descriptor
    and the loop can watch one."""
    made = _redoxide.Bridge(loop)
    fd = made.fileno()
    if fd is None:
        return made
    try:
        loop.add_reader(fd, made.drain)
    except NotImplementedError:
        # The descriptor is closed with `made`; the loop is woken through Python instead.
        return _redoxide.Bridge(loop, wakeup="threadsafe")
    return made
