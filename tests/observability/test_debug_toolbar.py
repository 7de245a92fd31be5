"""The django-debug-toolbar panel: a request's redoxide calls, sync and async, with their time
and whether they hit; the caches get their own class back afterwards."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.cache import caches
from django.http import HttpResponse
from django.test import RequestFactory, override_settings
from redoxide import RedisCache
from support.backend import is_redoxide
from support.servers import RedisServer

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's own panel")


def toolbar() -> SimpleNamespace:
    """The parts of a DebugToolbar a panel uses (the real one needs its models installed)."""
    return SimpleNamespace(
        request=RequestFactory().get("/"),
        request_id="r1",
        stats={},
        server_timing_stats={},
        store=SimpleNamespace(save_panel=lambda *args: None),
    )


@pytest.fixture
def panel(redis_server: RedisServer) -> Any:
    from redoxide.contrib.debug_toolbar import RedoxidePanel

    redis_server.flushall()
    settings = {
        "default": {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url},
        "other": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    with override_settings(CACHES=settings):
        yield RedoxidePanel(toolbar(), lambda request: HttpResponse())


def test_the_panel_lists_the_requests_calls(panel: Any) -> None:
    cache = caches["default"]
    cache.set("seen", 1)  # before the request: not recorded
    panel.enable_instrumentation()
    try:
        assert type(cache) is not RedisCache
        assert cache.get("seen") == 1
        assert cache.get("unseen", "fallback") == "fallback"
        assert cache.get_many(["seen", "unseen", "gone"]) == {"seen": 1}
        assert asyncio.run(cache.ahas_key("seen"))
        cache.set("k", 2)
    finally:
        panel.disable_instrumentation()
    assert type(cache) is RedisCache
    cache.get("after")  # after the request: not recorded
    panel.generate_stats(None, None)
    stats = panel.get_stats()
    calls = [(c["alias"], c["method"], c["key"], c["outcome"]) for c in stats["calls"]]
    assert calls == [
        ("default", "get", "seen", "hit"),
        ("default", "get", "unseen", "miss"),
        ("default", "get_many", "['seen', 'unseen', 'gone']", "1 of 3 hit"),
        ("default", "ahas_key", "seen", "hit"),
        ("default", "set", "k", ""),
    ]
    assert (stats["total_calls"], stats["hits"], stats["misses"]) == (5, 3, 3)
    assert all(c["ms"] > 0 for c in stats["calls"])
    assert stats["total_ms"] == pytest.approx(sum(c["ms"] for c in stats["calls"]))
    assert panel.nav_subtitle.startswith("5 calls in ")
    html = panel.content
    assert "get_many" in html and "1 of 3 hit" in html and "[&#x27;seen&#x27;" in html


def test_a_failed_call_is_listed_as_an_error(panel: Any) -> None:
    cache = caches["default"]
    cache.set("text", "not a number")
    panel.enable_instrumentation()
    try:
        with pytest.raises(TypeError):
            cache.incr("text")
    finally:
        panel.disable_instrumentation()
    panel.generate_stats(None, None)
    assert [(c["method"], c["outcome"]) for c in panel.get_stats()["calls"]] == [("incr", "error")]


def test_the_panel_lists_structure_calls_too(panel: Any) -> None:
    cache = caches["default"]
    panel.enable_instrumentation()
    try:
        assert cache.lpush("queue", "a") == 1
        assert asyncio.run(cache.asadd("tags", "x")) == 1
        assert cache.hset("h", "f", 1) == 1
        assert cache.pexpire("queue", 10_000)
    finally:
        panel.disable_instrumentation()
    panel.generate_stats(None, None)
    calls = [(c["method"], c["key"]) for c in panel.get_stats()["calls"]]
    assert calls == [("lpush", "queue"), ("asadd", "tags"), ("hset", "h"), ("pexpire", "queue")]
