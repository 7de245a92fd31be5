"""Django system checks of the redoxide caches in CACHES (registered by redoxide.apps when
"redoxide" is in INSTALLED_APPS).

- ``manage.py check`` (tags ``redoxide``, ``caches``): every redoxide cache's LOCATION and
  OPTIONS, judged by the parser construction uses, so a check reports exactly what
  building the cache would refuse (E001-E004), a CLEAR_PREFIX_ONLY that clear() cannot
  keep (E005), and a SERIALIZER that writes a digit string as the raw digits a read takes
  for an int, with no COMPRESSOR to store it compressed (W007).
- ``manage.py check --deploy``: settings that are risky in production (W001-W008).
- ``manage.py check --tag redoxide_connectivity``: every node of every redoxide cache answers
  PING within the cache's timeouts (E010, E011), and runs Lua scripts for the configured user,
  or what follows where it does not (W009). Like Django's database checks, which need
  ``--database``, it never runs unless asked: not before runserver or migrate, nor in a plain
  ``check``. redoxide's ``check`` command (Django's, extended) tells it when the tag is asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.core.cache.backends.base import default_key_func, get_key_func
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from redoxide._location import parse_location, place, query_db
from redoxide._name_shapes import _SHAPE_KEYS, NameMatcher, name_matcher, shared_name
from redoxide._offers import consequences, refused
from redoxide.cache import RedisCache
from redoxide.exceptions import CacheError, EncodingError, ResponseError
from redoxide.options import Config, _names, parse_config
from redoxide.serializers import PickleSerializer
from redoxide.topology.kinds import kind_of

__all__ = [
    "CONNECTIVITY",
    "TAG",
    "backend_class",
    "check_configuration",
    "check_connectivity",
    "check_deployment",
    "configuration_errors",
    "connectivity_asked",
    "redoxide_caches",
    "valid_configs",
]

#: The tag of every redoxide check but the connectivity one.
TAG = "redoxide"
#: The tag that asks for the connectivity check.
CONNECTIVITY = "redoxide_connectivity"

_HINTS = {
    "E001": "LOCATION is a redis://, rediss://, valkey:// or unix:// URL, or a list of them "
    "(the first is the primary).",
    "E002": "See redoxide's docs/options.md for the accepted names.",
    "E003": "Fix the value the message names.",
    "E004": "Django could not build this cache from its settings.",
    "E005": "Keep KEY_PREFIX outside whatever KEY_FUNCTION hashes (e.g. "
    '"{prefix}:{version}:" + hash), or give the cache a database of its own and drop '
    "CLEAR_PREFIX_ONLY.",
    "E010": "Check that the server runs and that this host may reach it; SOCKET_TIMEOUT and "
    "SOCKET_CONNECT_TIMEOUT bound each attempt.",
    "E011": "Check the SENTINELS addresses or the cluster's seed LOCATION.",
    "W001": "Anyone who can write to the server can make every worker run code. Require a "
    "password (requirepass or an ACL user), use rediss://, or set SIGN_VALUES or a JSON "
    "SERIALIZER.",
    "W002": 'Remove SSL_CERT_REQS "none" and trust the server\'s CA with SSL_CA_CERTS.',
    "W003": "Remove SSL_CHECK_HOSTNAME False, or give the server a certificate for its name.",
    "W004": "Set LOG_IGNORED_EXCEPTIONS True so that an outage leaves a trace in the logs.",
    "W005": "Set CLEAR_PREFIX_ONLY True (clear() then deletes only this cache's keys), or "
    "give each cache a database of its own.",
    "W006": 'Give each cache a KEY_PREFIX that no other\'s names can start with ("site" and '
    '"sessions", not "site" and "site:1"), or a database of its own.',
    "W007": "Ints are stored as raw digits (as Django and django-redis store them) and raw "
    "digits are read as an int before the serializer is asked. Make the serializer write such "
    "values in a form of its own (a prefix, quotes), as pickle, JSON and MessagePack do, or "
    "set a COMPRESSOR (such values are then stored compressed).",
    "W009": "Grant the ACL user +@scripting (on Valkey 9.1, load its lua module too), or use a "
    "server with script-free ways: Valkey 8.1+ (SET IFEQ; DELIFEQ from 9.0) or Redis 8.4+ "
    "(SET IFEQ, DELEX).",
    "W008": "Keep the version in the names KEY_FUNCTION makes, apart from the key (e.g. "
    '"{prefix}:{version}:" + hash of the key), or give the cache a database or a KEY_PREFIX '
    "no other writer uses.",
}


def _error(code: str, alias: str, message: str) -> Error:
    return Error(f"CACHES[{alias!r}]: {message}", hint=_HINTS[code], id=f"{TAG}.{code}")


def _warning(code: str, alias: str, message: str) -> Warning:
    return Warning(f"CACHES[{alias!r}]: {message}", hint=_HINTS[code], id=f"{TAG}.{code}")


def _reason(exc: BaseException) -> str:
    return str(exc).removeprefix("redoxide: ")


def _caches() -> dict[str, Any]:
    from django.conf import settings

    caches = getattr(settings, "CACHES", {})
    return caches if isinstance(caches, dict) else {}


def backend_class(path: Any) -> type[RedisCache] | None:
    """The class of a redoxide BACKEND; None for any other backend. A path in the redoxide
    package that does not import raises ImportError."""
    if not isinstance(path, str):
        return None
    try:
        cls = import_string(path)
    except ImportError:
        if path.startswith("redoxide."):
            raise
        return None
    return cls if isinstance(cls, type) and issubclass(cls, RedisCache) else None


def redoxide_caches() -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (alias, settings) of each cache in CACHES whose BACKEND is redoxide's (or a
    subclass), including those whose BACKEND path is redoxide's but does not import."""
    for alias, entry in _caches().items():
        if not isinstance(entry, dict):
            continue
        try:
            if backend_class(entry.get("BACKEND")) is None:
                continue
        except ImportError:
            pass
        yield alias, entry


