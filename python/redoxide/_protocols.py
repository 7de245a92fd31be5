"""The seam between the cache and whatever carries its commands.

The Rust ``Client`` (one server) and every topology router satisfy ``ClientLike``: one entry
point per operation, blocking when called without a bridge, and returning an awaitable when
given the event loop's bridge. The overloads let mypy check both kinds of call site (a
forgotten ``await`` is a type error).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Protocol, overload

from redoxide._redoxide import Bridge

__all__ = ["Arg", "ClientLike", "Command"]

#: One argument of a command.
Arg = str | bytes | int | float
#: A command: its name, then its arguments.
Command = Sequence[Arg]


class ClientLike(Protocol):
    """Commands to one server, or to a topology of them."""

    @overload
    def get(self, key: str, bridge: None = None) -> bytes | None: ...
    @overload
    def get(self, key: str, bridge: Bridge) -> Awaitable[bytes | None]: ...

    @overload
    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: None = None,
    ) -> bool: ...
    @overload
    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None,
        nx: bool,
        xx: bool,
        bridge: Bridge,
    ) -> Awaitable[bool]: ...

    @overload
    def mget(self, keys: Iterable[str | bytes], bridge: None = None) -> list[bytes | None]: ...
    @overload
    def mget(
        self, keys: Iterable[str | bytes], bridge: Bridge
    ) -> Awaitable[list[bytes | None]]: ...

    @overload
    def set_many(
        self,
        keys: Iterable[str | bytes],
        values: Iterable[bytes],
        ttl_ms: int | None = None,
        bridge: None = None,
    ) -> Any: ...
    @overload
    def set_many(
        self,
        keys: Iterable[str | bytes],
        values: Iterable[bytes],
        ttl_ms: int | None,
        bridge: Bridge,
    ) -> Awaitable[Any]: ...

    @overload
    def execute(self, args: Command, bridge: None = None) -> Any: ...
    @overload
    def execute(self, args: Command, bridge: Bridge) -> Awaitable[Any]: ...

    @overload
    def pipeline(self, commands: Iterable[Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline(self, commands: Iterable[Command], bridge: Bridge) -> Awaitable[list[Any]]: ...
