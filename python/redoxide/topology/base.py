"""The ClientLike methods of a router, written once over a read path and a write path."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["ReplicaReads", "Router"]


class Router:
    """get / get_many go through `_read`, everything else through `_write`; a subclass says
    where each goes (a replica, the followed primary...). Both take the Rust client method's
    name, its arguments, and the bridge (None: blocking; else the call returns an awaitable).
    """

    def _read(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        return self._write(name, args, bridge)

    def _write(self, name: str, args: tuple[Any, ...], bridge: Any) -> Any:
        raise NotImplementedError

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
        return self._write("set", (key, value, ttl_ms, nx, xx), bridge)

    def set_many(
        self, keys: Any, values: Any, ttl_ms: int | None = None, bridge: Any = None
    ) -> Any:
        return self._write("set_many", (list(keys), list(values), ttl_ms), bridge)

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        return self._write("execute", (args,), bridge)

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        return self._write("pipeline", (list(commands),), bridge)

    def replica_reads(self) -> ReplicaReads:
        """Raw commands sent where this router's reads go (a replica, when it reads from
        replicas): what ``get_client(write=False)`` runs on."""
        return ReplicaReads(self)


class ReplicaReads:
    """A router's raw commands (execute / pipeline) routed as its get / get_many are: to a
    replica that answers, or the primary when there is none. A write sent this way is the
    replica's to refuse (READONLY), as on django-redis' read client."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def __repr__(self) -> str:
        return f"<redoxide reads of {self._router!r}>"

    def execute(self, args: Sequence[Any], bridge: Any = None) -> Any:
        return self._router._read("execute", (args,), bridge)

    def pipeline(self, commands: Iterable[Sequence[Any]], bridge: Any = None) -> Any:
        return self._router._read("pipeline", (list(commands),), bridge)