def configuration_errors(alias: str, entry: dict[str, Any]) -> list[CheckMessage]:
    """What building this cache would refuse, as check messages (empty: it builds)."""
    try:
        cls = backend_class(entry.get("BACKEND"))
    except ImportError as exc:
        return [
            _error("E004", alias, f"BACKEND {entry.get('BACKEND')!r} cannot be imported: {exc}")
        ]
    location, options = entry.get("LOCATION", ""), entry.get("OPTIONS")
    stages = (
        ("E001", lambda: [query_db(url) for url in parse_location(location)]),
        ("E002", lambda: _names(options)),
        ("E003", lambda: parse_config(location, options)),
        ("E004", lambda: _build(cls, entry)),
    )
    for code, stage in stages:
        try:
            stage()
        except (ImproperlyConfigured, ImportError, TypeError, ValueError) as exc:
            return [_error(code, alias, _reason(exc))]
    return []


def _build(cls: Any, entry: dict[str, Any]) -> Any:
    """Build the cache as Django's cache handler does (no connection is made)."""
    params = {k: v for k, v in entry.items() if k not in ("BACKEND", "LOCATION")}
    cache = cls(entry.get("LOCATION", ""), params)
    error = cache.__dict__.get("_config_error")
    if error is not None:  # built unusable: its calls would raise this
        raise error
    return cache


def valid_configs() -> Iterator[tuple[str, Config]]:
    """Yield (alias, configuration) of each redoxide cache that builds."""
    for alias, entry in redoxide_caches():
        if not configuration_errors(alias, entry):
            yield alias, parse_config(entry.get("LOCATION", ""), entry.get("OPTIONS"))


