"""LOCATION: one URL or several (the first is the primary, the rest read replicas), checked
when the cache is configured; and hiding the secrets in a URL for messages."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from redoxide.exceptions import ConfigurationError

__all__ = [
    "POOL_KEYWORDS",
    "QUERY_PARAMETERS",
    "SCHEMES",
    "SHOWN_PARAMETERS",
    "is_number",
    "parse_location",
    "place",
    "pool_keyword",
    "query_db",
    "query_options",
    "redact",
]

SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix", "redis+unix", "valkey+unix"})


def is_number(text: str) -> bool:
    """Whether `text` is a whole number written in ASCII digits: str.isdigit() also takes
    "²" (which int() refuses) and "٣" (which int() reads as 3, and the Rust core would not)."""
    return text.isascii() and text.isdigit()


def redact(url: str) -> str:
    """Return the URL with any password hidden: in the user information, and in the query
    (the value of every parameter but those of SHOWN_PARAMETERS: ?password=, ?ssl_password=
    and any name redoxide does not know, which may be a misspelt password, show ***)."""
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
        query = "&".join(
            f"{k}{eq}{v if k in SHOWN_PARAMETERS else '***' if eq else ''}" for k, eq, v in params
        )
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
        if not scheme.endswith("unix") and path_db and not is_number(path_db):
            raise ConfigurationError(
                f"redoxide: LOCATION {redact(url)!r}: the database after the host must be a "
                "number (e.g. redis://127.0.0.1:6379/0)"
            )
        if parts.port == 0:
            raise ConfigurationError(f"redoxide: LOCATION {redact(url)!r}: port 0 is not a port")
        if parts.fragment:
            # redis-py ignores a fragment; redis-rs would read "#insecure" as "verify no
            # certificate", unseen by the TLS settings and the deploy checks.
            raise ConfigurationError(
                f"redoxide: LOCATION {redact(url)!r} has a fragment (#...), which is no part of "
                "a server's address (a # in a password must be written %23; to verify no "
                "certificate, write ?ssl_cert_reqs=none)"
            )
    return tuple(urls)


def query_db(url: str) -> int | None:
    """Return the database a URL names as ``?db=N`` (redis-py honours it, so we do too),
    after checking every query parameter (see query_options)."""
    db: int | None = query_options(url).get("db")
    return db


def place(url: str, db: int | None) -> tuple[Any, ...]:
    """Where a server URL's keys live: (host, port, db), or ("unix", path, db); `db` from
    OPTIONS wins over the URL's."""
    parts = urlsplit(url)
    if db is None:
        db = query_db(url)
    if parts.scheme.endswith("unix"):
        return ("unix", parts.path, db or 0)
    if db is None:
        path = parts.path.strip("/")
        db = int(path) if path.isdigit() else 0
    return ((parts.hostname or "").lower(), parts.port or 6379, db)


# -- redis-py's options in the URL query -------------------------------------------------------
#
# django-redis and Django's builtin RedisCache hand LOCATION to redis-py's
# ConnectionPool.from_url, whose parse_url reads options from the query (typed by
# URL_QUERY_ARGUMENT_PARSERS; any other name is passed on as a string to the connection
# class, so ?client_name=web works there too). Each name redis-py takes is below, by what
# redoxide does with it:
#   _HONOURED   the same setting as the OPTIONS name it maps to;
#   _IGNORED    checked like redis-py checks it, then ignored: it tunes a pool, a retry or a
#               health check redoxide does another way (docs/options.md says how);
#   _REFUSED    refused with the reason: honouring it is impossible here, and ignoring it
#               would silently change what the user asked for (a value that asks for
#               redis-py's default is accepted).
# Any other name is refused as unknown, naming it.

_TRUE = frozenset({"1", "T", "TRUE", "Y", "YES", "ON"})
_FALSE = frozenset({"0", "F", "FALSE", "N", "NO", "OFF"})  # redis-py's FALSE_STRINGS


def _bool(value: str) -> bool:
    # redis-py's to_bool takes any other text as True; a typo is an error here.
    word = value.strip().upper()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError("must be true or false (1/0, yes/no, on/off)")


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError("must be a number of seconds") from None
    if not math.isfinite(seconds) or not 0.001 <= seconds <= 86400:
        raise ValueError("must be a number of seconds from 0.001 to 86400")
    return seconds


