"""The ClientLike methods of a router, written once over a read path and a write path."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Router"]


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
