"""One ClientLike call bound to its arguments: what a router routes.

A router picks the node; the call says what to run on it. Each kind of call names its
ClientLike method directly (``node.get``...), so mypy checks every call a router makes against
``ClientLike``, and nothing dispatches by a method's name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, overload

from redoxide._protocols import ClientLike, Command, KeepsErrors
from redoxide._redoxide import Bridge
from redoxide.exceptions import ResponseError
from redoxide.plans import Plan, Step, attempt, then
from redoxide.topology.commands import command_name

__all__ = [
    "Call",
    "Execute",
    "Get",
    "MGet",
    "Pipeline",
    "PipelineResults",
    "Set",
    "SetMany",
    "is_transaction",
    "keeping_errors",
    "raise_refused",
]

#: What a call's ClientLike method returns (without a bridge; an awaitable of it with one).
R = TypeVar("R")


class Call(Generic[R]):
    """A call waiting for its node: its positional arguments, and which ClientLike method of
    the node it runs (``method``, one line per kind), whose reply is an `R`."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args

    def method(self, node: ClientLike) -> Callable[..., Any]:
        raise NotImplementedError

    def step(self, node: ClientLike) -> Step:
        """The call on `node` as a plan step (a driver appends the bridge when it runs one)."""
        return self.method(node), self.args

    def plan_on(self, node: ClientLike) -> Plan[R]:
        """The call on `node` as a plan of one step, typed: ``yield from call.plan_on(node)``
        is its reply."""
        reply: R = yield self.step(node)
        return reply

    @overload
    def on(self, node: ClientLike, bridge: None) -> R: ...
    @overload
    def on(self, node: ClientLike, bridge: Bridge) -> Awaitable[R]: ...
    def on(self, node: ClientLike, bridge: Bridge | None) -> R | Awaitable[R]:
        """Run the call on `node`: its reply, or (with a bridge) an awaitable of it."""
        method = self.method(node)
        reply: R | Awaitable[R] = (
            method(*self.args) if bridge is None else method(*self.args, bridge)
        )
        return reply

    def on_else(
        self,
        node: ClientLike,
        recovery: Callable[..., Plan[R]],
        how: tuple[Any, ...],
        bridge: Bridge | None,
    ) -> R | Awaitable[R]:
        """The call on `node`, else (it raised a CacheError) the plan ``recovery(error,
        *how)``: blocking without a bridge, an awaitable with one (`plans.attempt`)."""
        return attempt(self.method(node), self.args, recovery, how, bridge)

    def command(self) -> tuple[Any, ...]:
        """The one command the call sends (to repeat it after a cluster's ASKING)."""
        raise ResponseError(f"cannot follow an ASK redirect for {type(self).__name__}")


class Get(Call[bytes | None]):
    """``get(key)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.get

    def command(self) -> tuple[Any, ...]:
        return ("GET", *self.args)


class MGet(Call[list[bytes | None]]):
    """``mget(keys)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.mget

    def command(self) -> tuple[Any, ...]:
        return ("MGET", *self.args[0])


class Set(Call[bool]):
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


class SetMany(Call[Any]):
    """``set_many(keys, values, ttl_ms)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.set_many


class Execute(Call[Any]):
    """``execute(command)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.execute

    def command(self) -> tuple[Any, ...]:
        return tuple(self.args[0])


class Pipeline(Call[list[Any]]):
    """``pipeline(commands)``"""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return node.pipeline


class PipelineResults(Pipeline):
    """``pipeline_results(commands)``: error replies in their places (see `keeping_errors`:
    a transaction's refusals still raise, so a router recovers from them as from
    ``pipeline``'s). A Pipeline, so the near cache drops the keys its commands write."""

    __slots__ = ()

    def method(self, node: ClientLike) -> Callable[..., Any]:
        return keeping_errors(node)


def is_transaction(commands: Sequence[Command]) -> bool:
    """Whether `commands` are one transaction: MULTI, the queued commands, EXEC."""
    return (
        len(commands) >= 2
        and bool(commands[0])
        and bool(commands[-1])
        and command_name(commands[0]) == "MULTI"
        and command_name(commands[-1]) == "EXEC"
    )


def raise_refused(replies: list[Any]) -> list[Any]:
    """A transaction's replies (MULTI's, one per queued command, EXEC's), if none of them is
    an error reply; else the first raises, as ``pipeline`` raises it: a command the server
    refused to queue (READONLY after a failover, a wrong number of arguments...) aborted the
    transaction, and nothing ran. Error replies inside EXEC's own list are left to the caller."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    return replies


def keeping_errors(node: Any) -> Callable[..., Any]:
    """`node`'s ``pipeline_results``, with `raise_refused` applied to a transaction's replies:
    the error replies of the commands that ran come back in their places, on every topology,
    and a router meets a refused transaction as a raised error, as it does from ``pipeline``
    (and recovers the same way)."""
    if not isinstance(node, KeepsErrors):
        raise NotImplementedError(f"redoxide: {node!r} has no pipeline that keeps error replies")
    send = node.pipeline_results

    def results(
        commands: Iterable[Command], bridge: Bridge | None = None
    ) -> list[Any] | Awaitable[list[Any]]:
        commands = list(commands)
        if bridge is None:
            replies = send(commands)
            return raise_refused(replies) if is_transaction(commands) else replies
        if is_transaction(commands):
            return then(send(commands, bridge), raise_refused)
        return send(commands, bridge)

    return results
