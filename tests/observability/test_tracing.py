"""OPTIONS["TRACING"]: one OpenTelemetry client span per cache call, with the database
conventions, captured by the SDK's in-memory exporter; nothing at all without the option."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from redoxide import RedisCache
from redoxide.exceptions import ConnectionInterrupted, ResponseError
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own tracing")

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Yield the exporter of the process' SDK tracer provider (set up once), emptied."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def test_without_the_option_a_cache_is_not_instrumented(redis_server: RedisServer) -> None:
    cache = build_cache(redis_server.url)
    assert type(cache) is RedisCache
    assert type(cache).get is RedisCache.get
    assert "_span_attributes" not in cache.__dict__


def test_each_call_is_one_client_span_with_the_database_conventions(
    make_cache: Any, redis_server: RedisServer, spans: InMemorySpanExporter, mode: str
) -> None:
    cache = make_cache(TRACING=True)
    assert isinstance(cache, RedisCache) and type(cache) is not RedisCache
    ops = Ops(cache, mode)
    ops.set("secret-key", 1)
    assert ops.get("secret-key") == 1
    assert ops.get_many(["secret-key", "other"]) == {"secret-key": 1}
    assert ops.has_key("secret-key")
    assert ops.delete("secret-key")
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["SET", "GET", "MGET", "EXISTS", "DEL"]
    for span in finished:
        attributes = dict(span.attributes or {})
        assert span.kind is SpanKind.CLIENT
        assert attributes["db.system"] == attributes["db.system.name"] == "redis"
        assert attributes["db.operation.name"] == attributes["db.operation"] == span.name
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["server.port"] == redis_server.port
        assert attributes["db.namespace"] == "0"
        assert "db.query.text" not in attributes
        assert not any("secret-key" in str(v) for v in attributes.values())
        assert span.status.status_code is StatusCode.UNSET


def test_the_key_is_recorded_only_when_asked(
    make_cache: Any, spans: InMemorySpanExporter, mode: str
) -> None:
    ops = Ops(make_cache(TRACING=True, TRACING_KEYS=True, KEY_PREFIX="p"), mode)
    ops.get("k", version=3)
    (span,) = spans.get_finished_spans()
    assert dict(span.attributes or {})["db.query.text"] == "GET p:3:k"


def test_spans_nest_under_the_callers_span(make_cache: Any, spans: InMemorySpanExporter) -> None:
    cache = make_cache(TRACING=True)
    with trace.get_tracer("test").start_as_current_span("view") as parent:
        cache.get("k")
    child, outer = spans.get_finished_spans()
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id == outer.context.span_id


def test_a_failed_call_marks_its_span(
    make_cache: Any, redis_server: RedisServer, spans: InMemorySpanExporter, mode: str
) -> None:
    down = Ops(
        build_cache(f"redis://127.0.0.1:{free_port()}/0", {"OPTIONS": {"TRACING": True}}), mode
    )
    with pytest.raises(ConnectionInterrupted):
        down.get("k")
    ops = Ops(make_cache(TRACING=True), mode)
    redis_server.cli("RPUSH", ":1:list", "x")
    with pytest.raises(ResponseError):
        ops.incr("list")
    refused, wrongtype = spans.get_finished_spans()
    assert refused.status.status_code is StatusCode.ERROR
    assert dict(refused.attributes or {})["error.type"] == "ConnectionInterrupted"
    assert [e.name for e in refused.events] == ["exception"]
    attributes = dict(wrongtype.attributes or {})
    assert attributes["error.type"] == "WrongTypeError"
    assert attributes["db.response.status_code"] == "WRONGTYPE"


def test_the_tracing_options_are_validated(redis_server: RedisServer) -> None:
    for name in ("TRACING", "TRACING_KEYS"):
        with pytest.raises(ImproperlyConfigured, match=name):
            build_cache(redis_server.url, {"OPTIONS": {name: "yes"}}).get("k")
