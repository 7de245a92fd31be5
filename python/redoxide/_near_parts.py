"""The near cache's parts (redoxide.near uses them): which keys a write drops and how to find
them, a get_many's fill outcomes put in place, a cluster set_many by slot, what a router
recovers from, and the server key prefixes a configuration keeps."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from redoxide._near_options import NearCacheConfig
from redoxide._protocols import ClientLike
from redoxide._redoxide import Bridge, Client, key_slots
from redoxide.exceptions import (
    CacheError,
    ClusterDownError,
    ConnectionInterrupted,
    ReadOnlyError,
    RedirectError,
    TryAgainError,
)
from redoxide.topology.base import ReadClient
from redoxide.topology.calls import Call, Execute, Pipeline, Set, SetMany

R = TypeVar("R")

__all__ = [
    "REROUTED_WRITES",
    "ROUTER_RECOVERS",
    "NearReads",
    "answered",
    "by_slot",
    "forgets",
    "placed",
    "tracked_prefixes",
    "unsent",
]

#: What a router recovers from (a slot that moved or is moving, a primary that failed over or
#: was demoted): a fill on the owner it named that meets one reads through the router instead.
ROUTER_RECOVERS = (
    RedirectError,
    TryAgainError,
    ClusterDownError,
    ReadOnlyError,
    ConnectionInterrupted,
)

#: The refusals of a write sent through the tracking connection of the node that owned its key
#: (the slot moved or is moving, the node was demoted): nothing was applied, and the write goes
#: through the router instead. (Not a lost connection: the write may have landed.)
REROUTED_WRITES = (RedirectError, TryAgainError, ClusterDownError, ReadOnlyError)


def forgets(call: Call[Any]) -> tuple[int, Any]:
    """What a write call names for the stores to drop, as `NearCache.write_around` takes it:
    0 and a command's arguments, 1 and a pipeline's commands, 2 and keys."""
    first = call.args[0]  # the command, the commands, the key, the keys
    if isinstance(call, Execute):
        return 0, first
    if isinstance(call, Pipeline):
        return 1, first
    if isinstance(call, Set):
        return 2, (first,)
    if isinstance(call, SetMany):
        return 2, first
    raise TypeError(f"redoxide: {type(call).__name__} is not a write")


def answered(error: CacheError, found: list[Any]) -> None:
    """Give `error` what did answer (hits, filled keys; None for the others) for every key
    asked: a fail-open get_many returns those."""
    error.partial_values = [v if type(v) is bytes else None for v in found]


def placed(at: list[int], outcome: Any, found: list[Any]) -> list[int]:
    """Put one primary's fill outcome into `found` at positions `at`; the positions to read
    through the router instead (the part, or a key, met what a router recovers from).
    Anything else raises."""
    if isinstance(outcome, ROUTER_RECOVERS):
        return at
    if isinstance(outcome, BaseException):
        raise outcome
    again: list[int] = []
    for i, value in zip(at, outcome, strict=True):
        if isinstance(value, ROUTER_RECOVERS):
            again.append(i)
        elif isinstance(value, BaseException):
            raise value
        else:
            found[i] = value
    return again


def tracked_prefixes(
    settings: NearCacheConfig, key_prefix: str, version: int, default: bool
) -> tuple[str, ...]:
    """The server key prefixes to keep: PREFIXES after KEY_PREFIX and VERSION (the default key
    function), or as given (a custom KEY_FUNCTION: they then match the server key itself)."""
    if not default:
        return settings.prefixes
    return tuple(f"{key_prefix}:{version}:{p}" for p in settings.prefixes)


def by_slot(table: list[Client], keys: list[Any], values: list[Any]) -> list[Any]:
    """A cluster's set_many by slot (an MSET spans no slots): (the slot's primary by
    `table`, its keys, their values) for each slot, in the order first named."""
    parts: dict[int, tuple[Client, list[Any], list[Any]]] = {}
    for key, value, slot in zip(keys, values, key_slots(keys), strict=True):
        part = parts.get(slot)
        if part is None:
            part = parts[slot] = (table[slot], [], [])
        part[1].append(key)
        part[2].append(value)
    return list(parts.values())


def unsent(
    parts: list[Any], outcomes: list[Any], ttl_ms: int | None
) -> tuple[SetMany | None, BaseException | None]:
    """Of a set_many's parts sent through the tracking connections (`outcomes`: a reply, an
    exception, or NotImplemented for a part not sent): the set_many of the parts to send
    through the router (not sent, or refused by their node: nothing of them applied), and
    the first other error."""
    keys: list[Any] = []
    values: list[Any] = []
    error: BaseException | None = None
    for (_, part_keys, part_values), outcome in zip(parts, outcomes, strict=True):
        if outcome is NotImplemented or isinstance(outcome, REROUTED_WRITES):
            keys += part_keys
            values += part_values
        elif isinstance(outcome, BaseException) and error is None:
            error = outcome
    return (SetMany(keys, values, ttl_ms) if keys else None), error


class NearReads(ReadClient):
    """A near-cached client's read client (``get_client(write=False)`` on replicas): every
    command goes where the inner client's reads go; one that writes still drops the tracked
    keys it names, as on the near-cached client (`near`, whose ``_write`` does it)."""

    def __init__(self, near: Any, reads: ClientLike) -> None:
        super().__init__(near)
        self._near = near
        self._reads = reads

    def _read(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        return call.on(self._reads, bridge)

    def _write(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        return self._near._write(call, bridge, on=self._reads)  # type: ignore[no-any-return]
