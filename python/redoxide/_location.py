"""LOCATION: one URL or several (the first is the primary, the rest read replicas), checked
when the cache is configured; and hiding the secrets in a URL for messages."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from redoxide.exceptions import ConfigurationError

__all__ = ["SCHEMES", "parse_location", "query_db", "redact"]

SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix", "redis+unix", "valkey+unix"})


def redact(url: str) -> str:
    """Return the URL with any password, and every query value but db, hidden."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The credentials end at the last "@": a password may hold an unescaped "@", "/", "?" or
    # "#", and hiding a path with an "@" in it is better than showing part of a password.
    at = rest.rfind("@")
    shown = ""
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        shown = f"{user}:***" if colon else "***"
        rest = rest[at:]
    # redis-py reads ?password= too.
    base, question, query = rest.partition("?")
    if question:
        params = (p.partition("=") for p in query.split("&"))
        query = "&".join(f"{k}{eq}{v if k == 'db' else '***' if eq else ''}" for k, eq, v in params)
    return f"{scheme}://{shown}{base}{question}{query}"


# The old "host:port:db" (or "host:port"): deprecated in django-redis 3.8, removed in 4.x, and
# rejected by django-redis 7 (redis-py's from_url needs a scheme). Refused here too, with the
# URL to write instead.
_LEGACY_LOCATION = re.compile(r"([^:/@?#\s]+):(\d+)(?::(\d+))?")


def _scheme_error(url: str) -> ConfigurationError:
    legacy = _LEGACY_LOCATION.fullmatch(url)
    if legacy:
        host, port, db = legacy.groups()
        return ConfigurationError(
            f"redoxide: LOCATION {url!r} is the old host:port:db form, which django-redis 7 "
            f"does not accept either; write 'redis://{host}:{port}/{db or 0}'"
        )
    # redact() needs a scheme to find the credentials: without one, hide up to the last "@".
    at = url.rfind("@")
    shown = redact(url) if "://" in url or at < 0 else f"***{url[at:]}"
    return ConfigurationError(
        f"redoxide: LOCATION {shown!r} needs one of the schemes "
        f"{', '.join(sorted(SCHEMES))} (e.g. redis://127.0.0.1:6379/0)"
    )


def parse_location(location: Any) -> tuple[str, ...]:
    """Split LOCATION into server URLs: the first is the primary, the rest are read replicas."""
    if isinstance(location, str):
        urls = [u.strip() for u in re.split("[;,]", location)]
    elif isinstance(location, (list, tuple)):
        urls = [u.strip() if isinstance(u, str) else u for u in location]
    else:
        raise ConfigurationError(
            "redoxide: LOCATION must be a URL string or a list of them, "
            f"not {type(location).__name__}"
        )
    urls = [u for u in urls if u != ""]
    if not urls:
        raise ConfigurationError("redoxide: LOCATION is empty; give a URL like redis://host:6379/0")
    for url in urls:
        if not isinstance(url, str):
            raise ConfigurationError(f"redoxide: LOCATION entries must be strings, not {url!r}")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError as exc:
            # urllib quotes what it took for the port, which may be part of a password.
            reason = "its port is not a number" if "Port could not" in str(exc) else exc
            raise ConfigurationError(
                f"redoxide: LOCATION {redact(url)!r} is not a valid URL: {reason} (characters "
                "such as @ / ? # in a password must be percent-encoded)"
            ) from None
        scheme = parts.scheme
        if scheme not in SCHEMES:
            raise _scheme_error(url)
        # Caught here rather than on first use: a database that is not a number ("/-1") or
        # port 0 would only fail when the first command connects.
        path_db = parts.path.strip("/")
        if not scheme.endswith("unix") and path_db and not path_db.isdigit():
            raise ConfigurationError(
                f"redoxide: LOCATION {redact(url)!r}: the database after the host must be a "
                "number (e.g. redis://127.0.0.1:6379/0)"
            )
        if parts.port == 0:
            raise ConfigurationError(f"redoxide: LOCATION {redact(url)!r}: port 0 is not a port")
    return tuple(urls)


def query_db(url: str) -> int | None:
    """Return the database a URL names as ``?db=N`` (redis-py honours it, so we do too)."""
    query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    unknown = sorted(set(query) - {"db"})
    if unknown:
        raise ConfigurationError(
            f"redoxide: LOCATION {redact(url)!r} has unsupported query parameters: "
            f"{', '.join(unknown)} (only db is understood; put options in OPTIONS)"
        )
    if "db" not in query:
        return None
    value = query["db"][-1]
    if not value.isdigit():
        raise ConfigurationError(f"redoxide: LOCATION {redact(url)!r}: db must be a number")
    return int(value)
