"""Redis / Valkey Cluster: keys routed by hash slot to the node serving it.

Single-slot calls go straight to the slot's node; only a failure takes the recovery plan
(MOVED / ASK followed, TRYAGAIN and the like retried after a pause, a lost connection retried
if the slot found a new home). Multi-key calls are cut into single-slot parts (parts.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar, overload

from redoxide import plans
from redoxide._protocols import ClientLike, Topology
from redoxide._redoxide import Bridge, Client
from redoxide._sections import Config
from redoxide.exceptions import CacheError, CacheTimeout, ConnectionInterrupted, ResponseError
from redoxide.plans import Plan
from redoxide.topology.calls import Call, Execute, Get, MGet, Set
from redoxide.topology.commands import (
    EVERY_PRIMARY,
    SUMMED,
    combine_for,
    command_name,
    key_arg,
    key_slot,
    key_slots,
    slot_of,
)
from redoxide.topology.parts import (
    MAX_REDIRECTS,
    RETRY_PAUSE,
    Group,
    Split,
    by_node,
    run_parts,
    send,
)
from redoxide.topology.slots import PrimaryAt, Redirect, ReplicaOf, SlotMap, Target

__all__ = ["ClusterRouter"]

R = TypeVar("R")
T = TypeVar("T")


class ClusterRouter(Topology):
    """A ClientLike over every node of a cluster."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self.slots = SlotMap(config)

    def __repr__(self) -> str:
        return f"<redoxide ClusterRouter {len(self.slots.primaries)} primaries>"

    @overload
    def scan_nodes(self, bridge: None = None) -> list[Client]: ...
    @overload
    def scan_nodes(self, bridge: Bridge) -> Awaitable[list[Client]]: ...
    def scan_nodes(self, bridge: Bridge | None = None) -> list[Client] | Awaitable[list[Client]]:
        """Every primary (for SCAN and the like), with a recent slot table."""
        return self.slots.scan_nodes(bridge)

    @property
    def spans_primaries(self) -> bool:
        return True

    def replica_reads(self) -> ClientLike:
        # Raw commands are routed by their keys' slots; a read client adds nothing here.
        return self

    def primaries(self) -> tuple[Client, ...] | None:
        return tuple(self.slots.primaries) or None

    def owner(self, key: str) -> Client | None:
        slots = self.slots
        table = slots.table
        return None if table is None or slots.suspect else table[key_slot(key)]

    def homes(self) -> list[Client] | None:
        slots = self.slots
        return None if slots.suspect else slots.table

    @property
    def reads_home(self) -> bool:
        return not self._config.servers.read_from_replicas

    # -- one single-slot call

    def _route(self, slot: int | None, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        """Run one single-slot call on the slot's primary; a failure goes to `_recovery`."""
        slots = self.slots
        table = slots.table
        if table is None or slots.suspect:
            return plans.drive(self._located(slot, call), bridge)
        node = table[slot] if slot is not None else slots.primaries[0]
        return call.on_else(node, self._recovery, (slot, node, call), bridge)

    def _located(self, slot: int | None, call: Call[R]) -> Plan[R]:
        """`_route` with no table to trust: the table learnt (or confirmed) first."""
        table = yield self.slots.table_now, ()
        node = table[slot] if slot is not None else self.slots.primaries[0]
        try:
            return (yield from call.plan_on(node))
        except CacheError as exc:
            return (yield from self._recovery(exc, slot, node, call))

    def _recovery(self, exc: CacheError, slot: int | None, node: Client, call: Call[R]) -> Plan[R]:
        """After a single-slot call failed on `node`: follow MOVED / ASK, retry TRYAGAIN and
        the like after a pause, retry a lost connection only if the slot found a new home;
        raise a timeout or any other error."""
        slots = self.slots
        reply: R
        for attempt in range(1, MAX_REDIRECTS + 2):
            if isinstance(exc, CacheTimeout):
                slots.failed(node)
                raise exc
            if isinstance(exc, ResponseError):
                kind, target = slots.redirect(exc, node)
                if kind is Redirect.FINAL or attempt > MAX_REDIRECTS:
                    raise exc
            elif isinstance(exc, ConnectionInterrupted):
                # The node is gone: learn the table again; retry if the slot has a new home.
                slots.failed(node)
                yield slots.relearn, ()
                target = slots.node_for(slot)
                if target is node or attempt > MAX_REDIRECTS:
                    raise exc
                kind = Redirect.MOVED
            else:
                raise exc
            if kind is Redirect.ASK and target is not None:
                asking = (("ASKING",), call.command())
                reply = (yield target.pipeline, (asking,))[1]
                return reply
            if target is None:  # AGAIN: the slot's owner after a pause and a fresh table
                yield plans.pause, (RETRY_PAUSE,)
                yield slots.relearn, ()
                target = slots.node_for(slot)
            node = target
            try:
                reply = yield call.step(node)
                return reply
            except CacheError as failed:
                exc = failed
        raise AssertionError("unreachable")

    def _read(self, slot: int, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        """A read from a replica of the slot, if there is one to ask, else from its primary."""
        replica = self.slots.replica_for(slot)
        if replica is None:
            return self._route(slot, call, bridge)
        plan = self.slots.health.read(replica, call, (self._route, (slot, call)))
        return plans.drive(plan, bridge)

    # -- the ClientLike interface

    @overload
    def get(self, key: str, bridge: None = None) -> bytes | None: ...
    @overload
    def get(self, key: str, bridge: Bridge) -> Awaitable[bytes | None]: ...
    def get(self, key: str, bridge: Bridge | None = None) -> bytes | Awaitable[bytes | None] | None:
        slot = key_slot(key)
        if self._config.servers.read_from_replicas:
            return self._read(slot, Get(key), bridge)
        return self._route(slot, Get(key), bridge)

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
        return self._route(key_slot(key), Set(key, value, ttl_ms, nx, xx), bridge)

    @overload
    def mget(self, keys: Iterable[Any], bridge: None = None) -> list[bytes | None]: ...
    @overload
    def mget(self, keys: Iterable[Any], bridge: Bridge) -> Awaitable[list[bytes | None]]: ...
    def mget(
        self, keys: Iterable[Any], bridge: Bridge | None = None
    ) -> list[bytes | None] | Awaitable[list[bytes | None]]:
        keys = [key_arg(k) for k in keys]
        slots = key_slots(keys)
        if len(set(slots)) <= 1:
            slot = slots[0] if slots else None
            if self._config.servers.read_from_replicas and slot is not None:
                return self._read(slot, MGet(keys), bridge)
            return self._route(slot, MGet(keys), bridge)
        # One MGET per slot (MGET semantics: nil for a key of another type).
        by_slot: dict[int, list[int]] = {}
        for i, slot in enumerate(slots):
            by_slot.setdefault(slot, []).append(i)
        parts = [("MGET", *[keys[i] for i in positions]) for positions in by_slot.values()]
        table = self.slots.table
        count = len(keys)
        if table is None or self.slots.suspect or self._config.servers.read_from_replicas:
            targets: list[Target] = list(by_slot)
            if self._config.servers.read_from_replicas:
                targets = [ReplicaOf(slot) for slot in by_slot]
            return plans.drive(self._mget_parts(parts, targets, count, by_slot), bridge)
        return plans.drive(self._mget_fast(table, count, by_slot, parts), bridge)

    def _mget_parts(
        self, parts: list[Any], targets: list[Target], count: int, by_slot: dict[int, list[int]]
    ) -> Plan[list[Any]]:
        """The general get_many path: each slot's MGET as a part, followed through redirects
        and failovers; an error carries the values of the parts that ran."""
        try:
            replies = yield from run_parts(self.slots, parts, targets)
        except CacheError as exc:
            _partial_mget(exc, count, by_slot)
            raise
        return _join_mget(count, by_slot, replies)

    def _mget_fast(
        self, table: list[Client], count: int, by_slot: dict[int, list[int]], parts: list[Any]
    ) -> Plan[list[Any]]:
        """get_many on a settled cluster: one fan-out (every node's request sent before the
        first wait), then the general path if `_gathered` finds anything off."""
        groups = by_node(table, list(by_slot), parts)
        outcomes = yield send, ([(node, commands) for node, _, commands in groups.values()],)
        values = self._gathered(groups, outcomes, count, by_slot)
        if values is not None:
            return values
        return (yield from self._mget_parts(parts, list(by_slot), count, by_slot))

    def _gathered(
        self,
        groups: dict[int, Group],
        outcomes: list[Any],
        count: int,
        by_slot: dict[int, list[int]],
    ) -> list[Any] | None:
        """The one contract of both fast paths: every key's value in order, from each node's
        outcome (its replies, or the error it raised); None if anything was off (a redirect,
        an error), and the caller takes the general path, which is safe to repeat for reads;
        a timeout raises at once (the time is spent), carrying the other nodes' values."""
        values: list[Any] = [None] * count
        clean = True
        timed_out: CacheTimeout | None = None
        for (node, slots, _), outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, CacheTimeout):
                self.slots.failed(node)
                timed_out = timed_out or outcome
                continue
            if not isinstance(outcome, list):
                clean = False
                continue
            for slot, reply in zip(slots, outcome, strict=True):
                if not isinstance(reply, list):
                    clean = False
                    continue
                for i, value in zip(by_slot[slot], reply, strict=True):
                    values[i] = value
        if timed_out is not None:
            raise with_values(timed_out, values)
        return values if clean else None

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Bridge | None = None
    ) -> Any:
        commands: list[tuple[Any, ...]] = []
        if ttl_ms is None:
            for key, value in zip(keys, values, strict=True):
                commands.append(("SET", key, value))
            return self.pipeline(commands, bridge)
        ms = max(1, ttl_ms)
        # One MSETEX per slot (a command's keys must share one) where the slot's primary
        # offers it, as its connections told; else one SET each. All in one pipeline.
        by_slot: dict[int, list[Any]] = {}
        for key, value in zip(keys, values, strict=True):
            by_slot.setdefault(key_slot(key_arg(key)), []).extend((key, value))
        table = self.slots.table if not self.slots.suspect else None
        offered: dict[Client, bool] = {}
        for slot, pairs in by_slot.items():
            node = None if table is None else table[slot]
            if node is not None and node not in offered:
                offers = node.offers
                offered[node] = offers is not None and "MSETEX" in offers["offers"]
            if len(pairs) > 2 and node is not None and offered[node]:
                commands.append(("MSETEX", len(pairs) // 2, *pairs, "PX", ms))
            else:
                commands.extend(
                    ("SET", k, v, "PX", ms) for k, v in zip(pairs[::2], pairs[1::2], strict=True)
                )
        return self.pipeline(commands, bridge)

    def execute(self, args: Sequence[Any], bridge: Bridge | None = None) -> Any:
        name = command_name(args)
        if (name in SUMMED and len(args) > 2) or name in EVERY_PRIMARY:
            if bridge is None:
                return self.pipeline([args])[0]
            return plans.then(self.pipeline([args], bridge), _first)
        if name == "MGET" and len(args) > 1:
            return self.mget(args[1:], bridge)
        return self._route(slot_of(args), Execute(args), bridge)

    def _pipeline_plan(
        self, commands: list[Sequence[Any]], primaries: list[Any]
    ) -> tuple[Plan[list[Any]], Callable[[list[Any]], list[Any]]]:
        """Cut a pipeline into single-slot parts; return the plan and how to rejoin."""
        parts: list[tuple[Any, ...]] = []
        targets: list[Target] = []
        splits: list[Split | None] = []
        for command in commands:
            name = command_name(command)
            if name in SUMMED and len(command) > 2:
                keys = command[1:]
                for key in keys:
                    targets.append(key_slot(key_arg(key)))
                    parts.append((command[0], key))
                splits.append(Split(len(keys), combine_for(name)))
            elif name in EVERY_PRIMARY:
                for k in range(len(primaries)):
                    targets.append(PrimaryAt(k))
                    parts.append(tuple(command))
                splits.append(Split(len(primaries), combine_for(name)))
            else:
                targets.append(slot_of(command))
                parts.append(tuple(command))
                splits.append(None)

        def rejoin(replies: list[Any]) -> list[Any]:
            # As on one server, an error reply raises (the first one).
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
            out, at = [], 0
            for split in splits:
                if split is None:
                    out.append(replies[at])
                    at += 1
                else:
                    out.append(split.combine(replies[at : at + split.count]))
                    at += split.count
            return out

        return run_parts(self.slots, parts, targets), rejoin

    @overload
    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline(
        self, commands: Iterable[Sequence[Any]], bridge: Bridge
    ) -> Awaitable[list[Any]]: ...
    def pipeline(
        self, commands: Iterable[Sequence[Any]], bridge: Bridge | None = None
    ) -> list[Any] | Awaitable[list[Any]]:
        commands = list(commands)
        if not commands:
            return [] if bridge is None else plans.done([])
        return plans.drive(self._pipeline_whole(commands), bridge)

    def _pipeline_whole(self, commands: list[Sequence[Any]]) -> Plan[list[Any]]:
        primaries: list[Any] = []
        if any(command_name(c) in EVERY_PRIMARY for c in commands):
            fresh = self.slots.table is not None and self.slots.fresh_enough()
            primaries = self.slots.primaries if fresh else (yield self.slots.scan_nodes, ())
        plan, rejoin = self._pipeline_plan(commands, primaries)
        return rejoin((yield from plan))


def _first(replies: list[T]) -> T:
    return replies[0]


def with_values(error: BaseException, values: list[Any]) -> BaseException:
    """`error`, carrying the values of the keys whose nodes did answer (None for the others):
    a fail-open get_many returns those instead of nothing."""
    if isinstance(error, CacheError):
        error.partial_values = values
    return error


def _partial_mget(error: BaseException, count: int, by_slot: dict[int, list[int]]) -> None:
    """Give `error` from run_parts get_many's values, from the replies of the parts that ran."""
    replies = error.partial_replies if isinstance(error, CacheError) else None
    if replies is not None:
        values: list[Any] = [None] * count
        for positions, reply in zip(by_slot.values(), replies, strict=True):
            if isinstance(reply, list):
                for i, value in zip(positions, reply, strict=True):
                    values[i] = value
        with_values(error, values)


def _join_mget(count: int, by_slot: dict[int, list[int]], replies: list[Any]) -> list[Any]:
    values: list[Any] = [None] * count
    for positions, reply in zip(by_slot.values(), replies, strict=True):
        if isinstance(reply, ResponseError):
            raise reply
        for i, value in zip(positions, reply, strict=True):
            values[i] = value
    return values
