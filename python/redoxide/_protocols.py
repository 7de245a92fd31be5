"""The seam between the cache and whatever carries its commands.

The Rust ``Client`` (one server) and every topology router satisfy ``ClientLike``: one entry
point per operation, blocking when called without a bridge, and returning an awaitable when
given the event loop's bridge. The overloads let mypy check both kinds of call site (a
forgotten ``await`` is a type error).

What the cache asks of a client beyond its commands (where a key scan goes, where raw reads
go, which servers' writes reach its keys) is ``Topology``'s: every router and the near-cache
client are ``Topology`` subclasses, and ``isinstance(client, Topology)`` is False only for the
Rust client of one server, whose answers the functions below give.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Protocol, overload, runtime_checkable

from redoxide._redoxide import Bridge, Client

__all__ = [
    "Arg",
    "ClientLike",
    "Command",
    "KeepsErrors",
    "Topology",
    "owner",
    "primaries",
    "reads_client",
    "spans_primaries",
]

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


@runtime_checkable
class KeepsErrors(Protocol):
    """A client whose pipeline can return error replies in their places (``pipeline_results``,
    a failed round trip still raising): the Rust client, and what forwards it to the node a
    transaction runs on (the replicas' and Sentinel's routers, the near cache and the traced
    client over one of them). A cluster's router has none: no transaction spans its primaries.
    """

    @overload
    def pipeline_results(self, commands: Iterable[Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline_results(
        self, commands: Iterable[Command], bridge: Bridge
    ) -> Awaitable[list[Any]]: ...


class Topology:
    """A client over more than one Rust client: a router, or the near cache over any client."""

    @property
    def spans_primaries(self) -> bool:
        """Keys live on several primaries (a cluster): a key scan visits each, and no MULTI
        spans them."""
        return False

    @overload
    def scan_nodes(self, bridge: None = None) -> Sequence[ClientLike]: ...
    @overload
    def scan_nodes(self, bridge: Bridge) -> Awaitable[Sequence[ClientLike]]: ...
    def scan_nodes(
        self, bridge: Bridge | None = None
    ) -> Sequence[ClientLike] | Awaitable[Sequence[ClientLike]]:
        """A step: the clients a key scan visits (a list, or an awaitable of one). Only
        asked of a client that spans primaries."""
        raise NotImplementedError

    def replica_reads(self) -> ClientLike:
        """The client whose raw commands go where get / get_many go (a replica, when reads
        go to replicas): what ``get_client(write=False)`` runs on."""
        raise NotImplementedError

    def primaries(self) -> tuple[Client, ...] | None:
        """The Rust clients of the servers whose writes reach this client's keys (whose
        invalidations a near cache listens to); None while they are not known yet."""
        raise NotImplementedError

    def owner(self, key: str) -> Client | None:
        """The Rust client of the primary that owns `key` now (where a near cache's fill
        reads it); None while that is not known."""
        raise NotImplementedError

    def homes(self) -> Client | list[Client] | None:
        """Where keys live now, for a near cache's get to pick a key's primary in the core:
        the one primary, or a cluster's slot table (a list by slot; a new list whenever the
        table is learnt again); None while that is not known (the near cache then asks
        `owner`)."""
        return None

    @property
    def reads_home(self) -> bool:
        """Whether get reads a key from the primary `homes` names (no replica reads): a near
        cache's get of a key it does not keep then reads it there itself."""
        return False


def spans_primaries(client: ClientLike) -> bool:
    """Whether `client`'s keys live on several primaries (a cluster)."""
    return isinstance(client, Topology) and client.spans_primaries


def reads_client(client: ClientLike) -> ClientLike:
    """The client whose raw commands go where `client`'s reads go."""
    return client.replica_reads() if isinstance(client, Topology) else client


def owner(client: ClientLike, key: str) -> Client | None:
    """The Rust client of the primary that owns `key` now (the server itself for one)."""
    if isinstance(client, Topology):
        return client.owner(key)
    return client if isinstance(client, Client) else None


def homes(client: ClientLike) -> Client | list[Client] | None:
    """Where `client`'s keys live now (see `Topology.homes`; the server itself for one)."""
    if isinstance(client, Topology):
        return client.homes()
    return client if isinstance(client, Client) else None


def primaries(client: ClientLike) -> tuple[Client, ...] | None:
    """The Rust clients whose writes reach `client`'s keys (the server itself for one)."""
    if isinstance(client, Topology):
        return client.primaries()
    return (client,) if isinstance(client, Client) else None
