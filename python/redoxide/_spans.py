"""The spans of a traced cache's locks and raw client, and what every span shares: the
tracer and the attributes of a configuration (see redoxide.tracing, which says what makes a
span)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
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
    "LOCK_OPERATIONS",
    "TracedAsyncLock",
    "TracedClient",
    "TracedLock",
    "TracedRawClient",
    "Tracing",
    "api",
    "finish",
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


class Tracing:
    """A configuration's tracer and span attributes, shared by its caches, locks and raw
    clients."""

    __slots__ = ("_by_operation", "base", "keys", "kind", "tracer")

    def __init__(self, cache: Any) -> None:
        config = cache._config
        url = urlsplit(config.servers.urls[0])
        base: dict[str, Any] = {"db.system": "redis", "db.system.name": "redis"}
        base["db.namespace"] = str(
            config.servers.db if config.servers.db is not None else _path_db(url.path)
        )
        if url.hostname and kind_of(config).names_server:
            base["server.address"] = url.hostname
            base["server.port"] = url.port or 6379
        elif url.scheme == "unix":
            base["server.address"] = url.path
        self.base = base
        self.keys: bool = config.behaviour.tracing_keys
        trace = api()
        self.tracer = trace.get_tracer("redoxide")
        self.kind = trace.SpanKind.CLIENT
        self._by_operation: dict[str, dict[str, Any]] = {}

    def attributes(self, op: str) -> dict[str, Any]:
        """The fixed attributes of an operation's spans (made once per operation)."""
        known = self._by_operation.get(op)
        if known is None:
            known = {**self.base, "db.operation": op, "db.operation.name": op}
            if len(self._by_operation) < 1024:  # raw commands: names are the caller's
                self._by_operation[op] = known
        return known

    def start(self, op: str, text: str | None = None, extra: dict[str, Any] | None = None) -> Any:
        """Start a span of `op` (not made current); `text` is its db.query.text."""
        attributes = self.attributes(op)
        if text is not None or extra:
            attributes = {**attributes, **(extra or {})}
            if text is not None:
                attributes["db.query.text"] = text
        return self.tracer.start_span(op, kind=self.kind, attributes=attributes)


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
        span = self._tracing.start(op, _lock_text(self, op))
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            finish(span, exc)
            raise
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
        span = self._tracing.start(op, _lock_text(self, op))
        try:
            result = await call(*args, **kwargs)
        except BaseException as exc:
            finish(span, exc)
            raise
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
        span = self._tracing.start(op, text() if self._tracing.keys else None, extra)
        try:
            reply = send(*args)
        except BaseException as exc:
            finish(span, exc)
            raise
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
        span = self._tracing.start(op, text() if self._tracing.keys else None, extra)
        try:
            reply = await send(*args, bridge)
        except BaseException as exc:
            finish(span, exc)
            raise
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
