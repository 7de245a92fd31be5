"""One completion bridge per event loop: how the Rust core hands replies to asyncio.

The Rust ``Bridge`` of a loop owns an eventfd that the loop watches with ``add_reader``; a
finished command queues its slot there and the loop drains it. ``bridge()`` returns the running
loop's bridge, making it on first use; the last one used is cached per thread.
"""

from __future__ import annotations

import asyncio
import threading
import weakref

from redoxide import _redoxide
from redoxide._registry import track

__all__ = ["bridge"]


class _Bridges:
    def __init__(self) -> None:
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _redoxide.Bridge] = (
            weakref.WeakKeyDictionary()
        )
        self.local = threading.local()
        track(self)

    def after_fork(self) -> None:
        # A forked child must not share the parent's eventfds or loops.
        self.by_loop.clear()
        self.local = threading.local()


_bridges = _Bridges()


def bridge() -> _redoxide.Bridge:
    """Return the running event loop's bridge (made and registered with it on first use)."""
    loop = asyncio.get_running_loop()
    local = _bridges.local
    last = getattr(local, "last", None)
    if last is not None and last[0]() is loop:
        return last[1]  # type: ignore[no-any-return]
    found = _bridges.by_loop.get(loop)
    if found is None:
        found = _redoxide.Bridge(loop)
        loop.add_reader(found.fileno(), found.drain)
        _bridges.by_loop[loop] = found
    local.last = (weakref.ref(loop), found)  # weak: a closed loop is not kept alive
    return found
