"""A primary and its read replicas: LOCATION lists them, the primary first."""

from __future__ import annotations

from typing import Any

from redoxide._option_parts import flag
from redoxide._protocols import ClientLike
from redoxide._sections import Config
from redoxide.topology.kinds.base import Kind, refuse_sentinel_kwargs
from redoxide.topology.nodes import new_client
from redoxide.topology.replicas import ReplicaRouter
from redoxide.topology.seen import Survey, node

__all__ = ["Replicas"]


class Replicas(Kind):
    name = "replicas"

    def claims(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> bool:
        return len(kwargs["urls"]) > 1

    def parse(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
        refuse_sentinel_kwargs(opts, names)
        kwargs["read_from_replicas"] = flag(opts, names, "read_from_replicas") is not False

    def build(self, config: Config) -> ClientLike:
        def plain(url: str) -> ClientLike:
            return new_client(config, url, db=config.servers.db)

        return ReplicaRouter(
            plain(config.servers.urls[0]),
            [plain(url) for url in config.servers.urls[1:]],
            config.servers.read_from_replicas,
        )

    def survey(self, config: Config, client: Any, found: Survey) -> None:
        found.nodes.append(node("primary", client.primary))
        found.nodes.extend(node("replica", replica) for replica in client.replicas)
