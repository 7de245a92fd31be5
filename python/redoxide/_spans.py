"""The spans of a traced cache's locks and raw client, and what every span shares: the
tracer and the attributes of a configuration (see redoxide.tracing, which says what makes a
span)."""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Iterable
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

from redoxide import plans
from redoxide._protocols import Topology, owner, primaries, reads_client, spans_primaries
from redoxide.connection import RawClient
from redoxide.exceptions import ConfigurationError
from redoxide.lock import AsyncLock, Lock
from redoxide.topology.calls import keeping_errors
from redoxide.topology.commands import command_name, first_key
from redoxide.topology.kinds import kind_of

__all__ = [
    "DURATION_BUCKETS",
    "LOCK_OPERATIONS",
    "TracedAsyncLock",
    "TracedClient",
    "TracedLock",
    "TracedRawClient",
    "Tracing",
    "api",
    "finish",
    "legacy_names",
]

#: The lock methods that talk to the server, and their operations.
LOCK_OPERATIONS = {
    "acquire": "lock.acquire",
    "release": "lock.release",
    "extend": "lock.extend",
    "locked": "lock.locked",
    "owned": "lock.owned",
}


def api() -> Any:
    """The OpenTelemetry API (opentelemetry.trace), or ConfigurationError saying how to get it."""
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigurationError(
            "redoxide: OPTIONS['TRACING'] needs the OpenTelemetry API: pip install 'redoxide[otel]'"
        ) from None
    return trace


#: db.client.operation.duration's bucket advice: redis-py 8's (redis/observability/config.py,
#: default_operation_duration_buckets), so histograms of both line up bucket for bucket.
DURATION_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
)  # fmt: skip


def legacy_names() -> bool:
    """Whether spans also carry the names that the stable conventions replaced (db.system,
    db.operation): yes unless OTEL_SEMCONV_STABILITY_OPT_IN asks for ``database`` alone
    (``database/dup``, or no ``database`` at all, keeps both, as redoxide always emitted)."""
    wanted = {v.strip() for v in os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}
    return "database" not in wanted or "database/dup" in wanted


class _Instruments:
    """The metric instruments, made once per process on the global MeterProvider (a proxy
    until the application sets one, so a provider set later still receives them)."""

    duration: Any = None
    errors: Any = None

    @classmethod
    def made(cls) -> type[_Instruments]:
        if cls.duration is None:
            from opentelemetry import metrics

            from redoxide import __version__

            meter = metrics.get_meter("redoxide", __version__)
            cls.errors = meter.create_counter(
                "redis.client.errors",
                unit="{error}",
                description="Calls to the server that failed",
            )
            cls.duration = meter.create_histogram(
                "db.client.operation.duration",
                unit="s",
                description="Duration of database client operations",
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
            )
        return cls


def _category(exc: BaseException) -> str:
    """redis.client.errors.category, as redis-py 8 names them."""
    from redoxide.exceptions import CacheTimeout, ConnectionInterrupted, ResponseError

    if isinstance(exc, ResponseError):
        return "server"
    if isinstance(exc, (ConnectionInterrupted, CacheTimeout, ConnectionError, TimeoutError)):
        return "network"
    return "other"


