"""A Redis Cluster (OPTIONS CLUSTER: True): LOCATION lists seed nodes; database 0 only."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from redoxide._location import place
from redoxide._option_parts import fail, flag
from redoxide._protocols import ClientLike
from redoxide._sections import Config
from redoxide.exceptions import CacheError
from redoxide.topology.cluster import ClusterRouter
from redoxide.topology.kinds.base import Kind
from redoxide.topology.nodes import node_client, split_address
from redoxide.topology.seen import Survey, node

__all__ = ["Cluster"]


class Cluster(Kind):
    name = "cluster"

    def claims(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> bool:
        return bool(flag(opts, names, "cluster"))

    def parse(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
        if "sentinels" in opts:
            raise fail(names["cluster"], "cannot be combined with SENTINELS")
        path_dbs = [urlsplit(url).path.strip("/") for url in kwargs["urls"]]
        if kwargs.get("db") or any(db not in ("", "0") for db in path_dbs):
            raise fail(names["cluster"], "a cluster has only database 0 (remove DB / ?db=)")
        kwargs["read_from_replicas"] = bool(flag(opts, names, "read_from_replicas"))

    def build(self, config: Config) -> ClientLike:
        return ClusterRouter(config)

    def survey(self, config: Config, client: Any, found: Survey) -> None:
        try:
            client.slots.table_now()
            asked, reply = _first_answer(client.slots.primaries, ("CLUSTER", "NODES"))
        except CacheError as exc:
            found.problems.append(str(exc))
            for url in config.servers.urls:
                parts = urlsplit(url)
                seed = node_client(config, parts.hostname or "127.0.0.1", parts.port or 6379)
                found.nodes.append(node("seed", seed))
            return
        for line in reply.decode().splitlines():
            fields = line.split()
            if len(fields) < 3 or "noaddr" in fields[2].split(","):
                continue
            address = split_address(fields[1].split("@")[0])
            if address is None:
                continue
            host, port = address
            if not host:  # a node that does not know its own address: the one asked
                host = asked.address.rpartition(":")[0].strip("[]")
            replica = "master" not in fields[2].split(",")
            client_of = node_client(config, host, port, readonly=replica)
            found.nodes.append(node("replica" if replica else "primary", client_of))

    def databases(self, config: Config) -> set[tuple[Any, ...]]:
        # One database; any seed names the same cluster.
        places = {place(url, config.servers.db) for url in config.servers.urls}
        return {("cluster", *where[:2]) for where in places}

    def flushed(self, config: Config) -> str:
        return "every primary of the cluster"


def _first_answer(nodes: list[Any], command: tuple[str, ...]) -> tuple[Any, Any]:
    """The first node that answers, and its reply."""
    failure: CacheError | None = None
    for each in nodes:
        try:
            return each, each.execute(command)
        except CacheError as exc:
            failure = exc
    raise failure or CacheError("no node to ask")
