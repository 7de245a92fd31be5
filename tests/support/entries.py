"""Calls from Python into the core (``redoxide._redoxide``), counted with ``sys.setprofile``
(every call from Python into a C function is an event): exact, whatever the host's speed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["awaited_entries", "check_set_entries", "entries"]


def _counter(counts: dict[str, int]) -> Callable[[Any, str, Any], None]:
    """A profile function that counts the calls into the core in `counts`, by name."""

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "c_call":
            return
        module = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
        if module == "redoxide._redoxide":
            counts[arg.__qualname__] = counts.get(arg.__qualname__, 0) + 1

    return profile


def entries(call: Callable[[], Any]) -> dict[str, int]:
    """The calls into the core `call` makes, by name."""
    counts: dict[str, int] = {}
    sys.setprofile(_counter(counts))
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


def awaited_entries(
    call: Callable[[], Any], before: Callable[[], object] = lambda: None
) -> dict[str, int]:
    """`entries` of awaiting `call()` once it ran once (its connections and this loop's
    bridge made), `before()` run between; the event loop's own work is not the core's."""
    counts: dict[str, int] = {}

    async def main() -> None:
        await call()
        before()
        sys.setprofile(_counter(counts))
        try:
            await call()
        finally:
            sys.setprofile(None)

    asyncio.run(main())
    return counts


def check_set_entries(plain: Any, near: Any) -> None:
    """A near-cached set on a router (`near`, the process' only near cache, keeping cfg:)
    enters the core once, no more often than a set of `plain` on the same router: kept keys
    kept as written, every value on the servers."""
    from support.near import serving

    serving(near)
    assert near._client.__dict__.get("set") == near._client._store.set_routed
    limit = sum(entries(lambda: plain.set("cfg:a", 1)).values())
    awaited_limit = sum(awaited_entries(lambda: plain.aset("cfg:a", 1)).values())
    assert limit >= 1 and awaited_limit >= 1
    kept = near.near_cache_stats()["own_writes_kept"]
    counts = [
        entries(lambda: near.set("cfg:a", 1)),
        entries(lambda: near.set("other:c", 3)),
        awaited_entries(lambda: near.aset("cfg:b", 2)),
        awaited_entries(lambda: near.aset("other:d", 4)),
    ]
    for each, most in zip(counts, (limit, limit, awaited_limit, awaited_limit), strict=True):
        assert each.get("NearCache.set_routed") == 1, each
        assert "key_slot" not in each and "Client.set" not in each, each
        assert "NearCache.forget_keys" not in each, each
        assert sum(each.values()) <= most, (each, most)
    # Kept as written (the awaited set ran twice): read back as hits, nothing filled.
    assert near.near_cache_stats()["own_writes_kept"] == kept + 3
    installs = near.near_cache_stats()["installs"]
    hits = entries(lambda: (near.get("cfg:a"), near.get("cfg:b")))
    assert hits == {"NearCache.get_routed": 2}, hits
    want = {"cfg:a": 1, "cfg:b": 2, "other:c": 3, "other:d": 4}
    assert near.get_many(list(want)) == want
    assert near.near_cache_stats()["installs"] == installs
    # On the servers: what another client reads.
    inner = near._client._inner
    for name, raw in (("cfg:a", b"1"), ("cfg:b", b"2"), ("other:d", b"4")):
        assert inner.get(near.make_and_validate_key(name)) == raw
