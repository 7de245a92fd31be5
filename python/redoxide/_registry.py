"""Process-wide state, and the one fork hook that resets it in a child.

Django makes a backend instance per thread and per async context, so anything that must be
shared (the client of a configuration, a node's client, a router's discovery lock) lives in a
``Registry`` here, built once under a lock. A forked child keeps the parent's clients (the Rust
core gives the child fresh connections and never touches the parent's) but must not inherit a
lock that another thread of the parent held at fork(): the hook gives every registered object
a fresh one.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

__all__ = ["ForkAware", "Registry", "track"]

V = TypeVar("V")


class ForkAware(Protocol):
    """Something that holds locks or per-process state and resets them in a forked child."""

    def after_fork(self) -> None: ...


_tracked: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def track(obj: ForkAware) -> None:
    """Call ``obj.after_fork()`` in every forked child (held weakly)."""
    _tracked.add(obj)


def _after_fork_in_child() -> None:
    for obj in list(_tracked):
        obj.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Registry(Generic[V]):
    """A process-wide map whose values are made once, on first use, under a lock."""

    def __init__(self) -> None:
        self._items: dict[Hashable, V] = {}
        self._lock = threading.Lock()
        track(self)

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """Return the value for key, made by ``make()`` if there is none yet."""
        value = self._items.get(key)
        if value is None:
            with self._lock:
                value = self._items.get(key)
                if value is None:
                    value = self._items[key] = make()
        return value

    def after_fork(self) -> None:
        self._lock = threading.Lock()
