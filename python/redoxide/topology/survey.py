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
from dataclasses import dataclass
from typing import Any

from redoxide._sections import Config
from redoxide.exceptions import CacheError
from redoxide.topology import shared_client
from redoxide.topology.kinds import kind_of
from redoxide.topology.seen import Node, Survey

__all__ = ["Node", "Probe", "Survey", "describe", "node_info", "parse_info", "probe", "survey"]


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
    #: What it offers beyond every supported server's commands (MSETEX, SET IFEQ, DELIFEQ,
    #: DELEX, CLUSTERSCAN, Lua), as its connection learnt it; None if not known.
    offers: tuple[str, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The probe as plain data (for --json)."""
        return {
            "address": self.node.address,
            "kind": self.node.kind,
            "ok": self.ok,
            "rtt_ms": None if self.rtt_ms is None else round(self.rtt_ms, 3),
            "version": self.version,
            "role": self.role,
            "offers": None if self.offers is None else list(self.offers),
            "error": self.error,
        }


def describe(exc: BaseException) -> str:
    """Name an error by its class and message (messages never hold secrets)."""
    return f"{type(exc).__name__}: {exc}"


def survey(config: Config) -> Survey:
    """List the nodes of a configuration's topology, asking sentinels or the cluster."""
    found = Survey(config.servers.topology)
    kind_of(config).survey(config, shared_client(config), found)
    return found


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


def _number(text: str) -> int | float | str:
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
    learnt = node.client.offers
    offers = None if learnt is None else tuple(learnt["offers"])
    if not info:
        return Probe(node, True, rtt_ms, offers=offers)
    try:
        server = parse_info(node.client.execute(("INFO", "server")))
        # Valkey names the field server_mode; Redis, redis_mode.
        mode = server.get("server_mode", server.get("redis_mode"))
        role = "sentinel" if mode == "sentinel" else None
        if role is None:
            role = parse_info(node.client.execute(("INFO", "replication"))).get("role")
    except CacheError:  # e.g. an ACL user without INFO: the node answered all the same
        return Probe(node, True, rtt_ms, offers=offers)
    name = str(server.get("server_name") or "redis")
    number = server.get(f"{name}_version", server.get("redis_version"))
    version = None if number is None else f"{name} {number}"
    return Probe(
        node,
        True,
        rtt_ms,
        version=version,
        role=None if role is None else str(role),
        offers=offers,
    )


def node_info(node: Node, sections: tuple[str, ...]) -> dict[str, Any]:
    """INFO of each section, parsed (a failure raises: the caller reports it per node)."""
    return {section: parse_info(node.client.execute(("INFO", section))) for section in sections}