class Tracing:
    """A configuration's tracer and span attributes, shared by its caches, locks and raw
    clients."""

    __slots__ = (
        "_by_operation", "_failed", "_metered", "_reported", "base", "duration", "errors",
        "keys", "kind", "legacy", "metered", "tracer",
    )  # fmt: skip

    def __init__(self, cache: Any) -> None:
        config = cache._config
        url = urlsplit(config.servers.urls[0])
        self.legacy = legacy_names()
        base: dict[str, Any] = {"db.system.name": "redis"}
        if self.legacy:
            base["db.system"] = "redis"
        base["db.namespace"] = str(
            config.servers.db if config.servers.db is not None else _path_db(url.path)
        )
        server: dict[str, Any] = {}
        if url.hostname and kind_of(config).names_server:
            port = url.port or 6379
            server = {"server.address": url.hostname, "server.port": port}
            server |= {"network.peer.address": url.hostname, "network.peer.port": port}
        elif url.scheme == "unix":
            server = {"server.address": url.path, "network.peer.address": url.path}
        base |= server
        self.base = base
        from redoxide import __version__

        # What redis-py 8 puts on its metrics (redis/observability/attributes.py), plus the
        # stable db.system.name: a dashboard of either reads these.
        self.metered: dict[str, Any] = {
            "db.system": "redis",
            "db.system.name": "redis",
            "redis.client.library": f"redoxide:v{__version__}",
            "db.namespace": base["db.namespace"],
            **server,
        }
        self.keys: bool = config.behaviour.tracing_keys
        trace = api()
        self.tracer = trace.get_tracer("redoxide")
        self.kind = trace.SpanKind.CLIENT
        instruments = _Instruments.made()
        self.duration = instruments.duration
        self.errors = instruments.errors
        self._by_operation: dict[str, dict[str, Any]] = {}
        self._metered: dict[str, dict[str, Any]] = {}
        self._failed: dict[tuple[str, type[BaseException], Any], dict[str, Any]] = {}
        self._reported: dict[tuple[type[BaseException], Any], dict[str, Any]] = {}

    def attributes(self, op: str) -> dict[str, Any]:
        """The fixed attributes of an operation's spans (made once per operation)."""
        known = self._by_operation.get(op)
        if known is None:
            known = {**self.base, "db.operation.name": op}
            if self.legacy:
                known["db.operation"] = op
            if len(self._by_operation) < 1024:  # raw commands: names are the caller's
                self._by_operation[op] = known
        return known

    def metric_attributes(self, op: str) -> dict[str, Any]:
        """The attributes of an operation's db.client.operation.duration (made once)."""
        known = self._metered.get(op)
        if known is None:
            known = {**self.metered, "db.operation.name": op}
            if len(self._metered) < 1024:
                self._metered[op] = known
        return known

    def start(self, op: str, text: str | None = None, extra: dict[str, Any] | None = None) -> Any:
        """Start a span of `op` (not made current); `text` is its db.query.text."""
        attributes = self.attributes(op)
        if text is not None or extra:
            attributes = {**attributes, **(extra or {})}
            if text is not None:
                attributes["db.query.text"] = text
        return self.tracer.start_span(op, kind=self.kind, attributes=attributes)

    def record(self, op: str, started: float, exc: BaseException | None = None) -> None:
        """Record a call of `op` begun at perf_counter() `started` in
        db.client.operation.duration (and a failed one in redis.client.errors)."""
        elapsed = perf_counter() - started
        if exc is None:
            self.duration.record(elapsed, self._metered.get(op) or self.metric_attributes(op))
            return
        code = getattr(exc, "code", None)
        key = (op, type(exc), code)
        failed = self._failed.get(key)
        if failed is None:
            reported = self._error_attributes(exc, code)
            failed = {**self.metric_attributes(op), **reported}
            del failed["redis.client.errors.internal"]  # redis-py's duration has none
            if len(self._failed) < 1024:
                self._failed[key] = failed
        self.duration.record(elapsed, failed)
        self.errors.add(1, self._error_attributes(exc, code))

    def _error_attributes(self, exc: BaseException, code: Any) -> dict[str, Any]:
        """redis.client.errors' attributes, as redis-py 8 builds them (made once per error
        class and code)."""
        key = (type(exc), code)
        known = self._reported.get(key)
        if known is None:
            known = {
                **self.metered,
                "error.type": type(exc).__qualname__,
                "db.response.status_code": code if isinstance(code, str) else "error",
                "redis.client.errors.category": _category(exc),
                "redis.client.errors.internal": False,
            }
            known.pop("db.namespace", None)  # redis-py's error counter has none
            if len(self._reported) < 1024:
                self._reported[key] = known
        return known


