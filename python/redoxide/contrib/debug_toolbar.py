"""A django-debug-toolbar panel: this request's redoxide calls, with their time, hit or miss.

``pip install 'redoxide[debug-toolbar]'``, then add the panel to the toolbar's list::

    DEBUG_TOOLBAR_PANELS = [
        ...,
        "redoxide.contrib.debug_toolbar.RedoxidePanel",
    ]

While the toolbar handles a request, the request's redoxide caches (Django makes them per
thread and per async context, so concurrent requests are not affected) get a recording
subclass of their class; afterwards they get their own class back. Sync and async methods
both are recorded. Keys are shown as the caller passed them (this is a development tool).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

from django.template import Context, Engine

from redoxide._configured import redoxide_caches
from redoxide.tracing import traced_methods

try:
    from debug_toolbar.panels import Panel
except ImportError as exc:  # without the extra
    raise ImportError(
        "redoxide.contrib.debug_toolbar needs django-debug-toolbar: "
        "pip install 'redoxide[debug-toolbar]'"
    ) from exc

__all__ = ["RedoxidePanel"]

_current: contextvars.ContextVar[RedoxidePanel | None] = contextvars.ContextVar(
    "redoxide_debug_toolbar_panel", default=None
)
_classes: dict[type[Any], type[Any]] = {}
_MISSING = object()

_TEMPLATE = """
<p>{{ total_calls }} call{{ total_calls|pluralize }} in {{ total_ms|floatformat:3 }} ms:
{{ hits }} hit{{ hits|pluralize }}, {{ misses }} miss{{ misses|pluralize:"es" }}.</p>
<table>
  <thead><tr><th>Cache</th><th>Call</th><th>Key</th><th>Time (ms)</th><th>Result</th></tr></thead>
  <tbody>
  {% for call in calls %}
    <tr>
      <td>{{ call.alias }}</td><td>{{ call.method }}</td><td>{{ call.key }}</td>
      <td>{{ call.ms|floatformat:3 }}</td><td>{{ call.outcome }}</td>
    </tr>
  {% endfor %}
  </tbody>
</table>
"""


def _outcome(
    method: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> tuple[str, int, int]:
    """What a read found: ("hit" / "miss" / "2 of 3 hit", hits, misses); ("", 0, 0) else."""
    if result is _MISSING:
        return "error", 0, 0
    if method == "get":
        default = args[1] if len(args) > 1 else kwargs.get("default")
        return ("miss", 0, 1) if result is default else ("hit", 1, 0)
    if method == "get_many":
        wanted = len(list(args[0] if args else kwargs.get("keys", ())))
        return f"{len(result)} of {wanted} hit", len(result), wanted - len(result)
    if method == "has_key":
        return ("hit", 1, 0) if result else ("miss", 0, 1)
    return "", 0, 0


def _key(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if method == "clear":
        return ""
    first = args[0] if args else kwargs.get("key", kwargs.get("keys", kwargs.get("data", "")))
    if isinstance(first, dict):
        first = list(first)
    return repr(first) if isinstance(first, (list, tuple)) else str(first)


class _Call:
    """One call being recorded into a panel."""

    __slots__ = ("alias", "args", "kwargs", "method", "name", "panel", "started")

    def __init__(self, panel: RedoxidePanel, cache: Any, method: str, name: str) -> None:
        self.panel, self.method, self.name = panel, method, name
        self.alias = cache.__dict__.get("_redoxide_panel_alias", "")
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}
        self.started = time.perf_counter()

    def finish(self, result: Any) -> None:
        ms = (time.perf_counter() - self.started) * 1000
        outcome, hits, misses = _outcome(self.method, self.args, self.kwargs, result)
        self.panel.calls.append(
            {
                "alias": self.alias,
                "method": self.name,
                "key": _key(self.method, self.args, self.kwargs),
                "ms": ms,
                "outcome": outcome,
                "hits": hits,
                "misses": misses,
            }
        )


def _begin(
    cache: Any, method: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _Call | None:
    panel = _current.get()
    if panel is None:
        return None
    call = _Call(panel, cache, method, name)
    call.args, call.kwargs = args, kwargs
    return call


def _recording_class(base: type[Any]) -> type[Any]:
    """The subclass of a cache class whose methods record into the current panel."""
    known = _classes.get(base)
    if known is not None:
        return known
    namespace: dict[str, Any] = {"__module__": base.__module__, "_redoxide_recorded": True}
    for name, method in traced_methods(base).items():  # every method that talks to the server
        original = getattr(base, name)
        if inspect.isgeneratorfunction(original) or inspect.isasyncgenfunction(original):
            continue  # an iterator's round trips happen while it is read
        wrap = _wrap_async if inspect.iscoroutinefunction(original) else _wrap_sync
        namespace[name] = wrap(method, original)
    cls = type(base.__name__, (base,), namespace)
    cls.__qualname__ = base.__qualname__
    _classes[base] = cls
    return cls


def _wrap_sync(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _begin(self, method, method, args, kwargs)
        if call is None:
            return original(self, *args, **kwargs)
        result: Any = _MISSING
        try:
            result = original(self, *args, **kwargs)
            return result
        finally:
            call.finish(result)

    return recorded


def _wrap_async(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _begin(self, method, "a" + method, args, kwargs)
        if call is None:
            return await original(self, *args, **kwargs)
        result: Any = _MISSING
        try:
            result = await original(self, *args, **kwargs)
            return result
        finally:
            call.finish(result)

    return recorded


class RedoxidePanel(Panel):
    """The redoxide calls of one request."""

    title = "redoxide"
    nav_title = "redoxide"
    is_async = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[dict[str, Any]] = []
        self._patched: list[tuple[Any, type[Any]]] = []
        self._token: contextvars.Token[RedoxidePanel | None] | None = None

    @property
    def nav_subtitle(self) -> str:
        stats = self.get_stats()  # type: ignore[no-untyped-call]
        if not stats:
            return ""
        return f"{stats['total_calls']} calls in {stats['total_ms']:.2f} ms"

    def enable_instrumentation(self) -> None:
        """Record the calls of this request's redoxide caches."""
        for alias, cache in redoxide_caches():
            if not getattr(cache, "_redoxide_recorded", False):
                self._patched.append((cache, type(cache)))
                cache.__dict__["_redoxide_panel_alias"] = alias
                cache.__class__ = _recording_class(type(cache))
        self._token = _current.set(self)

    def disable_instrumentation(self) -> None:
        """Give the caches their own classes back."""
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        for cache, cls in self._patched:
            cache.__class__ = cls
        self._patched.clear()

    def generate_stats(self, request: Any, response: Any) -> None:
        self.record_stats(  # type: ignore[no-untyped-call]
            {
                "calls": self.calls,
                "total_calls": len(self.calls),
                "total_ms": sum(c["ms"] for c in self.calls),
                "hits": sum(c["hits"] for c in self.calls),
                "misses": sum(c["misses"] for c in self.calls),
            }
        )

    @property
    def content(self) -> str:
        # Rendered from a string: the panel needs no template directory or installed app.
        template = _engine().from_string(_TEMPLATE)
        return template.render(Context(self.get_stats()))  # type: ignore[no-untyped-call]


@functools.cache
def _engine() -> Engine:
    return Engine()
