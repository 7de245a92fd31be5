"""A cluster's slot map: which node serves each hash slot, learnt from CLUSTER SLOTS.

Learnt on first use and again after a MOVED reply, a connection failure, or a timeout (at
most every MIN_REFRESH_INTERVAL, one discovery at a time). Targets name where a part of a
call goes: a slot (an int), a replica of a slot, or the k-th primary (for FLUSHDB and the
like, which a failover hands to the promoted replica in the same place).
"""

from __future__ import annotations

import enum
import itertools
import time
from collections.abc import Awaitable
from typing import Any, overload
from urllib.parse import urlsplit

from redoxide._redoxide import Bridge, Client
from redoxide._sections import Config
from redoxide.exceptions import (
    CacheError,
    ClusterDownError,
    ConnectionInterrupted,
    MovedError,
    ReadOnlyError,
    RedirectError,
    ResponseError,
    TryAgainError,
)
from redoxide.plans import Plan
from redoxide.topology.flight import Flight, always
from redoxide.topology.health import ReplicaHealth
from redoxide.topology.nodes import discovery_budget, node_client, split_address
from redoxide.topology.sentinel import MIN_REFRESH_INTERVAL

__all__ = ["SCAN_TABLE_AGE", "PrimaryAt", "Redirect", "ReplicaOf", "SlotMap", "Target"]


class Redirect(enum.Enum):
    """What an error reply on a single-slot command tells a cluster router to do."""

    #: The slot lives elsewhere now: send it there (the slot table is updated at once).
    MOVED = "moved"
    #: The slot is migrating and this key is on the target already: ASKING, then the command.
    ASK = "ask"
    #: The cluster is mid-change (TRYAGAIN, CLUSTERDOWN, a demoted primary): again after a
    #: pause and a fresh table.
    AGAIN = "again"
    #: Nothing to follow: the reply is the answer (raise it).
    FINAL = "final"


#: A key scan (keys, iter_keys, delete_pattern, clear) re-reads an older slot table first.
SCAN_TABLE_AGE = 1.0
#: With READ_FROM_REPLICAS, a table in which a slot has no replica is re-learnt this often.
REPLICA_RELEARN_AGE = 5.0
# Replies after which a command is sent again (after a pause and a fresh slot table): the
# cluster is mid-change, or the node was a primary that has just been demoted.
_AGAIN = (TryAgainError, ClusterDownError, ReadOnlyError)


class ReplicaOf:
    """Target: a replica of the slot that answers, else the slot's primary."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot


class PrimaryAt:
    """Target: the k-th primary of the current table."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


#: Where one part of a call goes: a slot, None (any node: keyless), or one of the above.
Target = int | None | ReplicaOf | PrimaryAt


