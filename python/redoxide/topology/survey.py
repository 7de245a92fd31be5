"""Every node of a cache's topology, and asking each one directly: for the system checks and
the management commands, which need to see each server rather than the router's choice.

A survey lists the nodes the topology has now: the server; the primary and its replicas (a
LOCATION list); the sentinels, then the primary and replicas they name; a cluster's primaries
and replicas, as CLUSTER NODES lists them (a failed node too, so its silence is seen). What
could not be learnt is a problem of the survey, not an exception: the nodes that were
learnt are still worth asking.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from redoxide import _redoxide
from redoxide.exceptions import CacheError
from redoxide.options import Config
from redoxide.topology import shared_client
from redoxide.topology.cluster import ClusterRouter
from redoxide.topology.nodes import node_client, split_address
from redoxide.topology.replicas import ReplicaRouter
from redoxide.topology.sentinel import SentinelRouter

__all__ = ["Node", "Probe", "Survey", "describe", "node_info", "parse_info", "probe", "survey"]


@dataclass(frozen=True)
class Node:
    """One server of a topology: what the topology takes it for, and a client to ask it."""

    #: "primary", "replica", "sentinel", or "seed" (a cluster address nobody described).
    kind: str
    address: str
    client: _redoxide.Client = field(repr=False, compare=False)


@dataclass
class Survey:
    """The nodes of a topology, and what could not be learnt about it."""

    topology: str
    nodes: list[Node] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Probe:
    """What one node answered: PING's round trip, and (when asked) its version and role."""

    node: Node
    ok: bool
    rtt_ms: float | None = None
    error: str | None = None
    #: e.g. "redis 7.0.15" or "valkey 8.1.1".
    version: str | None = None
    #: The server's own view: "master", "slave" or "sentinel".
    role: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The probe as plain data (for --json)."""
        return {
            "address": self.node.address,
            "kind": self.node.kind,
            "ok": self.ok,
            "rtt_ms": None if self.rtt_ms is None else round(self.rtt_ms, 3),
            "version": self.version,
            "role": self.role,
            "error": self.error,
        }


def describe(exc: BaseException) -> str:
    """Name an error by its class and message (messages never hold secrets)."""
    return f"{type(exc).__name__}: {exc}"


def survey(config: Config) -> Survey:
    """List the nodes of a configuration's topology, asking sentinels or the cluster."""
    client = shared_client(config)
    found = Survey(config.servers.topology)
    if isinstance(client, ClusterRouter):
        _cluster(config, client, found)
    elif isinstance(client, SentinelRouter):
        _sentinel(config, client, found)
    elif isinstance(client, ReplicaRouter):
        found.nodes.append(_node("primary", client.primary))
        found.nodes.extend(_node("replica", replica) for replica in client.replicas)
    else:
        found.nodes.append(_node("primary", client))
    return found


def _node(kind: str, client: Any) -> Node:
    return Node(kind, str(client.address), client)


def _sentinel(config: Config, router: SentinelRouter, found: Survey) -> None:
    sentinels = router.primary.sentinels
    found.nodes.extend(_node("sentinel", sentinel) for sentinel in sentinels)
    service, errors = router.primary.service, []
    for sentinel in sentinels:
        try:
            addr = sentinel.execute(("SENTINEL", "get-master-addr-by-name", service))
            replicas = sentinel.execute(("SENTINEL", "replicas", service)) if addr else []
        except CacheError as exc:
            errors.append(f"{sentinel.address}: {type(exc).__name__}")
            continue
        if not addr:
            errors.append(f"{sentinel.address}: does not know {service!r}")
            continue
        primary = node_client(config, addr[0].decode(), int(addr[1]), db=config.servers.db)
        found.nodes.append(_node("primary", primary))
        for entry in replicas:
            fields = dict(zip(entry[::2], entry[1::2], strict=False))
            host, port = fields[b"ip"].decode(), int(fields[b"port"])
            found.nodes.append(
                _node("replica", node_client(config, host, port, db=config.servers.db))
            )
        return
    found.problems.append(f"no sentinel named the primary of {service!r} ({'; '.join(errors)})")


def _cluster(config: Config, router: ClusterRouter, found: Survey) -> None:
    try:
        router.slots.table_now()
        asked, reply = _first_answer(router.slots.primaries, ("CLUSTER", "NODES"))
    except CacheError as exc:
        found.problems.append(str(exc))
        for url in config.servers.urls:
            parts = urlsplit(url)
            seed = node_client(config, parts.hostname or "127.0.0.1", parts.port or 6379)
            found.nodes.append(_node("seed", seed))
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
        client = node_client(config, host, port, readonly=replica)
        found.nodes.append(_node("replica" if replica else "primary", client))


def _first_answer(nodes: list[Any], command: tuple[str, ...]) -> tuple[Any, Any]:
    """The first node that answers, and its reply."""
    failure: CacheError | None = None
    for node in nodes:
        try:
            return node, node.execute(command)
        except CacheError as exc:
            failure = exc
    raise failure or CacheError("no node to ask")


def parse_info(text: bytes | str) -> dict[str, Any]:
    """Parse an INFO reply into a dict; numbers become ints or floats, a keyspace line
    (``db0:keys=3,expires=0``) a dict of its own."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    fields: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        name, _, value = line.partition(":")
        parts = value.split(",")
        if "=" in value and all("=" in part for part in parts):
            fields[name] = {k: _number(v) for k, _, v in (part.partition("=") for part in parts)}
        else:
            fields[name] = _number(value)
    return fields


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def probe(node: Node, *, info: bool = True) -> Probe:
    """PING a node and time the round trip; with info, ask its version and role too."""
    start = time.perf_counter()
    try:
        node.client.execute(("PING",))
    except CacheError as exc:
        return Probe(node, False, error=describe(exc))
    rtt_ms = (time.perf_counter() - start) * 1000
    if not info:
        return Probe(node, True, rtt_ms)
    try:
        server = parse_info(node.client.execute(("INFO", "server")))
        # Valkey names the field server_mode; Redis, redis_mode.
        mode = server.get("server_mode", server.get("redis_mode"))
        role = "sentinel" if mode == "sentinel" else None
        if role is None:
            role = parse_info(node.client.execute(("INFO", "replication"))).get("role")
    except CacheError:  # e.g. an ACL user without INFO: the node answered all the same
        return Probe(node, True, rtt_ms)
    name = str(server.get("server_name") or "redis")
    number = server.get(f"{name}_version", server.get("redis_version"))
    version = None if number is None else f"{name} {number}"
    return Probe(node, True, rtt_ms, version=version, role=None if role is None else str(role))


def node_info(node: Node, sections: tuple[str, ...]) -> dict[str, Any]:
    """INFO of each section, parsed (a failure raises: the caller reports it per node)."""
    return {section: parse_info(node.client.execute(("INFO", section))) for section in sections}
