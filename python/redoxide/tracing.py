"""OpenTelemetry client spans for cache calls (``OPTIONS["TRACING"] = True``).

APM tools see Redis traffic by patching redis-py, which redoxide does not use; this module is
how they see it instead. A cache with TRACING gets a traced subclass of its class (made once
per class). What makes one span:

- every public cache method that talks to the server, sync and async: every public method of
  RedisCache and its mixins but those in LOCAL (worked out from the class, so a new method is
  traced without a list to update). Its operation is the command it sends, named like the
  method (``lpush`` -> LPUSH, ``get_many`` -> MGET), or the method's name when it sends another
  command or several (``get_or_set``, ``incr``, ``delete_pattern``; see _NAMED);
- an iteration of ``iter_keys`` / ``sscan_iter`` (and their async twins): one span from the
  first item asked for until the iterator is exhausted, fails or is closed (a ``break`` closes
  it), whatever the number of SCAN pages;
- each ``acquire``, ``release``, ``extend`` (and ``reacquire``), ``locked`` and ``owned`` of a
  lock from ``cache.lock()`` / ``cache.alock()``: "lock.acquire", "lock.release"...;
- each command of the raw client (``cache.client.execute``, ``get_client()``,
  ``get_redis_connection()``): its command name, as redis-py's instrumentation names them, a
  ``scan_iter`` page included (one SCAN each); a pipeline is one span, "PIPELINE" (a
  transaction's: "MULTI") with ``db.operation.batch.size``, or its command's name when it holds
  one command.

Attributes, OpenTelemetry's database conventions (the Redis page: the span is named after the
operation alone, never "GET 0"):

    db.system.name               "redis"
    db.operation.name            the operation above (also the span's name)
    db.namespace                 the database number, "0"
    server.address, server.port  the first server of LOCATION (a router's seed)
    network.peer.address, network.peer.port   the same (as redis-py 8 records them)
    db.query.text                only with OPTIONS["TRACING_KEYS"] = True: the operation and
                                 the key it names ("GET <key>"; a raw command's first key; a
                                 pipeline's commands one a line): keys can be personal data, so
                                 they are never recorded otherwise, and values never are
    db.operation.batch.size      a pipeline's number of commands
    error.type, db.response.status_code   on failure (the exception class; the reply's code)
    db.system, db.operation      the names the stable ones replaced, kept alongside unless
                                 OTEL_SEMCONV_STABILITY_OPT_IN lists "database" (without
                                 "database/dup")

Each span's operation is also recorded, as redis-py 8 records its commands, in the
``db.client.operation.duration`` histogram (seconds, redis-py's bucket advice) and, when it
fails, the ``redis.client.errors`` counter, on the global MeterProvider (nothing is kept without
one); see _spans.Tracing.record.

A cache without TRACING keeps its own class: no check, no wrapper, nothing on its calls. Spans
are started with the current span as parent but not made current themselves (nothing runs
under them), which keeps their cost to creating and ending one span. Needs ``opentelemetry-api``
(``pip install redoxide[otel]``); an SDK and exporter are the application's to configure.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from time import perf_counter
from typing import Any

from redoxide._spans import (
    TracedAsyncLock,
    TracedClient,
    TracedLock,
    TracedRawClient,
    Tracing,
    api,
    finish,
)
from redoxide.connection import RawClient

__all__ = ["LOCAL", "METHODS", "adopt", "operation", "traced_class", "traced_methods"]

#: Public cache methods that never talk to the server: no span. (lock() and alock() hand out
#: locks whose calls make spans.)
LOCAL = frozenset(
    {
        "close", "aclose", "client", "lock", "alock", "make_key", "make_and_validate_key",
        "validate_key", "get_backend_timeout", "stats", "reset_stats", "near_cache_stats",
    }
)  # fmt: skip

#: The methods whose operation is not their name upper-cased: those that send another command
#: (add is a SET, touch a PEXPIRE) and those that send several or a varying one (named as
#: themselves, in lower case, so they read as methods and not as commands).
_NAMED: dict[str, str] = {
    "add": "SET",
    "get_many": "MGET",
    "set_many": "MSET",
    "delete": "DEL",
    "delete_many": "DEL",
    "has_key": "EXISTS",
    "touch": "PEXPIRE",
    "clear": "FLUSHDB",
    "expire_at": "EXPIREAT",
    "pexpire_at": "PEXPIREAT",
    "incr": "incr",
    "decr": "decr",
    "get_or_set": "get_or_set",
    "incr_version": "incr_version",
    "decr_version": "decr_version",
    "delete_pattern": "delete_pattern",
    "keys": "keys",
    "iter_keys": "iter_keys",
    "sscan_iter": "sscan_iter",
}

# The parameter names under which a method takes the one key it acts on first.
_KEY_PARAMETERS = frozenset({"key", "src", "source", "dest", "destination"})


def operation(method: str) -> str:
    """The operation (span name, ``db.operation.name``) of a cache method's spans."""
    return _NAMED.get(method) or method.upper()


#: Django's cache API and django-redis' classic extras, with their operations: what this
#: table held when only these were traced, kept for code that reads it. Every method that
#: talks to the server is traced now: see traced_methods().
METHODS: dict[str, str] = {
    name: operation(name)
    for name in (
        "get", "set", "add", "get_many", "set_many", "delete", "delete_many", "has_key",
        "touch", "clear", "incr", "decr", "get_or_set", "incr_version", "decr_version", "ttl",
        "pttl", "expire", "persist", "delete_pattern",
    )
}  # fmt: skip

_classes: dict[type[Any], type[Any]] = {}
_methods: dict[type[Any], dict[str, str]] = {}


