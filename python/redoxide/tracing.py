"""OpenTelemetry client spans for cache calls (``OPTIONS["TRACING"] = True``).

APM tools see Redis traffic by patching redis-py, which redoxide does not use; this module is
how they see it instead. A cache with TRACING gets a traced subclass of its class (made once
per class): each public cache method, sync and async, runs inside one client span named after
its Redis command, with OpenTelemetry's database conventions:

    db.system / db.system.name   "redis"
    db.operation / db.operation.name   "GET", "SET", "MGET"... (the method's name when it sends
                                 several commands: "get_or_set", "incr")
    db.namespace                 the database number, "0"
    server.address, server.port  the first server of LOCATION (a router's seed)
    db.query.text                "GET <key>", only with OPTIONS["TRACING_KEYS"] = True: keys
                                 can be personal data, so they are never recorded otherwise
    error.type, db.response.status_code   on failure (the exception class; the reply's code)

A cache without TRACING keeps its own class: no check, no wrapper, nothing on its calls. Spans
are started with the current span as parent but not made current themselves (nothing runs
under them), which keeps their cost to creating and ending one span. Needs ``opentelemetry-api``
(``pip install redoxide[otel]``); an SDK and exporter are the application's to configure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from redoxide.exceptions import ConfigurationError

__all__ = ["METHODS", "adopt", "traced_class"]

#: The traced methods (each with its async twin, "a" + name) and the command they stand for.
METHODS: dict[str, str] = {
    "get": "GET",
    "set": "SET",
    "add": "SET",
    "get_many": "MGET",
    "set_many": "MSET",
    "delete": "DEL",
    "delete_many": "DEL",
    "has_key": "EXISTS",
    "touch": "PEXPIRE",
    "clear": "FLUSHDB",
    "incr": "incr",
    "decr": "decr",
    "get_or_set": "get_or_set",
    "incr_version": "incr_version",
    "decr_version": "decr_version",
    "ttl": "TTL",
    "pttl": "PTTL",
    "expire": "EXPIRE",
    "persist": "PERSIST",
    "delete_pattern": "delete_pattern",
}
# Methods whose first argument is one key (recorded with TRACING_KEYS).
_ONE_KEY = frozenset(METHODS) - {"get_many", "set_many", "delete_many", "clear", "delete_pattern"}

_classes: dict[type[Any], type[Any]] = {}


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigurationError(
            "redoxide: OPTIONS['TRACING'] needs the OpenTelemetry API: pip install 'redoxide[otel]'"
        ) from None
    return trace


def _attributes(cache: Any) -> dict[str, dict[str, Any]]:
    """The fixed attributes of each method's spans, worked out once per configuration."""
    config = cache._config
    url = urlsplit(config.servers.urls[0])
    base: dict[str, Any] = {"db.system": "redis", "db.system.name": "redis"}
    base["db.namespace"] = str(
        config.servers.db if config.servers.db is not None else _path_db(url.path)
    )
    if url.hostname and config.servers.topology != "sentinel":
        base["server.address"] = url.hostname
        base["server.port"] = url.port or 6379
    elif url.scheme == "unix":
        base["server.address"] = url.path
    out = {}
    for method, op in METHODS.items():
        out[method] = {**base, "db.operation": op, "db.operation.name": op}
    return out


def _path_db(path: str) -> int:
    db = path.strip("/")
    return int(db) if db.isdigit() else 0


def adopt(cache: Any) -> None:
    """Give a cache with TRACING its traced class (and its span attributes, once)."""
    if "_span_attributes" not in cache.__dict__:
        cache._span_attributes = _attributes(cache)
        cache._tracer = _api().get_tracer("redoxide")
    cls = type(cache)
    if not getattr(cls, "_redoxide_traced", False):
        cache.__class__ = traced_class(cls)


def _finish(span: Any, exc: BaseException | None) -> None:
    if exc is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", type(exc).__qualname__)
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            span.set_attribute("db.response.status_code", code)
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
    span.end()


def _start(cache: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    attributes = cache._span_attributes[method]
    if cache._config.behaviour.tracing_keys and method in _ONE_KEY:
        key = args[0] if args else kwargs.get("key")
        version = kwargs.get("version")
        made = cache.make_key(key, version) if key is not None else ""
        attributes = {**attributes, "db.query.text": f"{attributes['db.operation']} {made}"}
    return cache._tracer.start_span(attributes["db.operation"], kind=_CLIENT, attributes=attributes)


#: SpanKind.CLIENT, imported when the first traced class is made.
_CLIENT: Any = None


def _sync(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        span = _start(self, method, args, kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            _finish(span, exc)
            raise
        span.end()
        return result

    return traced


def _async(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        span = _start(self, method, args, kwargs)
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            _finish(span, exc)
            raise
        span.end()
        return result

    return traced


def traced_class(base: type[Any]) -> type[Any]:
    """The subclass of a cache class whose methods run in spans (made once per class)."""
    global _CLIENT
    known = _classes.get(base)
    if known is not None:
        return known
    _CLIENT = _api().SpanKind.CLIENT
    namespace: dict[str, Any] = {"_redoxide_traced": True, "__module__": base.__module__}
    for method in METHODS:
        for name, wrap in ((method, _sync), ("a" + method, _async)):
            original = getattr(base, name, None)
            if callable(original):
                namespace[name] = wrap(method, original)
    cls = type(base.__name__, (base,), namespace)
    cls.__qualname__ = base.__qualname__
    _classes[base] = cls
    return cls
