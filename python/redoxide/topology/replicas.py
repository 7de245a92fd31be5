"""A primary with read replicas (a LOCATION list): writes to the primary, reads spread over
the replicas that answer."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from redoxide import plans
from redoxide._protocols import ClientLike
from redoxide._protocols import homes as homes_of
from redoxide._protocols import owner as owner_of
from redoxide._protocols import primaries as primaries_of
from redoxide._redoxide import Bridge, Client
from redoxide.topology.base import Router
from redoxide.topology.calls import Call
from redoxide.topology.health import ReplicaHealth

__all__ = ["ReplicaRouter"]

R = TypeVar("R")


class ReplicaRouter(Router):
    """Writes to `primary`; get / get_many rotate over the replicas that answer.

    `primary` is any ClientLike: a node's Rust client, or a Sentinel-followed primary.
    """

    def __init__(
        self, primary: ClientLike, replicas: Sequence[ClientLike], read_from_replicas: bool
    ) -> None:
        self.primary = primary
        self.replicas: Sequence[ClientLike] = list(replicas)
        self.read_from_replicas = read_from_replicas
        self.health = ReplicaHealth()
        self._turn = itertools.count()

    def __repr__(self) -> str:
        return f"<redoxide {type(self).__name__}>"

    def primaries(self) -> tuple[Client, ...] | None:
        return primaries_of(self.primary)

    def owner(self, key: str) -> Client | None:
        return owner_of(self.primary, key)

    def homes(self) -> Client | list[Client] | None:
        return homes_of(self.primary)

    @property
    def reads_home(self) -> bool:
        return not self.read_from_replicas

    def reader(self) -> ClientLike | None:
        """The next replica to read from, or None (no replicas, or none answering)."""
        replicas = self.replicas
        if not self.read_from_replicas or not replicas:
            return None
        start = next(self._turn)
        for i in range(len(replicas)):
            replica = replicas[(start + i) % len(replicas)]
            if self.health.usable(replica):
                return replica
        return None

    def _read(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        replica = self.reader()
        if replica is None:
            return call.on(self.primary, bridge)
        plan = self.health.read(replica, call, call.step(self.primary))
        return plans.drive(plan, bridge)

    def _write(self, call: Call[R], bridge: Bridge | None) -> R | Awaitable[R]:
        return call.on(self.primary, bridge)
