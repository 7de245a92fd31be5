"""OPTIONS["TRACING"] and OpenTelemetry's database-client conventions as redis-py 8 emits them:
span attributes (stable names, and the replaced ones unless OTEL_SEMCONV_STABILITY_OPT_IN says
``database``), the db.client.operation.duration histogram and the redis.client.errors counter,
read from the SDK's in-memory exporter and reader, and checked against what redis-py 8 itself
records for the same calls on the same server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from redoxide import __version__
from redoxide._spans import DURATION_BUCKETS
from redoxide.exceptions import ConnectionInterrupted, ResponseError
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own telemetry")

LIBRARY = f"redoxide:v{__version__}"


def read(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """The metrics recorded since the reader was last read, by name (redoxide's scope only)."""
    found: dict[str, Metric] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            if scope.scope.name == "redoxide":
                found.update({metric.name: metric for metric in scope.metrics})
    return found


def points(metric: Metric) -> dict[str, Any]:
    """A metric's data points by db.operation.name (or error.type for the error counter)."""
    out: dict[str, Any] = {}
    for point in metric.data.data_points:
        attributes = dict(point.attributes or {})
        out[attributes.get("db.operation.name") or attributes["error.type"]] = point
    return out


# -- spans ----------------------------------------------------------------------------------------


def test_spans_carry_the_stable_names_and_the_replaced_ones_by_default(
    make_cache: Any, redis_server: RedisServer, spans: InMemorySpanExporter, mode: str
) -> None:
    ops = Ops(make_cache(TRACING=True), mode)
    ops.get("k")
    (span,) = spans.get_finished_spans()
    assert span.name == "GET" and span.kind is SpanKind.CLIENT  # no namespace in the name
    assert dict(span.attributes or {}) == {
        "db.system.name": "redis",
        "db.operation.name": "GET",
        "db.namespace": "0",
        "server.address": "127.0.0.1",
        "server.port": redis_server.port,
        "network.peer.address": "127.0.0.1",
        "network.peer.port": redis_server.port,
        # replaced by db.system.name and db.operation.name, kept for existing dashboards
        "db.system": "redis",
        "db.operation": "GET",
    }


@pytest.mark.parametrize(
    ("opt_in", "legacy"),
    [("database", False), ("http, database", False), ("database/dup", True), ("http", True)],
)
def test_otel_semconv_stability_opt_in_database_drops_the_replaced_names(
    make_cache: Any,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    opt_in: str,
    legacy: bool,
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    # A prefix of its own: a configuration's attributes are worked out when it is first built.
    prefix = "stable-" + "".join(c if c.isalnum() else "-" for c in opt_in)
    cache = make_cache(TRACING=True, TRACING_KEYS=True, KEY_PREFIX=prefix)
    cache.get("k")
    cache.client.get_client().pipeline(transaction=False).get("a").get("b").execute()
    with cache.lock("guard", timeout=5):
        pass
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["GET", "PIPELINE", "lock.acquire", "lock.release"]
    for span in finished:
        attributes = dict(span.attributes or {})
        assert attributes["db.system.name"] == "redis"
        assert attributes["db.operation.name"] == span.name
        assert ("db.system" in attributes) is legacy
        assert ("db.operation" in attributes) is legacy
    get = dict(finished[0].attributes or {})
    assert get["db.query.text"] == f"GET {prefix}:1:k"
    assert dict(finished[1].attributes or {})["db.operation.batch.size"] == 2


# -- metrics --------------------------------------------------------------------------------------


def test_each_call_records_db_client_operation_duration_as_redis_py_does(
    make_cache: Any, redis_server: RedisServer, metric_reader: InMemoryMetricReader, mode: str
) -> None:
    ops = Ops(make_cache(TRACING=True), mode)
    ops.set("k", 1)
    ops.get("k")
    ops.get("missing")
    ops.get_many(["k", "x"])
    found = read(metric_reader)
    duration = found["db.client.operation.duration"]
    assert duration.unit == "s"
    by_op = points(duration)
    assert {op: p.count for op, p in by_op.items()} == {"SET": 1, "GET": 2, "MGET": 1}
    for op, point in by_op.items():
        assert isinstance(point, HistogramDataPoint)
        assert tuple(point.explicit_bounds) == DURATION_BUCKETS  # redis-py 8's advice
        assert 0 < point.min <= point.max < 5
        assert dict(point.attributes or {}) == {
            "db.system": "redis",
            "db.system.name": "redis",
            "redis.client.library": LIBRARY,
            "db.namespace": "0",
            "db.operation.name": op,
            "server.address": "127.0.0.1",
            "server.port": redis_server.port,
            "network.peer.address": "127.0.0.1",
            "network.peer.port": redis_server.port,
        }
    assert "redis.client.errors" not in found  # nothing failed


def test_a_failed_call_records_its_error_and_its_duration(
    make_cache: Any, redis_server: RedisServer, metric_reader: InMemoryMetricReader, mode: str
) -> None:
    redis_server.cli("SET", "metric-str", "x")
    conn = Ops(make_cache(TRACING=True).client.get_client(), mode)
    with pytest.raises(ResponseError):
        conn.lpush("metric-str", "a")
    down = Ops(
        build_cache(f"redis://127.0.0.1:{free_port()}/3", {"OPTIONS": {"TRACING": True}}), mode
    )
    with pytest.raises(ConnectionInterrupted):
        down.get("k")
    found = read(metric_reader)
    errors = points(found["redis.client.errors"])
    assert found["redis.client.errors"].unit == "{error}"
    wrongtype, refused = errors["WrongTypeError"], errors["ConnectionInterrupted"]
    assert isinstance(wrongtype, NumberDataPoint) and wrongtype.value == 1 == refused.value
    assert dict(wrongtype.attributes or {}) == {
        "db.system": "redis",
        "db.system.name": "redis",
        "redis.client.library": LIBRARY,
        "server.address": "127.0.0.1",
        "server.port": redis_server.port,
        "network.peer.address": "127.0.0.1",
        "network.peer.port": redis_server.port,
        "error.type": "WrongTypeError",
        "db.response.status_code": "WRONGTYPE",
        "redis.client.errors.category": "server",
        "redis.client.errors.internal": False,
    }
    refused_attributes = dict(refused.attributes or {})
    assert refused_attributes["db.response.status_code"] == "error"  # no reply, no code
    assert refused_attributes["redis.client.errors.category"] == "network"
    durations = points(found["db.client.operation.duration"])
    lpush = dict(durations["LPUSH"].attributes or {})
    assert lpush["error.type"] == "WrongTypeError"
    assert lpush["db.response.status_code"] == "WRONGTYPE"
    assert "redis.client.errors.internal" not in lpush
    assert dict(durations["GET"].attributes or {})["db.namespace"] == "3"


def test_locks_pipelines_and_iterations_record_one_operation_each(
    make_cache: Any, metric_reader: InMemoryMetricReader, mode: str
) -> None:
    cache = make_cache(TRACING=True)
    cache.set_many({f"k{i}": i for i in range(6)})
    read(metric_reader)
    assert len(list(cache.iter_keys("k*", itersize=2))) == 6
    conn = cache.client.get_client()
    if mode == "sync":
        conn.pipeline().incr("c").incr("c").execute()
        with cache.lock("guard", timeout=5):
            pass
    else:

        async def main() -> None:
            await conn.pipeline().incr("c").incr("c").aexecute()
            async with cache.alock("guard", timeout=5):
                pass

        asyncio.run(main())
    counts = {
        op: p.count for op, p in points(read(metric_reader)["db.client.operation.duration"]).items()
    }
    assert counts == {"iter_keys": 1, "MULTI": 1, "lock.acquire": 1, "lock.release": 1}


def test_without_the_option_nothing_is_recorded(
    redis_server: RedisServer, metric_reader: InMemoryMetricReader
) -> None:
    cache = build_cache(redis_server.url)
    cache.set("k", 1)
    cache.get("k")
    assert read(metric_reader) == {}


# -- what redis-py 8 records for the same calls ------------------------------------------------

_REDIS_PY = """
import json, sys
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
import redis
from redis.observability import MetricGroup, OTelConfig, get_observability_instance
get_observability_instance().init(
    OTelConfig(metric_groups=[MetricGroup.COMMAND, MetricGroup.RESILIENCY])
)
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
r.get("conventions-k")
try:
    r.lpush("conventions-str", "x")
except redis.ResponseError:
    pass
out = {}
for resource in reader.get_metrics_data().resource_metrics:
    for scope in resource.scope_metrics:
        for metric in scope.metrics:
            out[metric.name] = {
                "unit": metric.unit,
                "points": [
                    {
                        "attributes": dict(p.attributes),
                        "bounds": list(getattr(p, "explicit_bounds", None) or []),
                    }
                    for p in metric.data.data_points
                ],
            }
print(json.dumps(out))
"""


def test_the_names_units_and_attributes_are_those_redis_py_8_records(
    make_cache: Any, fresh_redis_server: RedisServer, metric_reader: InMemoryMetricReader
) -> None:
    # A server of its own: redis-py sends commands (COMMAND INFO) that tests counting the
    # shared server's commandstats must not see.
    server = fresh_redis_server
    pytest.importorskip("redis.observability", reason="redis-py 8 with its OpenTelemetry metrics")
    server.cli("SET", "conventions-str", "x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run(
        [sys.executable, "-c", _REDIS_PY, str(server.port)],
        capture_output=True, text=True, timeout=60, env=env, check=True,
    )  # fmt: skip
    theirs = json.loads(run.stdout)
    conn = make_cache(server.url, TRACING=True).client.get_client()
    conn.get("conventions-k")
    with pytest.raises(ResponseError):
        conn.lpush("conventions-str", "x")
    ours = read(metric_reader)
    assert set(theirs) == {"db.client.operation.duration", "redis.client.errors"} <= set(ours)
    for name, metric in theirs.items():
        assert ours[name].unit == metric["unit"], name
    (their_get,) = theirs["db.client.operation.duration"]["points"]
    our_get = points(ours["db.client.operation.duration"])["GET"]
    assert tuple(our_get.explicit_bounds) == tuple(their_get["bounds"])
    (their_error,) = theirs["redis.client.errors"]["points"]
    our_error = points(ours["redis.client.errors"])["WrongTypeError"]
    for theirs_, ours_ in ((their_get, our_get), (their_error, our_error)):
        their_attributes, our_attributes = theirs_["attributes"], dict(ours_.attributes or {})
        # Every attribute a redis-py dashboard can filter or group by is there...
        assert set(their_attributes) <= set(our_attributes)
        assert set(our_attributes) - set(their_attributes) == {"db.system.name"}
        # ...with the same value, but the library's name and the exception's (redis-py has
        # no WrongTypeError: its reply errors are ResponseError).
        differ = {k for k in their_attributes if their_attributes[k] != our_attributes[k]}
        assert differ <= {"redis.client.library", "error.type"}
        assert our_attributes["redis.client.library"] == LIBRARY
