"""One server: LOCATION names it; the Rust client itself is the cache's client."""

from __future__ import annotations

from typing import Any

from redoxide._option_parts import fail, flag
from redoxide._protocols import ClientLike
from redoxide._sections import Config
from redoxide.topology.kinds.base import Kind, refuse_sentinel_kwargs
from redoxide.topology.nodes import new_client
from redoxide.topology.seen import Survey, node

__all__ = ["Standalone"]


class Standalone(Kind):
    name = "standalone"

    def claims(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> bool:
        return True  # whatever no other kind claimed

    def parse(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
        refuse_sentinel_kwargs(opts, names)
        if flag(opts, names, "read_from_replicas"):
            raise fail(
                names["read_from_replicas"],
                "needs replicas: a LOCATION list, SENTINELS or CLUSTER",
            )

    def build(self, config: Config) -> ClientLike:
        return new_client(config, config.servers.urls[0], db=config.servers.db)

    def survey(self, config: Config, client: Any, found: Survey) -> None:
        found.nodes.append(node("primary", client))