def _count(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        text = value.strip()
        if not is_number(text) or int(text) < minimum:
            raise ValueError(f"must be a whole number from {minimum}")
        return int(text)

    return parse


def _wait(value: str) -> float:
    return 0.0 if value.strip() in ("0", "0.0") else _seconds(value)


def _text(value: str) -> str:
    return value


def _cert_reqs(value: str) -> str:
    # redis-py's words, and the ssl module's names Celery's rediss:// URLs carry.
    word = value.strip().lower().removeprefix("cert_")
    if word not in ("none", "optional", "required"):
        raise ValueError('must be "none", "optional" or "required"')
    return word


def _names_list(value: str) -> list[str]:
    names = [n.strip() for n in value.strip("[]").split(",")]
    if not all(names):
        raise ValueError("must be a comma-separated list of redis-py exception names")
    return names


#: name -> parser; each name is also the canonical OPTIONS name of the setting.
_HONOURED: dict[str, Callable[[str], Any]] = {
    "db": _count(0),
    "socket_timeout": _seconds,
    "socket_connect_timeout": _seconds,
    "username": _text,
    "password": _text,
    "ssl_cert_reqs": _cert_reqs,
    "ssl_check_hostname": _bool,
    "ssl_ca_certs": _text,
    "ssl_ca_data": _text,
    "ssl_certfile": _text,
    "ssl_keyfile": _text,
}

#: name -> parser: checked, then ignored (see docs/options.md, "Options in the URL").
_IGNORED: dict[str, Callable[[str], Any]] = {
    "max_connections": _count(1),  # no pool: one connection per server (per thread for sync)
    "timeout": _wait,  # how long a BlockingConnectionPool waits for a free connection
    "retry_on_timeout": _bool,  # a timeout is raised, never retried: the call used its time
    "retry_on_error": _names_list,  # a broken connection is remade by the core
    "socket_keepalive": _bool,  # a closed idle connection is noticed and remade
    "socket_read_size": _count(1),  # redis-py's parser buffer
    "health_check_interval": _count(0),  # a closed idle connection is noticed and remade
}


def _only(default: str, parse: Callable[[str], Any], reason: str) -> Callable[[str], None]:
    """A parameter accepted only when it asks for what redoxide does anyway."""

    def check(value: str) -> None:
        if parse(value) != parse(default):
            raise ValueError(reason)

    return check


def _never(reason: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        raise ValueError(reason)

    return check


def _tls_version(value: str) -> None:
    # ssl.TLSVersion: MINIMUM_SUPPORTED -2, TLSv1 769 ... TLSv1_2 771, TLSv1_3 772.
    text = value.strip()
    version = int(text) if is_number(text.removeprefix("-")) else None
    if version is None:
        raise ValueError("must be an ssl.TLSVersion number")
    if not (version == -2 or version <= 771):
        raise ValueError("cannot be honoured: redoxide cannot require TLS 1.3 (it takes 1.2 too)")


_NOT_NAMED = (
    "is not supported: redoxide does not name its connections (it sends CLIENT SETINFO "
    "lib-name redoxide itself); remove it"
)
#: name -> check that raises ValueError(reason) unless the value is what redoxide does.
_REFUSED: dict[str, Callable[[str], None]] = {
    "protocol": _only(
        "2",
        lambda v: v.strip(),
        "must be 2: redoxide speaks RESP2 to the data servers, and its raw client answers as "
        "redis-py does with protocol 2 (the near cache's RESP3 connection is its own)",
    ),
    "decode_responses": _only(
        "false",
        _bool,
        "must be false: the cache stores bytes, and the raw client answers bytes as redis-py "
        "does by default",
    ),
    "encoding": _only(
        "utf-8",
        lambda v: v.strip().lower().replace("_", "-").replace("utf8", "utf-8"),
        "must be utf-8: redoxide encodes str arguments as UTF-8",
    ),
    "encoding_errors": _only(
        "strict", lambda v: v.strip().lower(), "must be strict: redoxide encodes strictly"
    ),
    "legacy_responses": _only(
        "true", _bool, "must be true: the raw client answers in redis-py's classic shapes"
    ),
    "client_name": _never(_NOT_NAMED),
    "lib_name": _never(_NOT_NAMED),
    "lib_version": _never(_NOT_NAMED),
    "ssl_validate_ocsp": _only("false", _bool, "must be false: redoxide does not check OCSP"),
    "ssl_validate_ocsp_stapled": _only(
        "false", _bool, "must be false: redoxide does not check OCSP"
    ),
    "ssl_min_version": _tls_version,
    "ssl_include_verify_flags": _never("is not supported: the verification is rustls' own"),
    "ssl_exclude_verify_flags": _never("is not supported: the verification is rustls' own"),
    "ssl_ciphers": _never("is not supported: the cipher suites are rustls' own"),
    "ssl_ca_path": _never(
        "is not supported: give the CA certificates as one PEM file, ?ssl_ca_certs="
    ),
    "ssl_password": _never("is not supported: the client key must be an unencrypted PEM file"),
}

#: The query parameters LOCATION accepts (those of _REFUSED only with redoxide's own value).
QUERY_PARAMETERS = frozenset({*_HONOURED, *_IGNORED, *_REFUSED})

#: The query parameters whose values messages may show (redact, query_options' errors): an
#: allow-list, so a secret in any other one (?password=, ?ssl_password=, ?ssl_ca_data=, a
#: name redoxide does not know) is hidden.
SHOWN_PARAMETERS = frozenset(
    {
        *("db", "username", "socket_timeout", "socket_connect_timeout"),
        *("ssl_cert_reqs", "ssl_check_hostname", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"),
        *("max_connections", "timeout", "retry_on_timeout", "retry_on_error"),
        *("socket_keepalive", "socket_read_size", "health_check_interval"),
        *("protocol", "decode_responses", "encoding", "encoding_errors", "legacy_responses"),
        *("client_name", "lib_name", "lib_version", "ssl_validate_ocsp"),
        *("ssl_validate_ocsp_stapled", "ssl_min_version", "ssl_ca_path", "ssl_ciphers"),
        *("ssl_include_verify_flags", "ssl_exclude_verify_flags"),
    }
)


def query_options(url: str) -> dict[str, Any]:
    """Check a URL's query parameters as redis-py's from_url reads them, and return what
    they set, by canonical OPTIONS name (``db``, ``socket_timeout``, ``ssl_cert_reqs``...).

    Raises ConfigurationError naming the parameter for an unknown name, a value redis-py
    would refuse, a value given twice, or an option redoxide cannot honour."""
    query = urlsplit(url).query
    if not query:
        return {}
    found: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        where = f"redoxide: LOCATION {redact(url)!r}: ?{name}="
        if name not in QUERY_PARAMETERS:
            known = ", ".join(sorted({*_HONOURED, *_IGNORED}))
            raise ConfigurationError(
                f"{where} is not a parameter redoxide understands; the query may hold {known} "
                "(see docs/options.md, or put the setting in OPTIONS)"
            )
        if name in seen:
            if seen[name] != value:
                raise ConfigurationError(f"{where} is given twice, with different values")
            continue
        seen[name] = value
        if value.strip() == "":
            raise ConfigurationError(f"{where} has no value")
        try:
            if name in _HONOURED:
                found[name] = _HONOURED[name](value)
            elif name in _IGNORED:
                _IGNORED[name](value)
            else:
                _REFUSED[name](value)
        except ValueError as exc:
            # The value is shown to say what is wrong, unless it may be a secret.
            shown = name in SHOWN_PARAMETERS and str(exc).startswith("must")
            raise ConfigurationError(
                f"{where} {exc}{f', not {value!r}' if shown else ''}"
            ) from None
    return found


#: redis-py connection and pool keywords that Django's builtin backend passes on from its
#: lower-case OPTIONS, and that no OPTIONS name of redoxide's covers: checked as in the query.
POOL_KEYWORDS = frozenset({*_IGNORED, *_REFUSED, "retry"})


def pool_keyword(name: str, value: Any) -> str | None:
    """Check a redis-py keyword (POOL_KEYWORDS) given as a Python value in OPTIONS, as the
    builtin backend hands it to redis-py's pool; return why it is refused, or None (ignored:
    docs/options.md says what redoxide does instead)."""
    if value is None or name in ("retry", "socket_keepalive_options"):
        return None  # redis-py's default; a Retry object, the TCP keepalive tuning: ignored
    if name == "retry_on_error" and isinstance(value, (list, tuple)):
        return None  # exception classes: ignored
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, str)):
        text = str(value)
    else:
        return f"must be a number, a string or True/False, not {type(value).__name__}"
    try:
        (_IGNORED.get(name) or _REFUSED[name])(text)
    except ValueError as exc:
        shown = name in SHOWN_PARAMETERS and str(exc).startswith("must")
        return f"{exc}, not {value!r}" if shown else str(exc)
    return None
