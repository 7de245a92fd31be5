"""Rust clients for the nodes a router discovers, shared by the whole process.

Routers of several configurations that reach the same node (same address, credentials,
timeouts and TLS settings) share its client, and so its one multiplexed connection.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from redoxide import _redoxide, _stats_nodes
from redoxide._credentials import credentials_for
from redoxide._location import redact
from redoxide._registry import Registry
from redoxide._sections import Config
from redoxide.exceptions import ConfigurationError

__all__ = ["discovery_budget", "new_client", "node_client"]

_nodes: Registry[_redoxide.Client] = Registry()


def new_client(
    config: Config,
    url: str,
    *,
    db: int | None = None,
    readonly: bool = False,
    login: tuple[str | None, str | None] | None = None,
) -> _redoxide.Client:
    """A Rust client for one server URL. Everything it is made with comes from the URL, the
    database, the role and ``config.connection`` (the data nodes' credentials, or ``login``
    for a sentinel's), so configurations whose ``client_key`` is equal get equal clients."""
    link = config.connection
    if login is None:
        username, password = link.username, link.password
        credentials = credentials_for(link.credential_provider)
    else:
        (username, password), credentials = login, None
    try:
        client = _redoxide.Client(
            url, username=username, password=password, db=db, readonly=readonly,
            credentials=credentials, connect_timeout=link.connect_timeout,
            response_timeout=link.socket_timeout, shared_sync=link.shared_sync, **link.tls_kwargs,
        )  # fmt: skip
    except ConfigurationError as exc:  # name the URL, never its secret
        raise ConfigurationError(f"{exc} (LOCATION {redact(url)!r})") from None
    _stats_nodes.seen(config, client)
    return client


def node_client(
    config: Config, host: str, port: int, *, db: int | None = None, readonly: bool = False
) -> _redoxide.Client:
    """The process-wide client of one discovered data node, shared by every configuration
    that reaches it with the same ``Connection`` section."""
    scheme = (
        "rediss" if urlsplit(config.servers.urls[0]).scheme in ("rediss", "valkeys") else "redis"
    )
    key = (scheme, host, port, db, readonly, config.connection)

    def make() -> _redoxide.Client:
        url = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
        return new_client(config, url, db=db, readonly=readonly)

    client = _nodes.get(key, make)
    _stats_nodes.seen(config, client)  # a node made for another configuration serves this one too
    return client


def discovery_budget(config: Config) -> float:
    """How long asking nodes (or sentinels) about the topology may take, all of them: two
    slow nodes' worth (a first request waits for the connect and the reply), so a call that
    re-learns the topology stays bounded."""
    return 2 * (config.connection.connect_timeout + config.connection.socket_timeout)


def split_address(address: str) -> tuple[str, int] | None:
    """``host:port`` (IPv6 hosts bracketed or not) as (host, port); None without a port."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def address_of(node: Any) -> tuple[str, int] | None:
    """A client's (host, port); None for no client."""
    if node is None:
        return None
    return split_address(node.address)