class SlotMap:
    """The slot table of one cluster, and the node clients it names."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._seeds: list[tuple[str, int]] = []
        for url in config.servers.urls:
            parts = urlsplit(url)
            self._seeds.append((parts.hostname or "127.0.0.1", parts.port or 6379))
        self.table: list[Client] | None = None
        self.replica_table: list[list[Client]] = []
        self.primaries: list[Client] = []
        #: Something cast doubt on the table: re-learn it before the next call.
        self.suspect = False
        self.health = ReplicaHealth()
        self._learnt_at = -1.0
        self._failed_at: dict[tuple[str, int], float] = {}  # nodes that failed lately
        self._last_error = "not asked yet"
        self._flight = Flight()
        self._turn = itertools.count()

    # -- learning the table

    def _discover(self) -> Plan[Any]:
        config = self._config
        candidates = [a for a in map(split_address, (c.address for c in self.primaries)) if a]
        candidates += [seed for seed in self._seeds if seed not in candidates]
        # Nodes that failed lately are asked last: a stalled node must not cost every
        # discovery its timeout.
        candidates.sort(key=lambda c: self._failed_at.get(c, 0.0))
        errors = []
        deadline = time.monotonic() + discovery_budget(config)
        for host, port in candidates:
            if time.monotonic() > deadline:
                errors.append("out of time")
                break
            try:
                reply = yield node_client(config, host, port).execute, (("CLUSTER", "SLOTS"),)
            except CacheError as exc:
                self._failed_at[(host, port)] = time.monotonic()
                errors.append(f"{host}:{port}: {type(exc).__name__}")
                continue
            self._failed_at.pop((host, port), None)
            if reply:
                self._adopt(reply, host)
                return self.table
            errors.append(f"{host}:{port}: no slots assigned")
        self._learnt_at = time.monotonic()
        self._last_error = f"no cluster node could describe the cluster ({'; '.join(errors)})"
        raise ConnectionInterrupted(self._last_error)

    def _adopt(self, reply: list[Any], asked_host: str) -> None:
        config = self._config
        table: list[Any] = [None] * 16384
        replica_table: list[list[Client]] = []
        if config.servers.read_from_replicas:
            replica_table = [[] for _ in range(16384)]
        primaries: dict[int, Client] = {}

        def node(entry: list[Any], readonly: bool) -> Client:
            host = entry[0].decode() if isinstance(entry[0], bytes) else str(entry[0])
            if host in ("", "?"):
                host = asked_host
            return node_client(config, host, int(entry[1]), readonly=readonly)

        for item in reply:
            start, end, primary_entry = int(item[0]), int(item[1]), item[2]
            primary = node(primary_entry, False)
            primaries[id(primary)] = primary
            table[start : end + 1] = [primary] * (end - start + 1)
            if config.servers.read_from_replicas:
                replicas = [node(entry, True) for entry in item[3:]]
                for slot in range(start, end + 1):
                    replica_table[slot] = replicas
        # A slot no node serves (a cluster missing a shard) goes to any node: its MOVED or
        # CLUSTERDOWN reply then says what is wrong.
        fallback = next(iter(primaries.values()))
        # The table last: readers check it alone before they use the other two.
        self.replica_table = replica_table
        self.primaries = list(primaries.values())
        self.table = [n if n is not None else fallback for n in table]
        self._learnt_at = time.monotonic()
        self.suspect = False

    def _fresh(self) -> bool:
        return time.monotonic() - self._learnt_at < MIN_REFRESH_INTERVAL

    def _needs_table(self) -> bool:
        return self.table is None or (self.suspect and not self._fresh())

    def _not_fresh(self) -> bool:
        return self.table is None or not self._fresh()

    def _scan_stale(self) -> bool:
        # A key scan is long anyway: look at the cluster again unless the table is recent.
        return self.table is None or time.monotonic() - self._learnt_at > SCAN_TABLE_AGE

    def known_table(self) -> list[Client]:
        """The table, or the reason there is none."""
        table = self.table
        if table is None:
            raise ConnectionInterrupted(self._last_error)
        return table

    def fresh_enough(self) -> bool:
        """Re-learnt within MIN_REFRESH_INTERVAL."""
        return self._fresh()

    # -- steps (blocking without a bridge, awaitable with one)

    @overload
    def table_now(self, bridge: None = None) -> list[Client]: ...
    @overload
    def table_now(self, bridge: Bridge) -> Awaitable[list[Client]]: ...
    def table_now(self, bridge: Bridge | None = None) -> list[Client] | Awaitable[list[Client]]:
        """The table, learnt first if there is none or it is in doubt."""
        return self._flight.then(self._discover, self._needs_table, self.known_table, bridge)

    def relearn(self, bridge: Bridge | None = None) -> Awaitable[None] | None:
        """Learn the table again, unless it was just learnt."""
        return self._flight.then(self._discover, self._not_fresh, _nothing, bridge, always)

    @overload
    def scan_nodes(self, bridge: None = None) -> list[Client]: ...
    @overload
    def scan_nodes(self, bridge: Bridge) -> Awaitable[list[Client]]: ...
    def scan_nodes(self, bridge: Bridge | None = None) -> list[Client] | Awaitable[list[Client]]:
        """Every primary (for SCAN and the like), with a recent slot table."""
        return self._flight.then(
            self._discover, self._scan_stale, self._every_primary, bridge, self._scan_due
        )

    def _scan_due(self) -> bool:
        return self._scan_stale() or self.suspect

    def _every_primary(self) -> list[Client]:
        self.known_table()
        return list(self.primaries)

    # -- nodes

    def failed(self, node: Client) -> None:
        """A node timed out or dropped a call: re-learn the table, asking that node last."""
        self.suspect = True
        address = split_address(node.address)
        if address is not None:
            self._failed_at[address] = time.monotonic()

    def replica_for(self, slot: int) -> Client | None:
        """A replica of the slot to read from, or None."""
        if not self._config.servers.read_from_replicas or self.table is None or self.suspect:
            return None
        replicas = self.replica_table[slot]
        if not replicas:
            if time.monotonic() - self._learnt_at > REPLICA_RELEARN_AGE:
                self.suspect = True  # replicas may have joined since: look again
            return None
        replica = replicas[next(self._turn) % len(replicas)]
        return replica if self.health.usable(replica) else None

    def node_for(self, target: Target) -> Client:
        """The node a target names now."""
        if target is None:
            return self.primaries[0]
        if isinstance(target, int):
            return self.known_table()[target]
        if isinstance(target, ReplicaOf):
            return self.replica_for(target.slot) or self.known_table()[target.slot]
        return self.primaries[target.index % len(self.primaries)]

    def redirect(self, exc: ResponseError, node: Client) -> tuple[Redirect, Client | None]:
        """Classify an error reply: (MOVED or ASK, the target node), (AGAIN, None) or
        (FINAL, None)."""
        if isinstance(exc, RedirectError):
            found = split_address(exc.address)
            if found is None:
                return Redirect.FINAL, None
            host, port = found
            if host in ("", "?"):  # the node does not know its own host name: the asked one
                asked = split_address(node.address)
                host = asked[0] if asked else ""
            target = node_client(self._config, host, port)
            if not isinstance(exc, MovedError):
                return Redirect.ASK, target
            # The slot moved: use the new owner now, re-learn the whole table soon.
            if self.table is not None and 0 <= exc.slot < len(self.table):
                self.table[exc.slot] = target
            self.suspect = True
            return Redirect.MOVED, target
        if isinstance(exc, _AGAIN):
            self.suspect = True
            return Redirect.AGAIN, None
        return Redirect.FINAL, None


def _nothing() -> None:
    """What `relearn` answers once the table is learnt."""
