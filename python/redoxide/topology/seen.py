"""What a survey finds (redoxide.topology.survey): the nodes of a topology, each with what the
topology takes it for and a client to ask it, and what could not be learnt. Apart from the
survey itself so that each topology kind (redoxide.topology.kinds) lists its own nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redoxide import _redoxide

__all__ = ["Node", "Survey", "node"]


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


def node(kind: str, client: Any) -> Node:
    """A node of a client (its address is the client's)."""
    return Node(kind, str(client.address), client)
