"""Calls cut into single-slot parts: sent to every node at once, only redirected parts again.

`run_parts` is a plan (see redoxide.plans) over a SlotMap: it groups the parts by the node
serving each, sends every node its group before reading any reply (sync too, through the
Rust fan-out), and sends again only what was redirected: ASK parts with ASKING to the
importing node, MOVED parts to the new owner, TRYAGAIN / CLUSTERDOWN parts after a pause and a
fresh table. A part whose connection broke is sent again only if the fresh table gives it
another node (whether it ran is unknown); a timeout raises (its time is spent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, overload

from redoxide import _redoxide
from redoxide._redoxide import Bridge, Client
from redoxide.exceptions import CacheError, CacheTimeout, ResponseError
from redoxide.plans import Plan, pause
from redoxide.topology.slots import Redirect, ReplicaOf, SlotMap, Target

__all__ = [
    "MAX_REDIRECTS",
    "RETRY_PAUSE",
    "Group",
    "Split",
    "by_node",
    "run_parts",
    "send",
    "together",
    "with_partial",
]

#: Redirects followed for one call before giving up (a cluster mid-resharding settles fast).
MAX_REDIRECTS = 5
#: Pause before retrying a TRYAGAIN / CLUSTERDOWN reply.
RETRY_PAUSE = 0.05

Part = tuple[Any, ...]
# (node, the positions of its parts, the commands sent to it)
Group = tuple[Client, list[int], list[Part]]


def together(pending: list[Any]) -> None:
    """Tell awaitables sent at once by one caller about each other (they may then poll)."""
    if len(pending) > 1:
        for waiting in pending:
            waiting.sent_with(pending)


@overload
def send(calls: list[tuple[Client, list[Part]]], bridge: None = None) -> list[Any]: ...
@overload
def send(calls: list[tuple[Client, list[Part]]], bridge: Bridge) -> Awaitable[list[Any]]: ...
def send(
    calls: list[tuple[Client, list[Part]]], bridge: Bridge | None = None
) -> list[Any] | Awaitable[list[Any]]:
    """A step: run one pipeline per node, all at once; return each node's replies (error
    replies as ResponseError instances) or the exception that failed it as a whole."""
    if bridge is not None:
        return _asend(calls, bridge)
    if len(calls) == 1:
        node, commands = calls[0]
        try:
            return [node.pipeline_results(commands)]
        except CacheError as exc:
            return [exc]
    return _redoxide.fanout(calls)


async def _asend(calls: list[tuple[Client, list[Part]]], bridge: Bridge) -> list[Any]:
    pending = [node.pipeline_results(commands, bridge) for node, commands in calls]
    together(pending)
    outcomes: list[Any] = []
    for waiting in pending:
        try:
            outcomes.append(await waiting)
        except CacheError as exc:
            outcomes.append(exc)
    return outcomes


def by_node(table: list[Client], slots: Sequence[int], parts: Sequence[Part]) -> dict[int, Group]:
    """Group one part per slot by the node serving the slot: {id(node): (node, slots, parts)}."""
    groups: dict[int, Group] = {}
    for slot, part in zip(slots, parts, strict=True):
        node = table[slot]
        group = groups.get(id(node))
        if group is None:
            group = groups[id(node)] = (node, [], [])
        group[1].append(slot)
        group[2].append(part)
    return groups


class Split:
    """One command of a caller's pipeline, cut into several parts, and how to rejoin them."""

    __slots__ = ("combine", "count")

    def __init__(self, count: int, combine: Callable[[list[Any]], Any]) -> None:
        self.count = count
        self.combine = combine


class _Round:
    """What one send of the parts still to run came back with."""

    __slots__ = ("lost", "retry", "wait")

    def __init__(self) -> None:
        self.retry: list[int] = []  # redirected: send again
        self.lost: list[tuple[int, Client, BaseException]] = []  # connection broke mid-call
        self.wait = False  # TRYAGAIN and the like: pause first


