"""The near cache's pure parts (redoxide.near uses them): which keys a write drops and how to
find them, a get_many's fill outcomes put in place, what a router recovers from, and the
server key prefixes a configuration keeps."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redoxide._near_options import NearCacheConfig
from redoxide._protocols import ClientLike, owner, spans_primaries
from redoxide._redoxide import Bridge, Client, NearCache, key_slot
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
    "Forget",
    "NearReads",
    "Part",
    "answered",
    "forgets",
    "home",
    "placed",
    "tracked_prefixes",
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

#: How a store finds the tracked keys a write names: in a command's arguments, in a
#: pipeline's commands, or in a list of keys.
Forget = Callable[[NearCache, Any, bool], bool]


def forgets(call: Call[Any]) -> tuple[Forget, Any]:
    """What a write call drops from the stores: how to find its keys, and where."""
    first = call.args[0]  # the command, the commands, the key, the keys
    if isinstance(call, Execute):
        return NearCache.forget, first
    if isinstance(call, Pipeline):
        return NearCache.forget_all, first
    if isinstance(call, Set):
        return NearCache.forget_keys, (first,)
    if isinstance(call, SetMany):
        return NearCache.forget_keys, first
    raise TypeError(f"redoxide: {type(call).__name__} is not a write")


#: A primary's share of a get_many's fills: positions, keys, fill tokens.
Part = tuple[list[int], list[Any], list[Any]]


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


def home(client: ClientLike, keys: list[Any]) -> Client | None:
    """The one primary that owns every key of a set_many (on a cluster, keys of one slot: an
    MSET spans no slots), where it can go through the tracking connection; None if none."""
    if not keys or (spans_primaries(client) and len({key_slot(k) for k in keys}) > 1):
        return None
    return owner(client, keys[0])


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
