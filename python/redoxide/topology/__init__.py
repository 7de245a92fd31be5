"""Where commands go: one server, a primary with read replicas, a Sentinel-watched primary, or
a Cluster.

Each topology is a router that satisfies ``ClientLike`` (see redoxide._protocols), like the
Rust ``Client`` itself, so the cache runs the same plans on every topology. Standalone uses
the Rust client directly: no layer at all. Routers hold one Rust client per node (shared by
the whole process: one multiplexed connection per node carries all async traffic) and add
only what the topology needs.

Recovery policy, the same for every router: a redirect (MOVED, ASK, READONLY after a
failover) is followed at once, because the command was not applied; a refused or broken
connection makes the router re-learn the topology and retry once if that moved the target;
a timeout is raised (the call already used its time) and the topology is re-learnt on the
next call.

    base.py       the ClientLike methods over a read path and a write path
    nodes.py      the process-wide node clients
    flight.py     one discovery at a time
    health.py     replicas left out of the rotation after a failure
    replicas.py   ReplicaRouter (a LOCATION list)
    sentinel.py   SentinelPrimary, SentinelRouter (SENTINELS)
    sentinel_events.py  the sentinels' Pub/Sub events, followed by a thread (listed and learnt)
    sentinel_hold.py    a failover's hold on writes, and how long it lasts
    sentinel_resp.py    RESP2 over the watcher's plain sockets
    commands.py   where a command's key is; how split replies join; slot tags
    slots.py      a cluster's slot map and targets
    parts.py      calls cut into single-slot parts
    cluster.py    ClusterRouter (CLUSTER: True)
    survey.py     every node of a topology, each asked directly (checks, commands)
    seen.py       what a survey finds
    kinds/        the topologies as kinds: parse, build, survey, checks, clear (one registry)
"""

from __future__ import annotations

from redoxide._protocols import ClientLike
from redoxide._registry import Registry
from redoxide._sections import Config
from redoxide.topology.cluster import ClusterRouter

# After the routers: each kind builds one.
from redoxide.topology.kinds import kind_of
from redoxide.topology.replicas import ReplicaRouter
from redoxide.topology.sentinel import SentinelRouter

__all__ = ["ClusterRouter", "ReplicaRouter", "SentinelRouter", "make_client", "shared_client"]

# One client per configuration per process, shared by every backend instance (Django makes an
# instance per thread and per async context).
_clients: Registry[ClientLike] = Registry()


def make_client(config: Config) -> ClientLike:
    """Build the client (or router) for a configuration: its topology kind's."""
    return kind_of(config).build(config)


def shared_client(config: Config) -> ClientLike:
    """The process-wide client of a configuration."""
    return _clients.get(config.client_key, lambda: make_client(config))
