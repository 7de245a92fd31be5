"""A primary with read replicas (a LOCATION list): writes to the primary, reads spread over
the replicas that answer."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from redoxide import plans
from redoxide._protocols import ClientLike
from redoxide.topology.health import ReplicaHealth

__all__ = ["ReplicaRouter", "call"]


def call(client: Any, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
    """``client.name(*args)``, with the bridge appended when there is one."""
    method = getattr(client, name)
    return method(*args) if bridge is None else method(*args, bridge)


class ReplicaRouter:
    """Writes to `primary`; get / get_many rotate over the replicas that answer.

    `primary` is any ClientLike: a node's Rust client, or a Sentinel-followed primary.
    """

    def __init__(
        self, primary: ClientLike, replicas: Sequence[ClientLike], read_from_replicas: bool
    ) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.read_from_replicas = read_from_replicas
        self.health = ReplicaHealth()
        self._turn = itertools.count()

    def __repr__(self) -> str:
        return f"<redoxide {type(self).__name__}>"

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

    def _read(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        replica = self.reader()
        if replica is None:
            return call(self.primary, name, args, bridge)
        plan = self.health.read(replica, name, args, (getattr(self.primary, name), args))
        return plans.run(plan) if bridge is None else plans.arun(plan, bridge)

    # -- the ClientLike interface

    def get(self, key: str, bridge: Any = None) -> Any:
        return self._read("get", (key,), bridge)

    def mget(self, keys: Iterable[Any], bridge: Any = None) -> Any:
        return self._read("mget", (list(keys),), bridge)

    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Any = None,
    ) -> Any:
        return call(self.primary, "set", (key, value, ttl_ms, nx, xx), bridge)

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Any = None
    ) -> Any:
        return call(self.primary, "set_many", (list(keys), list(values), ttl_ms), bridge)

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        return call(self.primary, "execute", (args,), bridge)

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        return call(self.primary, "pipeline", (list(commands),), bridge)
