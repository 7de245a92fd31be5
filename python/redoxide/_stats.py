"""``cache.stats()``: what the Rust core counted for each server a cache talks to, summed.

Every Rust ``Client`` (one per server node per process) counts its own calls, errors, hits,
misses, bytes, connections and latencies (src/stats.rs). Here a cache's counters are gathered
from every node client made for its configuration (``_stats_nodes.seen`` is told of each one
by topology/nodes.py, so a router's nodes are all found, including nodes it no longer uses: their
counts stay part of the history), added up, and returned with the cache's alias and its
fail-open count as a plain, JSON-serializable dict:

    {
        "alias": "default",                # the CACHES alias (or the LOCATION if unknown)
        "location": "redis://***@host:6379/0",   # passwords hidden
        "enabled": True,                   # False in a build without the counters
        "fail_open_misses": 0,             # calls answered by the fallback (IGNORE_EXCEPTIONS)
        "totals": NODE,                    # every node's counters added up
        "nodes": {"host:port": NODE, ...},
    }

where NODE is ``{"calls": {FAMILY: n}, "errors": {FAMILY: {ERROR_CLASS: n}}, "hits": n,
"misses": n, "bytes_sent": n, "bytes_received": n, "connections": n, "reconnects": n,
"timeouts": n, "latency": {FAMILY: {"bounds_us": [...], "counts": [...], "sum_us": x,
"count": n}}}``. A family is a command name (GET, SET, MGET, EVALSHA...; OTHER for the rest); a
pipeline's commands are counted each under its own family and its round trip is timed as
PIPELINE. ``counts`` has one more entry than ``bounds_us``: the round trips slower than the
last bound. Caches whose settings reach the same servers in the same way share the node
clients, and so their counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from redoxide._stats_nodes import clients_of
from redoxide.options import parse_config

if TYPE_CHECKING:
    from redoxide._sections import Config
    from redoxide.plans import FailOpen


class _Cache(Protocol):
    """What is read here of a RedisCache (which imports this module)."""

    _config: Config
    _fail_open: FailOpen
    key_prefix: str
    version: int


__all__ = ["collect", "merge", "reset"]

_aliases: dict[int, tuple[Config, str]] = {}
_SCALARS = (
    "hits", "misses", "bytes_sent", "bytes_received", "connections", "reconnects", "timeouts",
)  # fmt: skip


def alias_of(cache: _Cache) -> str:
    """The CACHES alias this cache was configured under (Django does not tell a backend its
    alias): the first whose settings make the same configuration, else the LOCATION."""
    config = cache._config
    known = _aliases.get(id(config))
    if known is not None and known[0] is config:
        return known[1]
    from django.conf import settings

    found = ", ".join(config.servers.display)
    for alias, conf in getattr(settings, "CACHES", {}).items():
        if "redoxide" not in str(conf.get("BACKEND", "")):
            continue
        try:
            other = parse_config(conf.get("LOCATION", ""), conf.get("OPTIONS"))
        except Exception:  # an invalid alias is not this one
            continue
        same = other.client_key == config.client_key and conf.get("KEY_PREFIX", "") == (
            cache.key_prefix
        )
        if same and conf.get("VERSION", 1) == cache.version:
            found = str(alias)
            break
    _aliases[id(config)] = (config, found)
    return found


def merge(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Add up several nodes' counters (the same shape as one node's)."""
    total: dict[str, Any] = {"calls": {}, "errors": {}, "latency": {}}
    for name in _SCALARS:
        total[name] = sum(node[name] for node in nodes)
    for node in nodes:
        for family, n in node["calls"].items():
            total["calls"][family] = total["calls"].get(family, 0) + n
        for family, classes in node["errors"].items():
            into = total["errors"].setdefault(family, {})
            for cls, n in classes.items():
                into[cls] = into.get(cls, 0) + n
        for family, hist in node["latency"].items():
            have = total["latency"].get(family)
            if have is None:
                total["latency"][family] = {**hist, "counts": list(hist["counts"])}
                continue
            have["counts"] = [a + b for a, b in zip(have["counts"], hist["counts"], strict=True)]
            have["sum_us"] += hist["sum_us"]
            have["count"] += hist["count"]
    return total


def collect(cache: _Cache) -> dict[str, Any]:
    """The counters of a cache (see the module docstring for the shape)."""
    from redoxide import _redoxide

    nodes: dict[str, dict[str, Any]] = {}
    enabled = True
    for client in clients_of(cache._config):
        counters = client.stats()
        enabled = counters.pop("enabled")
        nodes[client.address] = counters
    if not nodes:
        enabled = _redoxide.STATS_ENABLED
    return {
        "alias": alias_of(cache),
        "location": ", ".join(cache._config.servers.display),
        "enabled": enabled,
        "fail_open_misses": cache._fail_open.ignored,
        "totals": merge(list(nodes.values())),
        "nodes": nodes,
    }


def reset(cache: _Cache) -> None:
    """Zero a cache's counters (those of every node it uses, shared with caches that share
    them); open connections are a gauge and stay."""
    for client in clients_of(cache._config):
        client.reset_stats()
    cache._fail_open.ignored = 0
