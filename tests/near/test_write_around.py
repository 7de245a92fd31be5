"""A write the near cache does not send itself (a router's delete, incr..., any pipeline):
``NearCache.write_around`` drops the tracked keys it names before calling the sender, and
again once the write is answered, so that a fill that read the old value while it was in
flight is not kept. Blocking, the second drop follows the sender's return or error; awaited,
the write's awaitable is wrapped (``Holding``) and the second drop follows its result, its
error, its cancellation, or its being dropped unawaited. Every race below is built by
construction: the fill runs inside the sender, or while its awaitable is held unanswered."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest
from redoxide import _redoxide
from redoxide._bridges import bridge
from redoxide.exceptions import ResponseError
from support.near import serving

KEYS = 2  # write_around's kind: the keys of a set or set_many


def _kept(make_near: Callable[..., Any]) -> tuple[Any, Any, str, Callable[[], None]]:
    """A cache keeping cfg:w, its store, the key as made, and a fill of the key that reads
    the server's (old) value the way a concurrent get would: under a token taken now."""
    cache = make_near()
    serving(cache)
    cache.set("cfg:w", "old")
    assert cache.get("cfg:w") == "old"
    store = cache._client._store
    key = cache.make_and_validate_key("cfg:w")
    assert type(store.lookup(key)) is bytes  # kept
    client = cache._client._inner

    def stale_fill() -> None:
        token = store.lookup(key)
        assert type(token) is int, token  # a miss: the write dropped it
        store.fill(client, key, token)
        assert type(store.lookup(key)) is bytes  # the old value, kept meanwhile

    return cache, store, key, stale_fill


def test_a_blocking_write_drops_again_what_a_fill_kept_while_it_ran(
    make_near: Callable[..., Any],
) -> None:
    _, store, key, stale_fill = _kept(make_near)

    def send(value: str) -> str:
        stale_fill()
        return value

    assert store.write_around(KEYS, [key], send, ("sent",)) == "sent"
    assert type(store.lookup(key)) is int  # dropped again: the next get reads the server

    def refused() -> None:
        stale_fill()
        raise ResponseError("WRONGTYPE refused")

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        store.write_around(KEYS, [key], refused, ())
    assert type(store.lookup(key)) is int


@pytest.mark.parametrize("end", ["answered", "failed", "cancelled", "never awaited"])
def test_an_awaited_write_drops_again_once_it_ends(make_near: Callable[..., Any], end: str) -> None:
    cache, store, key, stale_fill = _kept(make_near)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()
        sent: list[Any] = []

        def send(value: str, on: Any) -> Any:
            sent.append((value, on))
            return answer

        pending = store.write_around(KEYS, [key], send, ("v",), bridge())
        assert type(pending) is _redoxide.Holding
        assert len(sent) == 1 and sent[0][0] == "v"
        stale_fill()  # while the write is in flight
        if end == "never awaited":
            del pending
            gc.collect()
        else:
            waiting = asyncio.ensure_future(pending)
            await asyncio.sleep(0)  # the task now waits on the unanswered write
            assert not waiting.done() and type(store.lookup(key)) is bytes
            if end == "answered":
                answer.set_result("done")
                assert await waiting == "done"
            elif end == "failed":
                answer.set_exception(ResponseError("OOM refused"))
                with pytest.raises(ResponseError, match="OOM"):
                    await waiting
            else:
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                assert answer.cancelled()  # the cancellation reached the write
        assert type(store.lookup(key)) is int  # dropped again

    asyncio.run(main())
    assert cache.get("cfg:w") == "old"  # (nothing was written: the server's value)


def test_a_write_naming_no_tracked_key_calls_the_sender_as_is(
    make_near: Callable[..., Any],
) -> None:
    cache = make_near()
    serving(cache)
    store = cache._client._store

    def send(*args: Any) -> Any:
        return args

    assert store.write_around(0, ("GET", "x"), send, (1, 2)) == (1, 2)
    marker = object()

    async def main() -> None:
        async def coroutine() -> object:
            return marker

        def asend(on: Any) -> Any:
            return coroutine()

        pending = store.write_around(KEYS, [b"not-tracked"], asend, (), bridge())
        assert type(pending) is not _redoxide.Holding
        assert await pending is marker

    asyncio.run(main())
    with pytest.raises(ValueError, match="no write kind 7"):
        store.write_around(7, [], send, ())