def _group(
    slots: SlotMap,
    todo: list[int],
    asking: dict[int, Client],
    parts: list[Part],
    targets: list[Target],
) -> dict[int, Group]:
    """The parts to send, grouped by node; a part being migrated goes after ASKING."""
    groups: dict[int, Group] = {}
    for i in todo:
        node = asking.get(i) or slots.node_for(targets[i])
        group = groups.get(id(node))
        if group is None:
            group = groups[id(node)] = (node, [], [])
        group[1].append(i)
        if i in asking:
            group[2].append(("ASKING",))
        group[2].append(parts[i])
    return groups


def _settle(
    slots: SlotMap,
    node: Client,
    positions: list[int],
    outcome: list[Any],
    state: tuple[list[Any], dict[int, Client], dict[int, ResponseError]],
    round_: _Round,
) -> None:
    """Take one node's replies: keep the answers, note the redirected parts."""
    replies, asking, last_error = state
    at = 0
    for i in positions:
        if i in asking:
            at += 1  # ASKING's own reply
        reply = outcome[at]
        at += 1
        if isinstance(reply, ResponseError):
            last_error[i] = reply
            kind, target = slots.redirect(reply, node)
            if kind is Redirect.ASK and target is not None:
                asking[i] = target
                round_.retry.append(i)
                continue
            if kind in (Redirect.MOVED, Redirect.AGAIN):
                asking.pop(i, None)
                round_.wait = round_.wait or kind is Redirect.AGAIN
                round_.retry.append(i)
                continue
        replies[i] = reply
        asking.pop(i, None)


def with_partial(error: BaseException, replies: list[Any]) -> BaseException:
    """`error`, carrying the replies the parts that did run got (None where a part did not),
    for a caller that can use some of them (a fail-open get_many)."""
    if isinstance(error, CacheError):
        error.partial_replies = list(replies)
    return error


def run_parts(slots: SlotMap, parts: list[Part], targets: list[Target]) -> Plan[list[Any]]:
    """Run single-slot commands wherever they belong; return their replies in order (an
    error reply as a ResponseError instance)."""
    yield slots.table_now, ()
    replies: list[Any] = [None] * len(parts)
    todo = list(range(len(parts)))
    asking: dict[int, Client] = {}
    last_error: dict[int, ResponseError] = {}
    for attempt in range(MAX_REDIRECTS + 1):
        groups = _group(slots, todo, asking, parts, targets)
        outcomes = yield send, ([(node, cmds) for node, _, cmds in groups.values()],)
        round_ = _Round()
        timed_out: CacheTimeout | None = None
        for (node, positions, _), outcome in zip(groups.values(), outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                _settle(slots, node, positions, outcome, (replies, asking, last_error), round_)
                continue
            slots.failed(node)
            if any(isinstance(targets[i], ReplicaOf) for i in positions):
                slots.health.mark_down(node)
            if isinstance(outcome, CacheTimeout):
                timed_out = timed_out or outcome
                continue
            # The connection broke: whether these parts ran is unknown; they are sent again
            # only if re-learning the table gives them another node.
            round_.lost += [(i, node, outcome) for i in positions]
        if timed_out is not None:
            # The time is spent: no second try. The other nodes' replies go with the error.
            raise with_partial(timed_out, replies)
        if not round_.retry and not round_.lost:
            return replies
        if attempt == MAX_REDIRECTS:
            break
        if round_.wait:
            yield pause, (RETRY_PAUSE,)
        if round_.lost or round_.wait:
            yield slots.relearn, ()
        for i, node, error in round_.lost:
            if slots.node_for(targets[i]) is node:
                raise with_partial(error, replies)
            round_.retry.append(i)
        todo = sorted(round_.retry)
    for i in todo:
        # Still redirected after every retry: the last error reply is the answer.
        replies[i] = last_error.get(i) or ResponseError(f"no node ran {parts[i][0]!r}")
    return replies
