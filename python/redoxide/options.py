"""One parser for LOCATION and OPTIONS: django-redis' upper-case names and the builtin
RedisCache's lower-case names map onto one typed configuration; anything unknown or invalid
raises ImproperlyConfigured naming the option."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any
from urllib.parse import unquote, urlsplit

from django.utils.module_loading import import_string

from redoxide._credentials import parse_credentials
from redoxide._error_options import error_policy, refuse_foreign_factory
from redoxide._location import (
    POOL_KEYWORDS,
    is_number,
    parse_location,
    pool_keyword,
    query_options,
    redact,
)
from redoxide._near_options import parse_near_cache
from redoxide._option_parts import fail as _fail
from redoxide._option_parts import optional_str as _optional_str
from redoxide._sections import Behaviour, Config, Connection, ErrorPolicy, Servers, Values
from redoxide._tls import TLS_OPTIONS, tls_settings
from redoxide._value_options import value_codec
from redoxide.exceptions import ConfigurationError, ResponseError
from redoxide.topology.kinds import parse_topology

__all__ = ["Config", "parse_config", "parse_location", "redact"]

# Canonical option name for every accepted spelling.
_ALIASES = {
    "SOCKET_TIMEOUT": "socket_timeout",
    "SOCKET_CONNECT_TIMEOUT": "socket_connect_timeout",
    "PASSWORD": "password",
    "USERNAME": "username",
    "DB": "db",
    "SERIALIZER": "serializer",
    "COMPRESSOR": "compressor",
    "COMPRESS_MIN_LENGTH": "compress_min_length",
    "COMPRESS_LEVEL": "compress_level",
    "PICKLE_VERSION": "pickle_protocol",
    "IGNORE_EXCEPTIONS": "ignore_exceptions",
    "LOG_IGNORED_EXCEPTIONS": "log_ignored_exceptions",
    "IGNORE_EXCEPTION_CLASSES": "ignore_exception_classes",
    "EXCEPTION_HANDLER": "exception_handler",
    "CREDENTIAL_PROVIDER": "credential_provider",
    "CREDENTIAL_REFRESH_SECONDS": "credential_refresh",
    "LOG_IGNORED_EXCEPTIONS_LEVEL": "ignored_log_level",
    "STAMPEDE_PROTECTION": "stampede_protection",
    "CLEAR_PREFIX_ONLY": "clear_prefix_only",
    "STAMPEDE_WINDOW": "stampede_window",
    "STAMPEDE_LOCK_TIMEOUT": "stampede_lock_timeout",
    "CLIENT_CLASS": "client_class",
    "CONNECTION_FACTORY": "connection_factory",
    "CLUSTER": "cluster",
    "READ_FROM_REPLICAS": "read_from_replicas",
    "SENTINELS": "sentinels",
    "SENTINEL_KWARGS": "sentinel_kwargs",
    "CONNECTION_POOL_KWARGS": "pool_kwargs",
    "CONNECTION_POOL_CLASS": "pool_class",
    "PARSER_CLASS": "parser_class",
    "SYNC_CONNECTIONS": "sync_connections",
    "SIGN_VALUES": "sign_values",
    "SIGNING_KEY": "signing_key",
    "TRACING": "tracing",
    "TRACING_KEYS": "tracing_keys",
    "NEAR_CACHE": "near_cache",
    **TLS_OPTIONS,
}
_CANONICAL = frozenset(_ALIASES.values())
# Options of redis-py connection pools that have no meaning here: connections are managed by
# the Rust core (one multiplexed connection per server, one per thread for sync calls).
_IGNORED = frozenset({"pool_class", "parser_class", "pool_kwargs"})
_ACCEPTED_CLIENT_CLASSES = frozenset(
    {"django_redis.client.DefaultClient", "django_redis.client.SentinelClient"}
)


def _seconds(option: str | tuple[str, ...], value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(option, f"must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or not 0.001 <= value <= 86400:
        raise _fail(option, f"must be a number of seconds from 0.001 to 86400, not {value!r}")
    return float(value)


def _exception_classes(option: str, value: Any) -> tuple[type[BaseException], ...]:
    if isinstance(value, (str, type)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise _fail(option, "must be a non-empty list of exception classes or dotted paths")
    classes = []
    for item in value:
        cls = item
        if isinstance(cls, str):
            try:
                cls = import_string(cls)
            except ImportError as exc:
                raise _fail(option, f"cannot import {item!r}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            raise _fail(option, f"{item!r} is not an exception class")
        if issubclass(cls, ResponseError) or issubclass(ResponseError, cls):
            # A WRONGTYPE or OOM reply is a bug or an outage to see, never a silent miss.
            raise _fail(option, f"{item!r} would swallow server error replies")
        classes.append(cls)
    return tuple(classes)


def _topology(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Work out standalone / replicas / sentinel / cluster from LOCATION and OPTIONS: the
    first topology kind that claims them parses its own options (redoxide.topology.kinds)."""
    parse_topology(opts, names, kwargs)


