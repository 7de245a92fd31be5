"""Plans and their two drivers, without a server: steps answered by a script."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redoxide import _scripts, plans
from redoxide.cache import RedisCache
from redoxide.exceptions import (
    CacheTimeout,
    ConnectionInterrupted,
    CrossSlotError,
    ResponseError,
    response_error,
)


class Scripted:
    """A step callable answering from a list (an exception instance is raised)."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def _later(self, args: tuple[Any, ...]) -> Any:
        return self(*args)

    def acall(self, *args: Any) -> Any:
        """The async convention: the last argument is the bridge."""
        assert args[-1] == "bridge"
        return self._later(args[:-1])


def drive(
    plan: plans.Plan[Any], answer: Callable[[Callable[..., Any], tuple[Any, ...]], Any]
) -> Any:
    """Run a plan by hand: each step is answered by answer(call, args)."""
    try:
        call, args = next(plan)
        while True:
            reply = answer(call, args)
            if isinstance(reply, BaseException):
                call, args = plan.throw(reply)
            else:
                call, args = plan.send(reply)
    except StopIteration as stop:
        return stop.value


def two_steps(step: Callable[..., Any]) -> plans.Plan[Any]:
    first = yield step, ("a",)
    try:
        second = yield step, ("b",)
    except ResponseError as exc:
        return ("recovered", first, exc.code)
    return (first, second)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_drivers_send_replies_and_throw_errors_into_the_plan(mode: str) -> None:
    def run(script: Scripted) -> Any:
        if mode == "sync":
            return plans.run(two_steps(script))
        return asyncio.run(plans.arun(two_steps(script.acall), "bridge"))

    ok = Scripted(1, 2)
    assert run(ok) == (1, 2)
    assert ok.calls == [("a",), ("b",)]
    assert run(Scripted(1, response_error("WRONGTYPE", "WRONGTYPE no"))) == (
        "recovered",
        1,
        "WRONGTYPE",
    )
    with pytest.raises(ConnectionInterrupted):
        run(Scripted(1, ConnectionInterrupted("gone")))


def _recovery(exc: Exception, step: Callable[..., Any], tag: str) -> plans.Plan[Any]:
    if not isinstance(exc, ConnectionInterrupted):
        raise exc
    again = yield step, ("again",)
    return (tag, again)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("when", ["answered", "raised at once", "raised when awaited"])
def test_attempt_runs_the_recovery_plan_only_when_the_first_call_fails(
    mode: str, when: str
) -> None:
    # A router's call on the node it expects: no plan unless it fails, however it fails
    # (an awaited call may refuse before anything is awaited, or once it is).
    first = Scripted("ok" if when == "answered" else ConnectionInterrupted("gone"), "later")

    def at_once(*args: Any) -> Any:
        return first(*args[:-1])  # raises here, not in the awaitable

    if mode == "sync":
        got = plans.attempt(first, ("x",), _recovery, (first, "recovered"), None)
    else:
        call = at_once if when == "raised at once" else first.acall
        how = (first.acall, "recovered")
        got = asyncio.run(_awaited(plans.attempt(call, ("x",), _recovery, how, "bridge")))
    if when == "answered":
        assert got == "ok" and first.calls == [("x",)]
    else:
        assert got == ("recovered", "later") and first.calls == [("x",), ("again",)]
    refused = Scripted(response_error("WRONGTYPE", "WRONGTYPE no"))
    with pytest.raises(ResponseError):  # what the recovery does not recover from
        plans.attempt(refused, ("x",), _recovery, (refused, "recovered"), None)


async def _awaited(pending: Any) -> Any:
    return await pending


def test_fail_open_returns_the_fallback_only_for_its_errors() -> None:
    fail_open = plans.FailOpen(True)
    assert fail_open.failed(CacheTimeout("slow"), "miss") == "miss"
    assert fail_open.failed(ConnectionInterrupted("gone"), plans.Computed(lambda: 7)) == 7
    with pytest.raises(ResponseError):
        fail_open.failed(ResponseError("OOM"), "miss")
    with pytest.raises(CacheTimeout):
        plans.FailOpen(False).failed(CacheTimeout("slow"), "miss")


