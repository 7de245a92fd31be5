"""Helpers of the topology tests: where a cluster cache sends a key, and what nodes saw."""

from __future__ import annotations

from typing import Any

from redoxide._redoxide import key_slot

from support.backend import build_cache
from support.servers import RedisServer


def node_keys(node: RedisServer) -> set[str]:
    return set(node.cli("--scan").split())


def cluster_cache(urls: list[str], **options: Any) -> Any:
    """A cluster cache; a distinct SOCKET_TIMEOUT gives it a router (and node clients) of its
    own, with nothing learnt yet."""
    return build_cache(urls, {"OPTIONS": {"CLUSTER": True, **options}})


def owner_port(cache: Any, name: str) -> int:
    """The port of the primary the cache's router sends `name` to (table learnt first)."""
    router = cache._client
    router.slots.table_now()
    return int(router.slots.table[key_slot(cache.make_key(name))].address.rsplit(":", 1)[1])


def name_on(cache: Any, port: int, prefix: str, *, on: bool = True) -> str:
    """A key name whose slot the router maps to the node on `port` (or, on=False, elsewhere)."""
    for i in range(10_000):
        name = f"{prefix}{i}"
        if (owner_port(cache, name) == port) is on:
            return name
    raise AssertionError("no such key")


def commandstat(node: RedisServer, name: str) -> int:
    stats = node.info("commandstats").get(f"cmdstat_{name}", "calls=0")
    return int(stats.split(",")[0].split("=")[1])


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except Exception as exc:  # the type is what is compared
        return ("raised", type(exc).__name__)
