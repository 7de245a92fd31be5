"""The node clients made for each configuration (topology/nodes.py tells ``seen`` of each one),
for ``cache.stats()`` (redoxide._stats) to gather: apart from it so that making a node client
needs nothing of the options."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from redoxide._registry import track

if TYPE_CHECKING:
    from redoxide._redoxide import Client
    from redoxide._sections import Config

__all__ = ["clients_of", "seen"]

# client_key -> {address: the node's Rust client}, for every node client made for it.
_nodes: dict[tuple[Any, ...], dict[str, Client]] = {}


class _Fork:
    """Give a forked child counters of its own (its parent's connections are not its own)."""

    lock = threading.Lock()

    def after_fork(self) -> None:
        _Fork.lock = threading.Lock()
        for clients in _nodes.values():
            for client in clients.values():
                client.reset_stats(connections=True)


_fork = _Fork()
track(_fork)


def seen(config: Config, client: Client) -> None:
    """Note that `client` carries traffic of `config`'s caches."""
    clients = _nodes.get(config.client_key)
    if clients is None:
        with _Fork.lock:
            clients = _nodes.setdefault(config.client_key, {})
    if clients.get(client.address) is not client:
        with _Fork.lock:
            clients[client.address] = client


def clients_of(config: Config) -> list[Client]:
    with _Fork.lock:
        return list(_nodes.get(config.client_key, {}).values())
