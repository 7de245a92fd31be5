"""``manage.py cache_stats [alias]``: the cache's counters (``cache.stats()``, where the
backend has it) and each data node's INFO memory and keyspace sections."""

from __future__ import annotations

from typing import Any

from django.core.cache import caches
from django.core.management.base import CommandError

from redoxide.exceptions import CacheError
from redoxide.management.base import (
    EXIT_FAILED,
    EveryAliasCommand,
    render,
    resolve,
)
from redoxide.topology.survey import describe, node_info, survey

# Fields of INFO stats shown beside memory and keyspace: the server's own hit rate and
# evictions, for every client together.
_SERVER_STATS = ("keyspace_hits", "keyspace_misses", "expired_keys", "evicted_keys")


def counters(alias: str) -> Any:
    """What the alias' cache.stats() returns (this process' counters), or None without it."""
    stats = getattr(caches[alias], "stats", None)
    return stats() if callable(stats) else None


class Command(EveryAliasCommand):
    help = (
        "Show a redoxide cache's counters (this process' own, where the backend keeps them) "
        "and each data node's INFO memory and keyspace (every redoxide cache without an alias)."
    )

    def run(self, **options: Any) -> None:
        aliases = self.aliases(options)
        report: dict[str, Any] = {}
        failed = 0
        for alias in aliases:
            target = resolve(alias)
            found = survey(target.config)
            nodes = []
            for node in found.nodes:
                if node.kind == "sentinel":
                    continue  # no data of its own
                entry: dict[str, Any] = {"address": node.address, "kind": node.kind}
                try:
                    info = node_info(node, ("memory", "keyspace", "stats"))
                except CacheError as exc:
                    entry["error"] = describe(exc)
                    failed += 1
                else:
                    entry["memory"] = info["memory"]
                    entry["keyspace"] = info["keyspace"]
                    entry["server_stats"] = {
                        k: info["stats"][k] for k in _SERVER_STATS if k in info["stats"]
                    }
                nodes.append(entry)
            failed += len(found.problems)
            report[alias] = {
                "topology": found.topology,
                "stats": counters(alias),
                "nodes": nodes,
                "problems": found.problems,
            }
        self.emit(report, render(report))
        if failed:
            raise CommandError(f"{failed} node(s) or lookups failed.", returncode=EXIT_FAILED)