def traced_methods(cls: type[Any]) -> dict[str, str]:
    """Every public method of `cls` that redoxide defines and that talks to the server, async
    twins included, with the sync name whose operation its spans carry."""
    known = _methods.get(cls)
    if known is not None:
        return known
    names = {
        name
        for klass in cls.__mro__
        if klass.__module__.startswith("redoxide.")
        for name, value in vars(klass).items()
        if not name.startswith("_") and callable(value) and name not in LOCAL
    }
    found = {}
    for name in sorted(names):
        twin = name[1:] if name.startswith("a") and name[1:] in names else name
        found[name] = twin
    _methods[cls] = found
    return found


def adopt(cache: Any) -> None:
    """Give a cache with TRACING its traced class (and its span attributes, once)."""
    cls = type(cache)
    if "_span_attributes" not in cache.__dict__:
        tracing = Tracing(cache)
        cache._tracing = tracing
        cache._tracer = tracing.tracer
        clear = "clear" if cache._config.behaviour.clear_prefix_only else operation("clear")
        cache._span_attributes = {
            method: tracing.attributes(clear if method == "clear" else operation(method))
            for method in set(traced_methods(cls).values())
        }
        cache._traced_client = TracedClient(cache._client, tracing)
    if not getattr(cls, "_redoxide_traced", False):
        cache.__class__ = traced_class(cls)


#: Where a method takes its key: (position after self, parameter name, position of version or
#: -1 when it is keyword-only); None for methods that take no single key first.
_Where = tuple[int, str, int] | None


def _where(function: Callable[..., Any]) -> _Where:
    try:
        parameters = list(inspect.signature(function).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    if not parameters or parameters[0].name not in _KEY_PARAMETERS:
        return None
    version = -1
    for i, parameter in enumerate(parameters):
        if parameter.name == "version" and parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
            version = i
    return 0, parameters[0].name, version


def _start(
    cache: Any, method: str, where: _Where, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    attributes = cache._span_attributes[method]
    op = attributes["db.operation.name"]
    if where is not None and cache._config.behaviour.tracing_keys:
        position, name, at = where
        key = args[position] if len(args) > position else kwargs.get(name)
        version = args[at] if 0 <= at < len(args) else kwargs.get("version")
        made = cache.make_key(key, version) if key is not None else ""
        attributes = {**attributes, "db.query.text": f"{op} {made}"}
    return cache._tracer.start_span(op, kind=_CLIENT, attributes=attributes)


def _record(cache: Any, method: str, started: float, exc: BaseException | None = None) -> None:
    cache._tracing.record(cache._span_attributes[method]["db.operation.name"], started, exc)


#: SpanKind.CLIENT, imported when the first traced class is made.
_CLIENT: Any = None


def _sync(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    where = _where(original)

    @functools.wraps(original)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        span = _start(self, method, where, args, kwargs)
        started = perf_counter()
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            _record(self, method, started, exc)
            finish(span, exc)
            raise
        _record(self, method, started)
        span.end()
        return result

    return traced


def _async(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    where = _where(original)

    @functools.wraps(original)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        span = _start(self, method, where, args, kwargs)
        started = perf_counter()
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            _record(self, method, started, exc)
            finish(span, exc)
            raise
        _record(self, method, started)
        span.end()
        return result

    return traced


def _iterator(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    where = _where(original)

    @functools.wraps(original)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        span = _start(self, method, where, args, kwargs)
        started = perf_counter()
        try:
            yield from original(self, *args, **kwargs)
        except GeneratorExit:  # closed before the end: not a failure
            _record(self, method, started)
            span.end()
            raise
        except BaseException as exc:
            _record(self, method, started, exc)
            finish(span, exc)
            raise
        _record(self, method, started)
        span.end()

    return traced


def _async_iterator(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    where = _where(original)

    @functools.wraps(original)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        span = _start(self, method, where, args, kwargs)
        started = perf_counter()
        inner = original(self, *args, **kwargs)
        try:
            async for item in inner:
                yield item
        except GeneratorExit:  # closed before the end: not a failure
            _record(self, method, started)
            span.end()
            raise
        except BaseException as exc:
            _record(self, method, started, exc)
            finish(span, exc)
            raise
        else:
            _record(self, method, started)
            span.end()
        finally:
            await inner.aclose()

    return traced


def _wrapper(original: Callable[..., Any]) -> Callable[[str, Callable[..., Any]], Any]:
    if inspect.isasyncgenfunction(original):
        return _async_iterator
    if inspect.isgeneratorfunction(original):
        return _iterator
    if inspect.iscoroutinefunction(original):
        return _async
    return _sync


def traced_class(base: type[Any]) -> type[Any]:
    """The subclass of a cache class whose methods run in spans (made once per class)."""
    global _CLIENT
    known = _classes.get(base)
    if known is not None:
        return known
    _CLIENT = api().SpanKind.CLIENT
    namespace: dict[str, Any] = {
        "_redoxide_traced": True,
        "__module__": base.__module__,
        "client": property(TracedRawClient, doc=RawClient.__doc__),
        "lock": _lock_maker(base.lock, TracedLock),
        "alock": _lock_maker(base.alock, TracedAsyncLock),
    }
    for name, method in traced_methods(base).items():
        original = getattr(base, name)
        namespace[name] = _wrapper(original)(method, original)
    cls = type(base.__name__, (base,), namespace)
    cls.__qualname__ = base.__qualname__
    _classes[base] = cls
    return cls


# -- locks ------------------------------------------------------------------------------------


def _lock_maker(original: Callable[..., Any], traced: type[Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def lock(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        made.__class__ = traced  # the same lock, whose calls make spans
        made._tracing = self._tracing
        return made

    return lock
