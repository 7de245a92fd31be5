"""A primary (and its replicas) that Sentinel watches: SENTINELS lists the sentinels and
LOCATION names the service, redis://SERVICE_NAME/db."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from redoxide._location import is_number, redact
from redoxide._option_parts import fail, flag, optional_str, sentinel_addresses
from redoxide._protocols import ClientLike
from redoxide._sections import Config
from redoxide.exceptions import CacheError, ConfigurationError
from redoxide.topology.kinds.base import Kind, database_of
from redoxide.topology.nodes import node_client
from redoxide.topology.seen import Survey, node
from redoxide.topology.sentinel import SentinelRouter

__all__ = ["Sentinel"]


class Sentinel(Kind):
    name = "sentinel"
    names_server = False

    def claims(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> bool:
        return "sentinels" in opts

    def parse(self, opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
        servers: tuple[str, ...] = kwargs["urls"]
        kwargs["sentinels"] = sentinel_addresses(names["sentinels"], opts["sentinels"])
        if len(servers) != 1:
            raise fail(names["sentinels"], "needs one LOCATION: redis://SERVICE_NAME/db")
        parts = urlsplit(servers[0])
        if not parts.hostname:
            raise fail(names["sentinels"], "needs LOCATION redis://SERVICE_NAME/db")
        kwargs["service_name"] = parts.hostname
        path_db = parts.path.strip("/")
        if path_db and "db" not in kwargs:
            if not is_number(path_db):
                raise ConfigurationError(
                    f"redoxide: LOCATION {redact(servers[0])!r}: the database must be a number"
                )
            kwargs["db"] = int(path_db)
        extra = opts.get("sentinel_kwargs") or {}
        if not isinstance(extra, dict):
            raise fail(names["sentinel_kwargs"], f"must be a dict, not {type(extra).__name__}")
        unknown = sorted(set(extra) - {"password", "username"})
        if unknown:
            raise fail(
                names["sentinel_kwargs"],
                f"has unsupported keys {', '.join(unknown)} (password, username are understood)",
            )
        kwargs["sentinel_username"] = optional_str(
            "SENTINEL_KWARGS.username", extra.get("username")
        )
        kwargs["sentinel_password"] = optional_str(
            "SENTINEL_KWARGS.password", extra.get("password")
        )
        kwargs["read_from_replicas"] = bool(flag(opts, names, "read_from_replicas"))

    def build(self, config: Config) -> ClientLike:
        return SentinelRouter(config)

    def survey(self, config: Config, client: Any, found: Survey) -> None:
        sentinels = client.primary.sentinels
        found.nodes.extend(node("sentinel", sentinel) for sentinel in sentinels)
        service, errors = client.primary.service, []
        for sentinel in sentinels:
            try:
                addr = sentinel.execute(("SENTINEL", "get-master-addr-by-name", service))
                replicas = sentinel.execute(("SENTINEL", "replicas", service)) if addr else []
            except CacheError as exc:
                errors.append(f"{sentinel.address}: {type(exc).__name__}")
                continue
            if not addr:
                errors.append(f"{sentinel.address}: does not know {service!r}")
                continue
            db = config.servers.db
            primary = node_client(config, addr[0].decode(), int(addr[1]), db=db)
            found.nodes.append(node("primary", primary))
            for entry in replicas:
                fields = dict(zip(entry[::2], entry[1::2], strict=False))
                host, port = fields[b"ip"].decode(), int(fields[b"port"])
                found.nodes.append(node("replica", node_client(config, host, port, db=db)))
            return
        found.problems.append(f"no sentinel named the primary of {service!r} ({'; '.join(errors)})")

    def databases(self, config: Config) -> set[tuple[Any, ...]]:
        db = config.servers.db or 0
        return {
            ("sentinel", config.servers.service_name, host, port, db)
            for host, port in config.servers.sentinels
        }

    def flushed(self, config: Config) -> str:
        service = config.servers.service_name
        return f"database {database_of(config)} of the primary of {service!r}"