def _setting(settings: Any, name: str, default: Any) -> Any:
    """A project-wide setting, or its default when Django settings are not configured (a
    cache built outside a project, e.g. in a script)."""
    return getattr(settings, name, default) if settings.configured else default


def _names(options: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Map every option onto its canonical name: (values, the spelling the user wrote)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ConfigurationError(f"redoxide: OPTIONS must be a dict, not {type(options).__name__}")
    seen: dict[str, tuple[str, Any]] = {}
    for name, value in options.items():
        if name in POOL_KEYWORDS:  # the builtin backend hands these to redis-py's pool
            reason = pool_keyword(name, value)
            if reason is not None:
                raise _fail(name, reason)
            continue
        canonical = _ALIASES.get(name, name if name in _CANONICAL else None)
        if canonical is None:
            known = sorted({*_ALIASES, *_CANONICAL})
            raise ConfigurationError(
                f"redoxide: unknown OPTIONS key {name!r}; known options: {', '.join(known)}"
            )
        if canonical in seen and seen[canonical][0] != name:
            raise ConfigurationError(
                f"redoxide: OPTIONS gives both {seen[canonical][0]!r} and {name!r}; use one"
            )
        seen[canonical] = (name, value)
    opts = {canonical: value for canonical, (_, value) in seen.items()}
    names = {canonical: name for canonical, (name, _) in seen.items()}
    return opts, names


def location_query(servers: tuple[str, ...]) -> dict[str, Any]:
    """The settings LOCATION's query gives (redis-py's names: ?socket_timeout=, ?db=,
    ?ssl_cert_reqs=...; each is also the canonical OPTIONS name). redoxide has one value of
    each for every server, so every URL of a list must give the same ones."""
    first = query_options(servers[0])
    for url in servers[1:]:
        other = query_options(url)
        for key in sorted(first.keys() | other.keys()):
            if first.get(key) != other.get(key):
                raise ConfigurationError(
                    f"redoxide: LOCATION's URLs disagree on ?{key}= ({redact(servers[0])!r}, "
                    f"{redact(url)!r}): one value serves every server, so give the same on "
                    "each URL, or put it in OPTIONS"
                )
    return first


def _url_credentials(url: str, query: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Credentials before the first URL's host count where OPTIONS gives none (the data
    nodes' too); the query may repeat them, not contradict them."""
    parts = urlsplit(url)
    for key, before_host in (("username", parts.username or None), ("password", parts.password)):
        if before_host is None:
            continue
        if key in query and unquote(before_host) != query[key]:
            raise ConfigurationError(
                f"redoxide: LOCATION {redact(url)!r} gives a {key} before the host and "
                f"another as ?{key}=; give it once"
            )
        if kwargs.get(key) is None:
            kwargs[key] = unquote(before_host)


def _db(option: str | tuple[str, ...], value: Any) -> int:
    if isinstance(value, str) and is_number(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(option, f"must be a non-negative integer, not {value!r}")
    return value


# The connection settings OPTIONS, django-redis' CONNECTION_POOL_KWARGS and LOCATION's query
# may each give: the name, its Connection/Servers field, and how an OPTIONS value is read.
_CONNECTION_SETTINGS: tuple[tuple[str, str, Any], ...] = (
    ("socket_timeout", "socket_timeout", _seconds),
    ("socket_connect_timeout", "connect_timeout", _seconds),
    ("username", "username", _optional_str),
    ("password", "password", _optional_str),
    ("db", "db", _db),
)


def _path_dbs(servers: tuple[str, ...]) -> list[str]:
    """The database in each URL's path ("" for none; a unix socket's path is the socket's)."""
    parts = [urlsplit(url) for url in servers]
    return ["" if p.scheme.endswith("unix") else p.path.strip("/") for p in parts]


def _pool_gives_way(servers: tuple[str, ...], key: str, value: Any, pool_name: str) -> bool:
    """Whether a CONNECTION_POOL_KWARGS db, username or password yields to LOCATION's path or
    user information, as in redis-py's from_url, which applies those over the pool's keywords
    (so django-redis stores in the URL's database, and so do we). A pool db that would still
    serve some URLs of a list (those without a database in their path) is refused unless the
    others name it too: one database serves every server."""
    if key == "username":
        return bool(urlsplit(servers[0]).username)
    if key == "password":
        return bool(urlsplit(servers[0]).password)
    if key != "db":
        return False
    paths = _path_dbs(servers)
    if "" not in paths:
        return True  # every URL names its database: the pool's serves none
    if {int(path) for path in paths if path} - {value}:
        raise _fail(
            (pool_name, key),
            f"({value!r}) would serve the LOCATION URLs without a database in their path, "
            "while the others name another: one database serves every server, so name it "
            "in every URL, or in OPTIONS['DB']",
        )
    return False  # it serves the URLs without one, and repeats the others'


def _connection(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Timeouts, credentials and the database, from OPTIONS, CONNECTION_POOL_KWARGS (which
    django-redis hands to redis-py's pool) and LOCATION's query (which redis-py reads).

    redoxide's OPTIONS win over the URL's path and user information. The pool's db,
    username and password give way to those, as in redis-py's from_url; a pool value of None
    is redis-py's default, so it is not given (a None timeout does not mean waiting forever
    here: the default timeout holds). Otherwise, where several give one setting they must
    agree: redis-py lets the query win over the pool's keywords, and those over OPTIONS; a
    contradiction is refused rather than settled silently."""
    servers: tuple[str, ...] = kwargs["urls"]
    query = location_query(servers)
    pool = opts.get("pool_kwargs")
    pool = pool if isinstance(pool, dict) else {}
    pool_name = names.get("pool_kwargs", "CONNECTION_POOL_KWARGS")
    for key, value in pool.items():
        reason = pool_keyword(key, value) if key in POOL_KEYWORDS else None
        if reason is not None:
            raise _fail((pool_name, key), reason)
    for key, field, read in _CONNECTION_SETTINGS:
        sources = []
        if key in opts:
            sources.append((f"OPTIONS[{names[key]!r}]", read(names[key], opts[key])))
        if pool.get(key) is not None:
            value = read((pool_name, key), pool[key])
            if not _pool_gives_way(servers, key, value, pool_name):
                sources.append((f"OPTIONS[{pool_name!r}][{key!r}]", value))
        if key in query:
            sources.append((f"?{key}= in LOCATION", query[key]))
        sources = [(where, value) for where, value in sources if value is not None]
        for where, value in sources[1:]:
            first, agreed = sources[0]
            if value != agreed:
                shown = "" if key == "password" else f" ({value!r} against {agreed!r})"
                raise ConfigurationError(
                    f"redoxide: {where} contradicts {first}{shown}; give it in one place"
                )
        if sources:
            kwargs[field] = sources[0][1]
    _url_credentials(servers[0], query, kwargs)
    parse_credentials(opts, names, kwargs)


def _sync_connections(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    if "sync_connections" not in opts:
        return
    value = opts["sync_connections"]
    if value not in ("per-thread", "shared"):
        raise _fail(names["sync_connections"], f'must be "per-thread" or "shared", not {value!r}')
    kwargs["shared_sync"] = value == "shared"


def _behaviour(opts: dict[str, Any], names: dict[str, str], kwargs: dict[str, Any]) -> None:
    """Fail-open, logging, stampede protection, clear()."""
    # django-redis' project-wide settings are the defaults; OPTIONS win.
    from django.conf import settings

    defaults = {
        "ignore_exceptions": _setting(settings, "DJANGO_REDIS_IGNORE_EXCEPTIONS", False),
        "log_ignored_exceptions": _setting(settings, "DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS", False),
    }
    for key, default in defaults.items():
        value = opts.get(key, default)
        if not isinstance(value, bool):
            raise _fail(names.get(key, key.upper()), f"must be True or False, not {value!r}")
        kwargs[key] = value
    logger_name = _setting(settings, "DJANGO_REDIS_LOGGER", None) or "redoxide"
    if not isinstance(logger_name, str):
        raise ConfigurationError(
            f"redoxide: DJANGO_REDIS_LOGGER must be a logger name, not {logger_name!r}"
        )
    kwargs["logger_name"] = logger_name
    for flag in ("stampede_protection", "clear_prefix_only", "tracing", "tracing_keys"):
        if flag in opts:
            if not isinstance(opts[flag], bool):
                raise _fail(names[flag], f"must be True or False, not {opts[flag]!r}")
            kwargs[flag] = opts[flag]
    if "stampede_window" in opts:
        window = opts["stampede_window"]
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window < 1:
            raise _fail(
                names["stampede_window"], f"must be a fraction between 0 and 1, not {window!r}"
            )
        kwargs["stampede_window"] = float(window)
    if "stampede_lock_timeout" in opts:
        seconds = _seconds(names["stampede_lock_timeout"], opts["stampede_lock_timeout"])
        kwargs["stampede_lock_ms"] = max(1, round(seconds * 1000))
    if "ignore_exception_classes" in opts:
        kwargs["ignore_exception_classes"] = _exception_classes(
            names["ignore_exception_classes"], opts["ignore_exception_classes"]
        )
    error_policy(settings, opts, names, kwargs)


def parse_config(location: Any, options: dict[str, Any] | None) -> Config:
    """Validate LOCATION and OPTIONS and return the typed configuration."""
    servers = parse_location(location)
    opts, names = _names(options)
    kwargs: dict[str, Any] = {"urls": servers}
    _connection(opts, names, kwargs)
    _sync_connections(opts, names, kwargs)
    value_codec(opts, names, kwargs)
    _behaviour(opts, names, kwargs)
    _topology(opts, names, kwargs)
    kwargs["tls"] = tls_settings(opts, names, servers, query=location_query(servers))
    if "near_cache" in opts:
        kwargs["near_cache"] = parse_near_cache(names["near_cache"], opts["near_cache"])
    refuse_foreign_factory(opts, names)
    if "client_class" in opts and opts["client_class"] not in _ACCEPTED_CLIENT_CLASSES:
        raise _fail(
            names["client_class"],
            "is not supported: redoxide has one client for every topology "
            "(django_redis.client.DefaultClient is accepted and ignored)",
        )
    return _sections(kwargs)


def _sections(kwargs: dict[str, Any]) -> Config:
    """The parsed values, each in its section: every value parsed must land in one."""

    def take(section: type[Any]) -> Any:
        return section(**{f.name: kwargs.pop(f.name) for f in fields(section) if f.name in kwargs})

    config = Config(
        servers=take(Servers),
        connection=take(Connection),
        values=take(Values),
        errors=take(ErrorPolicy),
        behaviour=take(Behaviour),
        near_cache=kwargs.pop("near_cache", None),
    )
    if kwargs:  # a parser wrote a value no section has
        raise AssertionError(f"redoxide: options parsed into no section: {sorted(kwargs)}")
    return config
