"""One ClientLike call bound to its arguments: what a router routes.

A router picks the node; the call says what to run on it. Each kind of call names its
ClientLike method directly (``node.get``...), so mypy checks every call a router makes against
``ClientLike``, and nothing dispatches by a method's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redoxide._protocols import ClientLike
from redoxide._redoxide import Bridge
from redoxide.exceptions import ResponseError
from redoxide.plans import Step

__all__ = ["Call", "Execute", "Get", "MGet", "Pipeline", "Set", "SetMany"]


class Call:
    """A call waiting for its node: its positional arguments, and which ClientLike method of
    the node it runs (``method``, one line per kind)."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args

    def method(self, node: ClientLike) -> Callable[..., Any]:
        raise NotImplementedError

    def step(self, node: ClientLike) -> Step:
        """The call on `node` as a plan step (a driver appends the bridge when it runs one)."""
        return self.method(node), self.args

    def on(self, node: ClientLike, bridge: Bridge | None) -> Any:
        """Run the call on `node`: its reply, or (with a bridge) an awaitable of it."""
        method = self.method(node)
        return method(*self.args) if bridge is None else method(*self.args, bridge)

    def command(self) -> tuple[Any, ...]:
        """The one command the call sends (to repeat it after a cluster's ASKING)."""
        raise ResponseError(f"cannot follow an ASK redirect for {type(self).__name__}")


class Get(Call):
    """``get(key)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.get

    def command(self) -> tuple[Any, ...]:
        return ("GET", *self.args)


class MGet(Call):
    """``mget(keys)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.mget

    def command(self) -> tuple[Any, ...]:
        return ("MGET", *self.args[0])


class Set(Call):
    """``set(key, value, ttl_ms, nx, xx)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.set

    def command(self) -> tuple[Any, ...]:
        key, value, ttl_ms, nx, xx = self.args
        command: tuple[Any, ...] = ("SET", key, value)
        if ttl_ms is not None:
            command += ("PX", max(1, ttl_ms))
        if nx:
            command += ("NX",)
        elif xx:
            command += ("XX",)
        return command


class SetMany(Call):
    """``set_many(keys, values, ttl_ms)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.set_many


class Execute(Call):
    """``execute(command)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.execute

    def command(self) -> tuple[Any, ...]:
        return tuple(self.args[0])


class Pipeline(Call):
    """``pipeline(commands)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.pipeline
