"""What every topology kind answers (redoxide.topology.kinds lists them)."""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urlsplit

from redoxide._location import place
from redoxide._option_parts import fail
from redoxide._protocols import ClientLike
from redoxide._sections import Config
from redoxide.topology.seen import Survey

__all__ = ["Kind", "database_of", "refuse_sentinel_kwargs"]


class Kind:
    """One topology: how LOCATION and OPTIONS name it and what it takes from them, how its
    client is built, which nodes a survey finds, where its keys live (for the checks that
    look for caches sharing a database) and what clear()'s FLUSHDB empties."""

    #: The name in Config.servers.topology and in reports (cache_ping, the survey).
    name: ClassVar[str]
    #: Whether LOCATION's first URL is the address of the server the cache talks to (a
    #: Sentinel LOCATION names a service instead): spans name it as server.address.
    names_server: ClassVar[bool] = True

    def claims(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> bool:
        """Whether LOCATION (kwargs["urls"]) and OPTIONS describe this topology (asked in the
        registry's order: the first kind that claims them parses them)."""
        raise NotImplementedError

    def parse(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
        """Check this topology's options and put what it needs into kwargs (Servers' fields)."""

    def build(self, config: Config) -> ClientLike:
        """The client (or router) of a configuration of this kind."""
        raise NotImplementedError

    def survey(self, config: Config, client: Any, found: Survey) -> None:
        """Add the nodes this topology has now to found (and what could not be learnt to its
        problems), given the configuration's shared client."""
        raise NotImplementedError

    def databases(self, config: Config) -> set[tuple[Any, ...]]:
        """Where the configuration's keys live: (kind, address..., db) of each server it names."""
        return {place(url, config.servers.db) for url in config.servers.urls}

    def flushed(self, config: Config) -> str:
        """What FLUSHDB on the cache empties, in words."""
        return f"database {database_of(config)} of {config.servers.display[0]}"


def database_of(config: Config) -> int:
    """The database number of a configuration: OPTIONS' DB, else LOCATION's path, else 0."""
    db = config.servers.db
    if db is None:
        path = urlsplit(config.servers.urls[0]).path.strip("/")
        db = int(path) if path.isdigit() else 0
    return db


def refuse_sentinel_kwargs(opts: dict[str, Any], names: dict[str, str]) -> None:
    """SENTINEL_KWARGS without SENTINELS is a mistake to name."""
    if "sentinel_kwargs" in opts:
        raise fail(names["sentinel_kwargs"], "needs SENTINELS")