def _path_db(path: str) -> int:
    db = path.strip("/")
    return int(db) if db.isdigit() else 0


def finish(span: Any, exc: BaseException | None) -> None:
    """End a span; with `exc`, marked failed with the error's class, code and record."""
    if exc is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", type(exc).__qualname__)
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            span.set_attribute("db.response.status_code", code)
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
    span.end()


def _lock_text(lock: Any, op: str) -> str | None:
    return f"{op} {lock.name}" if lock._tracing.keys else None


class TracedLock(Lock):
    """A Lock whose calls to the server each make one span."""

    _tracing: Tracing

    def _spanned(self, method: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        op = LOCK_OPERATIONS[method]
        tracing = self._tracing
        span = tracing.start(op, _lock_text(self, op))
        started = perf_counter()
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            tracing.record(op, started, exc)
            finish(span, exc)
            raise
        tracing.record(op, started)
        span.end()
        return result

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return self._spanned("acquire", super().acquire, *args, **kwargs)  # type: ignore[no-any-return]

    def release(self) -> None:
        self._spanned("release", super().release)

    def extend(self, *args: Any, **kwargs: Any) -> bool:
        return self._spanned("extend", super().extend, *args, **kwargs)  # type: ignore[no-any-return]

    def locked(self) -> bool:
        return self._spanned("locked", super().locked)  # type: ignore[no-any-return]

    def owned(self) -> bool:
        return self._spanned("owned", super().owned)  # type: ignore[no-any-return]


class TracedAsyncLock(AsyncLock):
    """An AsyncLock whose calls to the server each make one span."""

    _tracing: Tracing

    async def _spanned(
        self, method: str, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> Any:
        op = LOCK_OPERATIONS[method]
        tracing = self._tracing
        span = tracing.start(op, _lock_text(self, op))
        started = perf_counter()
        try:
            result = await call(*args, **kwargs)
        except BaseException as exc:
            tracing.record(op, started, exc)
            finish(span, exc)
            raise
        tracing.record(op, started)
        span.end()
        return result

    async def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return await self._spanned("acquire", super().acquire, *args, **kwargs)  # type: ignore[no-any-return]

    async def release(self) -> None:
        await self._spanned("release", super().release)

    async def extend(self, *args: Any, **kwargs: Any) -> bool:
        return await self._spanned("extend", super().extend, *args, **kwargs)  # type: ignore[no-any-return]

    async def locked(self) -> bool:
        return await self._spanned("locked", super().locked)  # type: ignore[no-any-return]

    async def owned(self) -> bool:
        return await self._spanned("owned", super().owned)  # type: ignore[no-any-return]


# -- the raw client ---------------------------------------------------------------------------


def _command_text(command: Any) -> str:
    """A command as db.query.text records it: its name and its first key (never a value)."""
    if not command:
        return ""
    name = command_name(command)
    key = first_key(command)
    if key is None:
        return name
    return f"{name} {_text(key)}"


def _text(key: Any) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else str(key)


def _keys_text(op: str, keys: list[Any]) -> str:
    return " ".join([op, *map(_text, keys)])


class TracedClient(Topology):
    """The client a traced cache's raw client runs on: each command one span, a pipeline
    one span, over the cache's own client (whatever its topology)."""

    __slots__ = ("_inner", "_tracing")

    def __init__(self, inner: Any, tracing: Tracing) -> None:
        self._inner = inner
        self._tracing = tracing

    def _call(
        self,
        op: str,
        text: Callable[[], str | None],
        send: Callable[..., Any],
        args: tuple[Any, ...],
        bridge: Any,
        extra: dict[str, Any] | None = None,
    ) -> Any:
        if bridge is not None:
            return self._awaited(op, text, send, args, bridge, extra)
        tracing = self._tracing
        span = tracing.start(op, text() if tracing.keys else None, extra)
        started = perf_counter()
        try:
            reply = send(*args)
        except BaseException as exc:
            tracing.record(op, started, exc)
            finish(span, exc)
            raise
        tracing.record(op, started)
        span.end()
        return reply

    async def _awaited(
        self,
        op: str,
        text: Callable[[], str | None],
        send: Callable[..., Any],
        args: tuple[Any, ...],
        bridge: Any,
        extra: dict[str, Any] | None,
    ) -> Any:
        tracing = self._tracing
        span = tracing.start(op, text() if tracing.keys else None, extra)
        started = perf_counter()
        try:
            reply = await send(*args, bridge)
        except BaseException as exc:
            tracing.record(op, started, exc)
            finish(span, exc)
            raise
        tracing.record(op, started)
        span.end()
        return reply

    def get(self, key: Any, bridge: Any = None) -> Any:
        return self._call("GET", lambda: f"GET {_text(key)}", self._inner.get, (key,), bridge)

    def set(
        self,
        key: Any,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Any = None,
    ) -> Any:
        args = (key, value, ttl_ms, nx, xx)
        return self._call("SET", lambda: f"SET {_text(key)}", self._inner.set, args, bridge)

    def mget(self, keys: Iterable[Any], bridge: Any = None) -> Any:
        keys = list(keys)
        text = functools.partial(_keys_text, "MGET", keys)
        return self._call("MGET", text, self._inner.mget, (keys,), bridge)

    def set_many(
        self,
        keys: Iterable[Any],
        values: Iterable[bytes],
        ttl_ms: int | None = None,
        bridge: Any = None,
    ) -> Any:
        keys = list(keys)
        args = (keys, values, ttl_ms)
        text = functools.partial(_keys_text, "MSET", keys)
        return self._call("MSET", text, self._inner.set_many, args, bridge)

    def execute(self, args: Any, bridge: Any = None) -> Any:
        op = command_name(args) if args else "?"  # no command: the client says what is wrong
        return self._call(op, lambda: _command_text(args), self._inner.execute, (args,), bridge)

    def pipeline(self, commands: Iterable[Any], bridge: Any = None) -> Any:
        return self._batch(commands, self._inner.pipeline, bridge)

    def pipeline_results(self, commands: Iterable[Any], bridge: Any = None) -> Any:
        """The inner client's pipeline that returns error replies in their places (a
        transaction's refusal raising inside the span, as from ``pipeline``)."""
        return self._batch(commands, keeping_errors(self._inner), bridge)

    def _batch(self, commands: Iterable[Any], send: Callable[..., Any], bridge: Any) -> Any:
        commands = [tuple(command) for command in commands]
        names = [command_name(command) if command else "?" for command in commands]
        op, queued = "PIPELINE", len(names)
        if names[:1] == ["MULTI"] and names[-1:] == ["EXEC"] and queued >= 2:
            op, queued = "MULTI", queued - 2  # a transaction: its own commands are the batch
        extra = None
        if queued == 1 and op == "PIPELINE":
            op = names[0]  # one command is no batch (the conventions' rule)
        elif queued != 1:
            extra = {"db.operation.batch.size": queued}

        def text() -> str:
            return "\n".join(_command_text(command) for command in commands)

        return self._call(op, text, send, (commands,), bridge, extra)

    # -- what the cache asks beyond commands: the inner client's answers, traced ---------------

    @property
    def spans_primaries(self) -> bool:
        return spans_primaries(self._inner)

    def scan_nodes(self, bridge: Any = None) -> Any:
        found = self._inner.scan_nodes(bridge)
        if bridge is None:
            return [TracedClient(node, self._tracing) for node in found]
        return plans.then(found, lambda nodes: [TracedClient(n, self._tracing) for n in nodes])

    def replica_reads(self) -> Any:
        return TracedClient(reads_client(self._inner), self._tracing)

    def primaries(self) -> Any:
        return primaries(self._inner)

    def owner(self, key: str) -> Any:
        return owner(self._inner, key)


class TracedRawClient(RawClient):
    """``cache.client`` of a traced cache: the same raw client, on the traced client."""

    __slots__ = ()

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._client = cache._traced_client