def check_configuration(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Check every redoxide cache's LOCATION and OPTIONS."""
    messages: list[CheckMessage] = []
    for alias, entry in redoxide_caches():
        errors = configuration_errors(alias, entry)
        messages.extend(errors)
        if not errors:
            messages.extend(_clear_prefix_errors(alias, entry))
            messages.extend(_digit_string_warnings(alias, entry))
    return messages


#: Values whose serialized form a serializer may leave as raw digits.
_DIGIT_PROBES: tuple[Any, ...] = ("0042", "42", "-7", b"42")


def _digit_string_warnings(alias: str, entry: dict[str, Any]) -> list[CheckMessage]:
    """A SERIALIZER (or COMPRESSOR) whose output for some value is raw digits that a read
    takes for an int: set() of such a value raises EncodingError (W007)."""
    cache = _build(backend_class(entry.get("BACKEND")), entry)
    if not cache._check_encoded:  # redoxide's own codecs: never ambiguous
        return []
    refused = []
    for probe in _DIGIT_PROBES:
        try:
            cache._encode(probe)
        except EncodingError:
            refused.append(probe)
        except Exception:  # a value the serializer cannot write at all: not this check's
            continue
    if not refused:
        return []
    serializer = type(cache._serializer).__name__
    shown = ", ".join(repr(p) for p in refused)
    message = (
        f"SERIALIZER {serializer} writes {shown} as raw digits, which a read would take for "
        "an int: storing such a value raises EncodingError (nothing is written)."
    )
    return [_warning("W007", alias, message)]


def _clear_prefix_errors(alias: str, entry: dict[str, Any]) -> list[CheckMessage]:
    """CLEAR_PREFIX_ONLY with a KEY_FUNCTION whose names clear() cannot find (E005)."""
    config = parse_config(entry.get("LOCATION", ""), entry.get("OPTIONS"))
    if not config.behaviour.clear_prefix_only:
        return []
    key_func = get_key_func(entry.get("KEY_FUNCTION"))
    prefix, version = str(entry.get("KEY_PREFIX", "")), entry.get("VERSION", 1)
    if key_func is default_key_func or name_matcher(key_func, prefix, version) is not None:
        return []
    message = (
        "CLEAR_PREFIX_ONLY cannot find this cache's keys: the names KEY_FUNCTION makes share "
        f"no fixed part holding KEY_PREFIX {prefix!r}, so clear() raises instead of deleting."
    )
    return [_error("E005", alias, message)]


# -- deployment ------------------------------------------------------------------------------


def _tls(config: Config) -> bool:
    return all(urlsplit(url).scheme in ("rediss", "valkeys") for url in config.servers.urls)


def _other_databases(entry: Any) -> set[tuple[Any, ...]]:
    """Where another (non-redoxide) Redis cache's keys live, if its LOCATION says."""
    if not isinstance(entry, dict):
        return set()
    options = entry.get("OPTIONS")
    db = options.get("DB", options.get("db")) if isinstance(options, dict) else None
    try:
        urls = parse_location(entry.get("LOCATION", ""))
        return {place(url, db if isinstance(db, int) else None) for url in urls}
    except (ImproperlyConfigured, ValueError):
        return set()


def _deployment_warnings(alias: str, config: Config) -> Iterator[Warning]:
    tls = dict(config.connection.tls)
    pickled = isinstance(config.values.serializer, PickleSerializer)
    authenticated = (
        config.connection.password is not None or config.connection.credential_provider is not None
    )
    if pickled and not authenticated and not _tls(config):
        yield _warning(
            "W001",
            alias,
            "values are pickled, and the server needs neither a password nor TLS.",
        )
    if tls.get("tls_verify") is False:
        yield _warning("W002", alias, "the server's TLS certificate is not verified.")
    elif tls.get("tls_check_hostname") is False:
        yield _warning("W003", alias, "the server's TLS certificate need not name its host.")
    if (
        config.errors.ignore_exceptions
        and not config.errors.log_ignored_exceptions
        and config.errors.exception_handler is None
    ):
        yield _warning(
            "W004", alias, "IGNORE_EXCEPTIONS turns errors into misses, and none is logged."
        )


def _shared_database_warnings(configs: list[tuple[str, Config]]) -> Iterator[Warning]:
    places = {alias: kind_of(config).databases(config) for alias, config in configs}
    ours = set(places)
    for alias, entry in _caches().items():
        if alias not in ours:
            places[alias] = _other_databases(entry)
    for alias, config in configs:
        if config.behaviour.clear_prefix_only:
            continue
        sharing = sorted(
            other for other in places if other != alias and places[other] & places[alias]
        )
        if sharing:
            names = ", ".join(f"CACHES[{other!r}]" for other in sharing)
            yield _warning(
                "W005",
                alias,
                f"shares its database with {names}, and its clear() runs FLUSHDB, "
                "which deletes their keys too.",
            )


def _matcher_of(entry: Any, clearing: bool) -> NameMatcher | None:
    """The names a cache in CACHES makes (clearing: what its clear() deletes); None if its
    key function does not import or fails."""
    try:
        key_func = get_key_func(entry.get("KEY_FUNCTION"))
    except ImportError:
        return None
    prefix, version = str(entry.get("KEY_PREFIX", "")), entry.get("VERSION", 1)
    return name_matcher(key_func, prefix, version, refuse=clearing)


def _probed_name(mine: NameMatcher, entry: Any) -> str | None:
    """A name another cache makes (its key function, with probe keys) that mine takes."""
    key_func = get_key_func(entry.get("KEY_FUNCTION"))
    prefix, version = str(entry.get("KEY_PREFIX", "")), entry.get("VERSION", 1)
    for v in dict.fromkeys((version, 1, 2)):
        for key in _SHAPE_KEYS:
            try:
                name = key_func(key, prefix, v)
            except Exception:
                break
            if isinstance(name, str) and mine(name):
                return name
    return None


def unversioned_clear(alias: str) -> str | None:
    """The glob a CLEAR_PREFIX_ONLY clear() deletes when the cache's names hold no version
    apart from the key (redoxide.W008): every name of it may be the cache's, so a key another
    writer puts under the prefix goes too. None when the names hold a version, or none found."""
    mine = _matcher_of(_caches().get(alias), clearing=True)
    return None if mine is None or mine.versioned else mine.glob


def _unversioned_warnings(configs: list[tuple[str, Config]]) -> Iterator[Warning]:
    for alias, config in configs:
        glob = unversioned_clear(alias) if config.behaviour.clear_prefix_only else None
        if glob is not None:
            yield _warning(
                "W008",
                alias,
                f"its clear() (CLEAR_PREFIX_ONLY) deletes every name matching {glob!r}: the "
                "names its KEY_FUNCTION makes hold no version apart from the key, so any name "
                "there may be one of its keys, and keys another writer puts there go too.",
            )


def shared_names(alias: str, clearing: bool) -> list[tuple[str, str, str]]:
    """Other caches in CACHES, on this redoxide cache's database, that make names this one
    takes for its own: (their alias, their names' shape, a name of both), for clear() under
    CLEAR_PREFIX_ONLY (clearing) or for delete_pattern() and keys(), which match one
    version's names (caches that make the very same names are then left out: they are one
    cache's keys under two aliases)."""
    caches = _caches()
    places = {other: _other_databases(entry) for other, entry in caches.items()}
    places.update((other, kind_of(config).databases(config)) for other, config in valid_configs())
    mine = _matcher_of(caches.get(alias), clearing)
    if mine is None or not places.get(alias):
        return []
    found: list[tuple[str, str, str]] = []
    for other, entry in caches.items():
        if other == alias or not places[other] & places[alias]:
            continue
        theirs = _matcher_of(entry, clearing=False)
        if theirs is None or (not clearing and theirs.shape == mine.shape):
            continue
        # A key function that hashes the whole name: its shape says nothing, its names may.
        name = shared_name(mine, theirs) if theirs.literal else _probed_name(mine, entry)
        if name is not None:
            found.append((other, theirs.example(), name))
    return found


def _shared_name_warnings(configs: list[tuple[str, Config]]) -> Iterator[Warning]:
    for alias, config in configs:
        clearing = config.behaviour.clear_prefix_only
        mine = _matcher_of(_caches().get(alias), clearing)
        for other, shape, name in shared_names(alias, clearing):
            if clearing:
                what = (
                    f"its clear() (CLEAR_PREFIX_ONLY) deletes CACHES[{other!r}]'s keys too: both "
                    f"are in one database, and names of theirs ({shape}) can be of this cache's "
                    f"shape ({mine.example() if mine else '?'}), as {name!r} is"
                )
            else:
                what = (
                    f"its names and CACHES[{other!r}]'s ({shape}), in one database, can be the "
                    f"same, as {name!r} is: delete_pattern() and keys() of one take such keys "
                    "of the other, and a set() of one overwrites them"
                )
            yield _warning("W006", alias, what + ".")


def check_deployment(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Warn about redoxide settings that are risky in production."""
    configs = list(valid_configs())
    messages: list[CheckMessage] = []
    for alias, config in configs:
        messages.extend(_deployment_warnings(alias, config))
    messages.extend(_shared_database_warnings(configs))
    messages.extend(_shared_name_warnings(configs))
    messages.extend(_unversioned_warnings(configs))
    return messages


# -- connectivity ------------------------------------------------------------------------------

_asked: ContextVar[bool] = ContextVar("redoxide_connectivity_asked", default=False)


@contextlib.contextmanager
def connectivity_asked(asked: bool = True) -> Iterator[None]:
    """Let the connectivity check run (it returns nothing otherwise) inside the block."""
    token = _asked.set(asked)
    try:
        yield
    finally:
        _asked.reset(token)


def check_connectivity(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """PING every node of every redoxide cache, when asked (see connectivity_asked)."""
    if not _asked.get():
        return []
    from redoxide.topology.survey import probe, survey

    messages: list[CheckMessage] = []
    for alias, entry in redoxide_caches():
        errors = configuration_errors(alias, entry)
        if errors:
            messages.extend(errors)
            continue
        found = survey(parse_config(entry.get("LOCATION", ""), entry.get("OPTIONS")))
        messages.extend(_error("E011", alias, problem) for problem in found.problems)
        for node in found.nodes:
            answer = probe(node, info=False)
            where = f"{node.kind} {node.address}"
            if not answer.ok:
                messages.append(_error("E010", alias, f"{where} did not answer: {answer.error}"))
            elif node.kind != "sentinel":
                refusal = _scripts_refusal(node.client)
                if refusal is not None:
                    text = f"{where} runs no Lua script for the configured user ({refusal}): "
                    messages.append(_warning("W009", alias, text + consequences(node.client) + "."))
    return messages


def _scripts_refusal(client: Any) -> str | None:
    """Why `client`'s server runs no script for it (a trivial one, which changes nothing), or
    None if it does."""
    try:
        client.execute(("EVAL", "return 1", 0))
    except ResponseError as exc:
        if refused(exc):
            return str(exc)
    except CacheError:
        pass  # not an answer about scripts
    return None
