"""Two views using the cache: a sync one and a native async one.

Both do the same work, one with the sync API and one with the a* twins: count hits
atomically on the server (incr, creating the counter with add on first use), cache a computed
report (get_or_set), and read several counters in one round trip (get_many).
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, JsonResponse

TOTAL = "hits:total"
COUNTERS = (TOTAL, "hits:sync", "hits:async")
REPORT = "report:primes"
REPORT_TIMEOUT = 60  # seconds
PRIME_LIMIT = 200_000


def primes_report() -> dict[str, Any]:
    """Count the primes below PRIME_LIMIT: a stand-in for work worth caching."""
    sieve = bytearray([1]) * PRIME_LIMIT
    sieve[:2] = b"\x00\x00"
    for n in range(2, int(PRIME_LIMIT**0.5) + 1):
        if sieve[n]:
            sieve[n * n :: n] = bytes(len(range(n * n, PRIME_LIMIT, n)))
    return {
        "primes_below": PRIME_LIMIT,
        "count": sum(sieve),
        "computed_at": time.time(),
        "computed_by_pid": os.getpid(),
    }


def _response(
    view: str, hits: int, total: int, report: Any, counters: dict[str, Any]
) -> JsonResponse:
    return JsonResponse(
        {
            "view": view,
            "backend": settings.CACHES["default"]["BACKEND"],
            "hits": hits,
            "total": total,
            "report": report,
            "counters": counters,
            "pid": os.getpid(),
        }
    )


def index(request: HttpRequest) -> JsonResponse:
    """List the endpoints (touches no cache: the demo uses it as a readiness probe)."""
    return JsonResponse({"endpoints": ["/sync/", "/async/", "/stats/", "/soak/"]})


def _incr(key: str) -> int:
    try:
        return cache.incr(key)
    except ValueError:  # first hit: the counter does not exist yet
        # add() only writes if the key is still absent, so concurrent first hits are safe.
        cache.add(key, 0, timeout=None)
        return cache.incr(key)


async def _aincr(key: str) -> int:
    try:
        return await cache.aincr(key)
    except ValueError:
        await cache.aadd(key, 0, timeout=None)
        return await cache.aincr(key)


def sync_view(request: HttpRequest) -> JsonResponse:
    """Count the hit, fetch the cached report and read every counter with the sync API."""
    hits = _incr("hits:sync")
    total = _incr(TOTAL)
    report = cache.get_or_set(REPORT, primes_report, REPORT_TIMEOUT)
    counters = cache.get_many(COUNTERS)
    return _response("sync", hits, total, report, counters)


async def async_view(request: HttpRequest) -> JsonResponse:
    """Do what sync_view does with the async twins, awaited on the event loop."""
    hits = await _aincr("hits:async")
    total = await _aincr(TOTAL)
    report = await cache.aget_or_set(REPORT, primes_report, REPORT_TIMEOUT)
    counters = await cache.aget_many(COUNTERS)
    return _response("async", hits, total, report, counters)


SOAK_ITEMS = 1000  # distinct per-request keys the soak view cycles through
SOAK_PAGE = tuple(f"soak:page:{i}" for i in range(10))


async def soak_view(request: HttpRequest) -> JsonResponse:
    """Six cache operations, as a busy page might do (benchmarks/soak.py drives this view):
    count the hit, fetch the cached report, read ten keys in one round trip, write a
    per-request item, read it back, and delete an older one."""
    hits = await _aincr("soak:hits")
    report = await cache.aget_or_set(REPORT, primes_report, REPORT_TIMEOUT)
    page = await cache.aget_many(SOAK_PAGE)
    item = f"soak:item:{hits % SOAK_ITEMS}"
    await cache.aset(item, {"hit": hits, "page": len(page)}, timeout=60)
    value = await cache.aget(item)
    await cache.adelete(f"soak:item:{(hits + SOAK_ITEMS // 2) % SOAK_ITEMS}")
    return JsonResponse({"hits": hits, "primes": report["count"], "page": len(page), "item": value})


async def stats_view(request: HttpRequest) -> JsonResponse:
    """Return the counters and the cached report, read in one round trip."""
    values = await cache.aget_many([*COUNTERS, REPORT])
    return JsonResponse(
        {
            "backend": settings.CACHES["default"]["BACKEND"],
            "counters": {key: values.get(key, 0) for key in COUNTERS},
            "report": values.get(REPORT),
        }
    )
