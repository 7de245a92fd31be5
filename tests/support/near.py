"""Helpers of the near-cache tests (tests/near/): options, and waits on the tracking
connection that poll the cache's own counters."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from support.servers import RedisServer

#: The bound every test relies on: no hit is served once the tracking connection has not
#: answered for this long.
MAX_STALE_MS = 200


def near_options(**limits: Any) -> dict[str, Any]:
    """OPTIONS["NEAR_CACHE"] keeping keys under cfg: (and flags:)."""
    return {"PREFIXES": ["cfg:", "flags:"], "MAX_STALE_MS": MAX_STALE_MS, **limits}


def wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll check() until true; fail naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def serving(cache: Any) -> None:
    """Wait until the near cache serves hits (tracking on, PING answered)."""
    # Tracking connections are made on the first lookup of a kept key (once a router knows
    # its primaries).
    wait_for(
        "the near cache to serve",
        lambda: cache.get("cfg:") is None and bool(cache.near_cache_stats()["serving"]),
    )


def warm(cache: Any, key: str, version: int | None = None) -> Any:
    """Read key until it is served from process memory; return the value."""
    serving(cache)
    before = cache.near_cache_stats()["hits"]
    value = cache.get(key, version=version)
    value = cache.get(key, version=version)
    if cache.near_cache_stats()["hits"] == before:
        value = cache.get(key, version=version)
    assert cache.near_cache_stats()["hits"] > before, "the value was not kept locally"
    return value


def after_stale_bound() -> None:
    """Let MAX_STALE_MS pass: after it, no hit may predate a write acknowledged before it."""
    time.sleep(MAX_STALE_MS / 1000 * 1.05)


def tracking_client_ids(server: RedisServer) -> list[str]:
    """The ids of the server's connections in tracking mode (CLIENT LIST flag t)."""
    ids = []
    for line in server.cli("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "t" in fields.get("flags", ""):
            ids.append(fields["id"])
    return ids


def stop_tracking(cache: Any) -> None:
    """End a test's near cache: close its tracking connections, delete its database markers
    (the near cache stays off for the rest of the process)."""
    from contextlib import suppress

    from redoxide.exceptions import CacheError

    client = cache._client
    client._store.track([])
    if not client._check_db:
        return  # a cluster: no markers
    with suppress(CacheError):
        # Its own (one of the cache's names), and any of redoxide's default name.
        markers = [client._store.marker(), *cache.client.execute("KEYS", "redoxide:near:*")]
        cache.client.execute("DEL", *markers)
