"""The topologies, each a kind in a module of its own, behind one registry: how LOCATION and
OPTIONS name it (parse), its client (build), its nodes (survey), where its keys live (the
checks) and what clear() empties. Nothing outside this package compares topology names: it
asks the configuration's kind.

    base.py         what every kind answers
    standalone.py   one server
    replicas.py     a primary and read replicas (a LOCATION list)
    sentinel.py     a Sentinel-watched primary (SENTINELS)
    cluster.py      a Redis Cluster (CLUSTER: True)

A new topology is a module here with a Kind subclass, one line in KINDS (in the order kinds
claim a configuration), and its router in redoxide.topology.
"""

from __future__ import annotations

from typing import Any

from redoxide._option_parts import flag
from redoxide._sections import Config
from redoxide.topology.kinds.base import Kind
from redoxide.topology.kinds.cluster import Cluster
from redoxide.topology.kinds.replicas import Replicas
from redoxide.topology.kinds.sentinel import Sentinel
from redoxide.topology.kinds.standalone import Standalone

__all__ = ["KINDS", "Kind", "kind_of", "parse_topology"]

#: Every kind, in the order they are asked to claim a configuration (standalone, which
#: claims anything, last).
KINDS: tuple[Kind, ...] = (Cluster(), Sentinel(), Replicas(), Standalone())
_BY_NAME = {kind.name: kind for kind in KINDS}


def kind_of(config: Config) -> Kind:
    """The kind of a configuration's topology."""
    return _BY_NAME[config.servers.topology]


def parse_topology(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Find the kind LOCATION (kwargs["urls"]) and OPTIONS describe, let it parse its options
    into kwargs, and name it there."""
    # Both flags are checked first, whichever kind claims the configuration.
    flag(opts, names, "cluster")
    flag(opts, names, "read_from_replicas")
    for kind in KINDS:
        if kind.claims(opts, names, kwargs):
            kind.parse(opts, names, kwargs)
            kwargs["topology"] = kind.name
            return
