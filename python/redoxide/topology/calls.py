"""One ClientLike call bound to its arguments: what a router routes.

A router picks the node; the call says what to run on it. Each kind of call names its
ClientLike method directly (``node.get``...), so mypy checks every call a router makes against
``ClientLike``, and nothing dispatches by a method's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redoxide._protocols import ClientLike, Command
from redoxide._redoxide import Bridge
from redoxide.exceptions import ResponseError
from redoxide.plans import Step

__all__ = ["Call", "Execute", "Get", "MGet", "Pipeline", "Set", "SetMany"]


class Call:
    """A call waiting for its node. The frequent kinds run `on` a node without making the
    step first (one call fewer on a router's hot path)."""

    __slots__ = ()

    def step(self, node: ClientLike) -> Step:
        """The call on `node` as a plan step: the method and its arguments (a driver appends
        the bridge when it runs one)."""
        raise NotImplementedError

    def on(self, node: ClientLike, bridge: Bridge | None) -> Any:
        """Run the call on `node`: its reply, or (with a bridge) an awaitable of it."""
        method, args = self.step(node)
        return method(*args) if bridge is None else method(*args, bridge)

    def command(self) -> tuple[Any, ...]:
        """The one command the call sends (to repeat it after a cluster's ASKING)."""
        raise ResponseError(f"cannot follow an ASK redirect for {type(self).__name__}")


class Get(Call):
    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def step(self, node: ClientLike) -> Step:
        return node.get, (self.key,)

    def on(self, node: ClientLike, bridge: Bridge | None) -> Any:
        return node.get(self.key) if bridge is None else node.get(self.key, bridge)

    def command(self) -> tuple[Any, ...]:
        return ("GET", self.key)


class MGet(Call):
    __slots__ = ("keys",)

    def __init__(self, keys: list[Any]) -> None:
        self.keys = keys

    def step(self, node: ClientLike) -> Step:
        return node.mget, (self.keys,)

    def on(self, node: ClientLike, bridge: Bridge | None) -> Any:
        return node.mget(self.keys) if bridge is None else node.mget(self.keys, bridge)

    def command(self) -> tuple[Any, ...]:
        return ("MGET", *self.keys)


class Set(Call):
    __slots__ = ("key", "nx", "ttl_ms", "value", "xx")

    def __init__(self, key: str, value: bytes, ttl_ms: int | None, nx: bool, xx: bool) -> None:
        self.key, self.value, self.ttl_ms, self.nx, self.xx = key, value, ttl_ms, nx, xx

    def step(self, node: ClientLike) -> Step:
        return node.set, (self.key, self.value, self.ttl_ms, self.nx, self.xx)

    def command(self) -> tuple[Any, ...]:
        command: tuple[Any, ...] = ("SET", self.key, self.value)
        if self.ttl_ms is not None:
            command += ("PX", max(1, self.ttl_ms))
        if self.nx:
            command += ("NX",)
        elif self.xx:
            command += ("XX",)
        return command


class SetMany(Call):
    __slots__ = ("keys", "ttl_ms", "values")

    def __init__(self, keys: list[Any], values: list[bytes], ttl_ms: int | None) -> None:
        self.keys, self.values, self.ttl_ms = keys, values, ttl_ms

    def step(self, node: ClientLike) -> Step:
        return node.set_many, (self.keys, self.values, self.ttl_ms)


class Execute(Call):
    __slots__ = ("args",)

    def __init__(self, args: Command) -> None:
        self.args = args

    def step(self, node: ClientLike) -> Step:
        return node.execute, (self.args,)

    def on(self, node: ClientLike, bridge: Bridge | None) -> Any:
        return node.execute(self.args) if bridge is None else node.execute(self.args, bridge)

    def command(self) -> tuple[Any, ...]:
        return tuple(self.args)


class Pipeline(Call):
    __slots__ = ("commands",)

    def __init__(self, commands: Sequence[Command]) -> None:
        self.commands = commands

    def step(self, node: ClientLike) -> Step:
        return node.pipeline, (self.commands,)