def test_response_error_codes_pick_their_class() -> None:
    moved = response_error("MOVED", "MOVED 12 10.0.0.1:7000", 12, "10.0.0.1:7000")
    assert (type(moved).__name__, moved.slot, moved.address) == ("MovedError", 12, "10.0.0.1:7000")
    assert isinstance(response_error("CROSSSLOT", "x"), CrossSlotError)
    plain = response_error("SOMETHING", "SOMETHING new")
    assert type(plain) is ResponseError and plain.code == "SOMETHING"


@pytest.fixture
def cache() -> RedisCache:
    # Nothing connects until a command is sent; plans are driven by hand here.
    return RedisCache("redis://127.0.0.1:1/0", {"KEY_PREFIX": "p"})


def test_incr_of_a_non_integer_writes_back_only_if_nobody_wrote_meanwhile(
    cache: RedisCache,
) -> None:
    import pickle

    sent: list[tuple[Any, ...]] = []
    stored = [pickle.dumps(1.5), pickle.dumps(2.0)]  # another writer gets in once

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        command = args[0]
        sent.append(tuple(command))
        if command[0] == "EVALSHA" and command[1] == _scripts.INCR_SHA:
            return response_error(_scripts.NOT_AN_INTEGER, "NOTINT ERR value is not an integer")
        if command[0] == "GET":
            return stored[0]
        # The compare-and-set: it fails while the value is not the one read.
        if command[4] == stored[0] and len(stored) > 1:
            stored.pop(0)
            return 0
        return 1

    assert drive(cache._incr("k", 1, None), answer) == 3.0
    names = [c[0] for c in sent]
    assert names == ["EVALSHA", "GET", "EVALSHA", "GET", "EVALSHA"]
    assert sent[4][1] == _scripts.COMPARE_AND_SET_SHA and sent[4][3] == "p:1:k"
    assert pickle.loads(sent[4][5]) == 3.0


def test_incr_sends_the_script_whole_once_the_server_lacks_it(cache: RedisCache) -> None:
    sent: list[tuple[Any, ...]] = []

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        sent.append(tuple(args[0]))
        if args[0][0] == "EVALSHA":
            return response_error("NOSCRIPT", "NOSCRIPT No matching script")
        return 5

    assert drive(cache._incr("k", 1, None), answer) == 5
    assert [c[0] for c in sent] == ["EVALSHA", "EVAL"]
    assert sent[0][1] == _scripts.INCR_SHA and sent[1][1] == _scripts.INCR


def test_incr_raises_other_error_replies(cache: RedisCache) -> None:
    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        return response_error("WRONGTYPE", "WRONGTYPE Operation against a key")

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        drive(cache._incr("k", 1, None), answer)


def test_incr_version_copies_across_slots_and_deletes_only_what_it_copied(
    cache: RedisCache,
) -> None:
    sent: list[Any] = []
    reads = [[b"v", 5000], [b"w", 4000]]  # the old version is written once meanwhile

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        sent.append(args[0])
        if len(sent) == 1:
            return response_error("CROSSSLOT", "CROSSSLOT Keys in request don't hash")
        if isinstance(args[0][0], tuple):  # the pipeline: GET, PTTL
            return reads.pop(0)
        if args[0][0] == "SET":
            return True
        return 0 if reads else 1  # the compare-and-delete: refused while a read remains

    assert drive(cache._incr_version("k", 1, None), answer) == 2
    assert sent[2] == ("SET", "p:2:k", b"v", "PX", 5000)
    assert sent[3][0] == "EVAL" and sent[3][3:] == ("p:1:k", b"v")
    assert sent[5] == ("SET", "p:2:k", b"w", "PX", 4000)
    assert sent[6][3:] == ("p:1:k", b"w") and len(sent) == 7
