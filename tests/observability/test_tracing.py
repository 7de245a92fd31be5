"""OPTIONS["TRACING"]: one OpenTelemetry client span per cache call, with the database
conventions, captured by the SDK's in-memory exporter (the `spans` fixture of conftest.py);
nothing at all without the option."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cache_calls import CALLS, LOCAL, call, prepare, server_methods
from django.core.exceptions import ImproperlyConfigured
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from redoxide import RedisCache, tracing
from redoxide.connection import RawClient
from redoxide.exceptions import ConnectionInterrupted, ResponseError
from redoxide.lock import AsyncLock, Lock
from redoxide.topology.commands import first_key, key_slot, slot_of
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.servers import Cluster, RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own tracing")


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


# -- every call path ----------------------------------------------------------------------------


def test_every_public_method_is_known_to_these_tests() -> None:
    # Found from the class: a new public method fails here until cache_calls.CALLS has a call
    # of it (and the test below checks its span), or LOCAL says it never talks to the server.
    assert set(server_methods()) == set(CALLS), "add a call of each new method to CALLS"
    assert tracing.LOCAL == LOCAL
    for name in server_methods():
        assert callable(getattr(RedisCache, "a" + name, None)), f"{name} has no async twin"


def test_every_public_method_makes_one_span_named_after_its_operation(
    make_cache: Any, spans: InMemorySpanExporter, mode: str
) -> None:
    plain, traced = make_cache(), make_cache(TRACING=True)
    made: dict[str, list[str]] = {}
    for method in server_methods():
        prepare(plain)
        spans.clear()
        call(traced, method, mode)
        finished = spans.get_finished_spans()
        made[method] = [span.name for span in finished]
        for span in finished:
            assert span.status.status_code is StatusCode.UNSET, (method, span.events)
            assert dict(span.attributes or {})["db.operation.name"] == span.name
    assert made == {method: [CALLS[method][2]] for method in server_methods()}


def test_an_iteration_is_one_span_however_many_pages_and_ends_when_closed(
    make_cache: Any, spans: InMemorySpanExporter
) -> None:
    cache = make_cache(TRACING=True)
    cache.set_many({f"k{i}": i for i in range(10)})
    cache.sadd("s", *range(10))
    spans.clear()
    assert len(list(cache.iter_keys("k*", itersize=2))) == 10
    assert len(list(cache.sscan_iter("s", count=2))) == 10
    assert [s.name for s in spans.get_finished_spans()] == ["iter_keys", "sscan_iter"]
    spans.clear()
    keys = cache.iter_keys("k*", itersize=2)
    next(keys)
    assert spans.get_finished_spans() == ()  # under way
    keys.close()  # what a `break` out of a for loop does
    (closed,) = spans.get_finished_spans()
    assert closed.name == "iter_keys" and closed.status.status_code is StatusCode.UNSET

    async def stop_early() -> None:
        async for _ in cache.aiter_keys("k*", itersize=2):
            break

    spans.clear()
    asyncio.run(stop_early())
    assert [s.name for s in spans.get_finished_spans()] == ["iter_keys"]


def test_lock_calls_each_make_one_span(
    make_cache: Any, spans: InMemorySpanExporter, mode: str
) -> None:
    cache = make_cache(TRACING=True, TRACING_KEYS=True)
    if mode == "sync":
        lock = cache.lock("guard", timeout=10)
        with lock:
            assert lock.extend(5) and lock.reacquire() and lock.locked() and lock.owned()
    else:

        async def main() -> None:
            lock = cache.alock("guard", timeout=10)
            async with lock:
                assert await lock.extend(5) and await lock.reacquire()
                assert await lock.locked() and await lock.owned()

        asyncio.run(main())
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == [
        "lock.acquire", "lock.extend", "lock.extend", "lock.locked", "lock.owned", "lock.release",
    ]  # fmt: skip
    for span in finished:
        attributes = dict(span.attributes or {})
        assert attributes["db.query.text"] == f"{span.name} :1:guard"
        assert attributes["db.operation.name"] == span.name


def test_raw_client_commands_and_pipelines_make_spans(
    make_cache: Any, spans: InMemorySpanExporter, mode: str
) -> None:
    cache = make_cache(TRACING=True)
    conn = Ops(cache.client.get_client(), mode)
    assert conn.lpush("raw-list", "a", "b") == 2
    assert conn.lrange("raw-list", 0, -1) == [b"b", b"a"]
    assert conn.execute_command("PING") in (True, b"PONG", "PONG")
    raw = Ops(cache.client, mode)
    assert raw.execute("LLEN", "raw-list") == 2
    assert [s.name for s in spans.get_finished_spans()] == ["LPUSH", "LRANGE", "PING", "LLEN"]
    spans.clear()

    def run(pipe: Any) -> list[Any]:
        return pipe.execute() if mode == "sync" else asyncio.run(pipe.aexecute())

    plain = cache.client.get_client().pipeline(transaction=False)
    assert run(plain.set("p", "1").get("p").llen("raw-list")) == [True, b"1", 2]
    transaction = cache.client.get_client().pipeline()
    assert run(transaction.incr("c").incr("c")) == [1, 2]
    assert run(cache.client.get_client().pipeline(transaction=False).get("p")) == [b"1"]
    assert raw.pipeline(("GET", "p"), ("PTTL", "p")) == [b"1", -1]
    names = [(s.name, dict(s.attributes or {}).get("db.operation.batch.size")) for s in
             spans.get_finished_spans()]  # fmt: skip
    assert names == [("PIPELINE", 3), ("MULTI", 2), ("GET", None), ("PIPELINE", 2)]
    for span in spans.get_finished_spans():
        attributes = dict(span.attributes or {})
        assert attributes["db.operation.name"] == span.name
        assert "db.query.text" not in attributes  # keys only with TRACING_KEYS


def test_raw_pipelines_keep_their_spans_with_raise_on_error_false(
    make_cache: Any, spans: InMemorySpanExporter, mode: str
) -> None:
    conn = make_cache(TRACING=True).client.get_client()

    def run(pipe: Any) -> list[Any]:
        if mode == "async":
            return asyncio.run(pipe.aexecute(raise_on_error=False))
        return pipe.execute(raise_on_error=False)

    # A transaction is one span, and one the server refused to queue fails inside it.
    assert run(conn.pipeline().set("a", 1).incr("a")) == [True, 2]
    with pytest.raises(ResponseError, match="wrong number of arguments"):
        run(conn.pipeline().set("a", 1).execute_command("INCR"))
    # A plain pipeline through a traced client goes one command (one span) at a time.
    replies = run(conn.pipeline(transaction=False).set("t", "x").incr("t"))
    assert replies[0] is True and isinstance(replies[1], ResponseError)
    finished = [
        (s.name, dict(s.attributes or {}).get("db.operation.batch.size"), s.status.status_code)
        for s in spans.get_finished_spans()
    ]
    assert finished == [
        ("MULTI", 2, StatusCode.UNSET),
        ("MULTI", 2, StatusCode.ERROR),
        ("SET", None, StatusCode.UNSET),
        ("INCRBY", None, StatusCode.ERROR),
    ]


def test_raw_scan_iter_makes_a_span_per_page_and_write_false_is_traced(
    make_cache: Any, spans: InMemorySpanExporter
) -> None:
    cache = make_cache(TRACING=True)
    cache.set_many({f"k{i}": i for i in range(10)})
    spans.clear()
    conn = cache.client.get_client(write=False)
    assert len(set(conn.scan_iter(match=":1:k*", count=2))) == 10
    pages = [s.name for s in spans.get_finished_spans()]
    assert len(pages) > 1 and set(pages) == {"SCAN"}


def test_raw_spans_record_keys_only_with_tracing_keys(
    make_cache: Any, spans: InMemorySpanExporter
) -> None:
    cache = make_cache(TRACING=True, TRACING_KEYS=True)
    conn = cache.client.get_client()
    conn.set("secret-key", "secret-value")
    conn.pipeline(transaction=False).get("secret-key").hset("h", "f", "secret-value").execute()
    conn.ping()
    texts = [dict(s.attributes or {}).get("db.query.text") for s in spans.get_finished_spans()]
    assert texts == ["SET secret-key", "GET secret-key\nHSET h", "PING"]
    assert not any("secret-value" in str(text) for text in texts)


def test_a_raw_command_that_fails_marks_its_span(
    make_cache: Any, redis_server: RedisServer, spans: InMemorySpanExporter
) -> None:
    cache = make_cache(TRACING=True)
    redis_server.cli("SET", "str", "x")
    with pytest.raises(ResponseError):
        cache.client.get_client().lpush("str", "a")
    (span,) = spans.get_finished_spans()
    assert span.name == "LPUSH" and span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["db.response.status_code"] == "WRONGTYPE"


def test_without_the_option_locks_and_the_raw_client_are_not_instrumented(
    redis_server: RedisServer,
) -> None:
    cache = build_cache(redis_server.url)
    assert type(cache.lock("l")) is Lock and type(cache.alock("l")) is AsyncLock
    raw = cache.client
    assert type(raw) is RawClient and raw._client is cache._client
    assert cache.client.get_client()._client is cache._client


def test_the_key_a_raw_span_records_is_the_one_the_slot_follows() -> None:
    # TRACING_KEYS records first_key(); a cluster routes by slot_of(): the same key.
    commands = [
        ("GET", "k"), ("DEL", "a", "b"), ("EVALSHA", "sha", 1, "s", "arg"), ("EVAL", "x", 0),
        ("OBJECT", "ENCODING", "o"), ("XREAD", "COUNT", 1, "STREAMS", "st", "0"), ("PING",),
        ("SCAN", 0), ("PUBLISH", "chan", "m"), ("LPUSH", b"bytes", "v"),
    ]  # fmt: skip
    for command in commands:
        key = first_key(command)
        assert slot_of(command) == (None if key is None else key_slot(key)), command


def test_structure_methods_record_their_key_only_when_asked(
    make_cache: Any, spans: InMemorySpanExporter, mode: str
) -> None:
    ops = Ops(make_cache(TRACING=True, TRACING_KEYS=True, KEY_PREFIX="p"), mode)
    ops.lpush("q", "secret-value", version=2)
    ops.hset("h", "f", "secret-value", None, 3)
    ops.smove("from", "to", "secret-value")
    ops.sinter("a", "b")
    texts = [dict(s.attributes or {}).get("db.query.text") for s in spans.get_finished_spans()]
    assert texts == ["LPUSH p:2:q", "HSET p:3:h", "SMOVE p:1:from", None]
    spans.clear()
    Ops(make_cache(TRACING=True, KEY_PREFIX="p"), mode).lpush("q", "v")
    (span,) = spans.get_finished_spans()
    assert "db.query.text" not in dict(span.attributes or {})


def test_a_traced_cluster_cache_traces_each_nodes_scan_pages_and_its_calls(
    cluster: Cluster, spans: InMemorySpanExporter
) -> None:
    options = {"CLUSTER": True, "TRACING": True}
    cache = build_cache(cluster.urls[:1], {"KEY_PREFIX": "traced", "OPTIONS": options})
    cache.set_many({f"k{i}": i for i in range(12)})
    spans.clear()
    assert len(cache.keys("k*")) == 12
    assert [s.name for s in spans.get_finished_spans()] == ["keys"]
    spans.clear()
    conn = cache.client.get_client()
    found = {key for key in conn.scan_iter(match="traced:1:k*", count=5)}

    async def ascan() -> set[bytes]:
        return {key async for key in conn.ascan_iter(match="traced:1:k*", count=5)}

    assert found == asyncio.run(ascan()) and len(found) == 12
    pages = [s.name for s in spans.get_finished_spans()]
    assert set(pages) == {"SCAN"} and len(pages) >= 6  # each primary's pages, twice
    assert cache.delete_pattern("k*") == 12
