"""The ClientLike methods of a router, written once over a read path and a write path."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar, overload

from redoxide._protocols import ClientLike, Command, Topology
from redoxide._redoxide import Bridge, Client
from redoxide.topology.calls import (
    Call,
    Execute,
    Get,
    MGet,
    Pipeline,
    PipelineResults,
    Set,
    SetMany,
)

__all__ = ["ReadClient", "ReplicaReads", "Router"]

R = TypeVar("R")


class Router(Topology):
    """get / get_many go through `_read`, everything else through `_write`; a subclass says
    where each goes (a replica, the followed primary...). Both take the call (calls.py) and
    the bridge (None: blocking; else the call returns an awaitable).
    """

    def _read(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        return self._write(call, bridge)

    def _write(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        raise NotImplementedError

    @overload
    def get(self, key: str, bridge: None = None) -> bytes | None: ...
    @overload
    def get(self, key: str, bridge: Bridge) -> Awaitable[bytes | None]: ...
    def get(self, key: str, bridge: Bridge | None = None) -> bytes | Awaitable[bytes | None] | None:
        return self._read(Get(key), bridge)

    @overload
    def mget(self, keys: Iterable[Any], bridge: None = None) -> list[bytes | None]: ...
    @overload
    def mget(self, keys: Iterable[Any], bridge: Bridge) -> Awaitable[list[bytes | None]]: ...
    def mget(
        self, keys: Iterable[Any], bridge: Bridge | None = None
    ) -> list[bytes | None] | Awaitable[list[bytes | None]]:
        return self._read(MGet(list(keys)), bridge)

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
        self, key: str, value: bytes, ttl_ms: int | None, nx: bool, xx: bool, bridge: Bridge
    ) -> Awaitable[bool]: ...
    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Bridge | None = None,
    ) -> bool | Awaitable[bool]:
        return self._write(Set(key, value, ttl_ms, nx, xx), bridge)

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Bridge | None = None
    ) -> Any:
        return self._write(SetMany(list(keys), list(values), ttl_ms), bridge)

    def execute(self, args: Command, bridge: Bridge | None = None) -> Any:
        return self._write(Execute(args), bridge)

    @overload
    def pipeline(self, commands: Iterable[Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline(self, commands: Iterable[Command], bridge: Bridge) -> Awaitable[list[Any]]: ...
    def pipeline(
        self, commands: Iterable[Command], bridge: Bridge | None = None
    ) -> list[Any] | Awaitable[list[Any]]:
        return self._write(Pipeline(list(commands)), bridge)

    @overload
    def pipeline_results(self, commands: Iterable[Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline_results(
        self, commands: Iterable[Command], bridge: Bridge
    ) -> Awaitable[list[Any]]: ...
    def pipeline_results(
        self, commands: Iterable[Command], bridge: Bridge | None = None
    ) -> list[Any] | Awaitable[list[Any]]:
        """``pipeline`` with error replies in their places, on the node ``pipeline`` goes to
        (the primary; a read client's replica), recovered from as ``pipeline`` is (see
        calls.keeping_errors): where a transaction with ``raise_on_error=False`` runs."""
        return self._write(PipelineResults(list(commands)), bridge)

    def replica_reads(self) -> ClientLike:
        """Raw commands sent where this router's reads go (a replica, when it reads from
        replicas): what ``get_client(write=False)`` runs on."""
        return ReplicaReads(self)


class ReadClient(Router):
    """What ``get_client(write=False)`` runs on: a client that sends every command where
    `of`'s reads go (subclasses say how) and answers for `of`'s topology otherwise."""

    def __init__(self, of: Topology) -> None:
        self._of = of

    def __repr__(self) -> str:
        return f"<redoxide reads of {self._of!r}>"

    def replica_reads(self) -> ClientLike:
        return self

    def primaries(self) -> tuple[Client, ...] | None:
        return self._of.primaries()

    def owner(self, key: str) -> Client | None:
        return self._of.owner(key)


class ReplicaReads(ReadClient):
    """A router's read client: every command routed as its get / get_many are, to a replica
    that answers, or the primary when there is none. A write sent this way is the replica's to
    refuse (READONLY), as on django-redis' read client."""

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self._router = router

    def _write(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        return self._router._read(call, bridge)
