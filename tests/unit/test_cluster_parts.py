"""A cluster's multi-slot calls without a server: the parts plan driven with scripted replies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redoxide import plans
from redoxide.exceptions import ConnectionInterrupted, ResponseError, response_error
from redoxide.options import parse_config
from redoxide.topology import commands, parts
from redoxide.topology.slots import PrimaryAt, SlotMap


class Node:
    def __init__(self, address: str) -> None:
        self.address = address

    def __repr__(self) -> str:
        return f"<Node {self.address}>"


@pytest.fixture
def slots() -> SlotMap:
    slot_map = SlotMap(parse_config("redis://127.0.0.1:7000", {"CLUSTER": True}))
    a, b = Node("127.0.0.1:7000"), Node("127.0.0.1:7001")
    slot_map.table = [a] * 8192 + [b] * 8192
    slot_map.primaries = [a, b]
    return slot_map


def drive(
    plan: plans.Plan[Any], answer: Callable[[Callable[..., Any], tuple[Any, ...]], Any]
) -> Any:
    try:
        call, args = next(plan)
        while True:
            call, args = plan.send(answer(call, args))
    except StopIteration as stop:
        return stop.value


def keys_in(slots: SlotMap) -> tuple[str, str]:
    """A key served by each of the two nodes."""
    low = next(f"k{i}" for i in range(1000) if commands.key_slot(f"k{i}") < 8192)
    high = next(f"k{i}" for i in range(1000) if commands.key_slot(f"k{i}") >= 8192)
    return low, high


def test_parts_go_to_their_nodes_in_one_send(slots: SlotMap) -> None:
    low, high = keys_in(slots)
    sends: list[Any] = []

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if call == slots.table_now:
            return slots.table
        assert call is parts.send
        sends.append(args[0])
        return [[b"reply-" + cmds[0][1].encode()] for _, cmds in args[0]]

    targets = [commands.key_slot(low), commands.key_slot(high)]
    replies = drive(parts.run_parts(slots, [("GET", low), ("GET", high)], targets), answer)
    assert replies == [b"reply-" + low.encode(), b"reply-" + high.encode()]
    assert len(sends) == 1
    assert [node.address for node, _ in sends[0]] == ["127.0.0.1:7000", "127.0.0.1:7001"]


def test_only_redirected_parts_are_sent_again(slots: SlotMap) -> None:
    low, high = keys_in(slots)
    high_slot = commands.key_slot(high)
    sends: list[Any] = []

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if call == slots.table_now:
            return slots.table
        sends.append([(node.address, cmds) for node, cmds in args[0]])
        if len(sends) == 1:
            moved = response_error(
                "MOVED", f"MOVED {high_slot} 127.0.0.1:7002", high_slot, "127.0.0.1:7002"
            )
            return [[b"low"], [moved]]
        return [[b"high"]]

    targets = [commands.key_slot(low), high_slot]
    replies = drive(parts.run_parts(slots, [("GET", low), ("GET", high)], targets), answer)
    assert replies == [b"low", b"high"]
    assert sends[1] == [("127.0.0.1:7002", [("GET", high)])]
    # The table now names the new owner for that slot, and is to be re-learnt.
    assert slots.table is not None and slots.table[high_slot].address == "127.0.0.1:7002"
    assert slots.suspect


def test_ask_resends_with_asking_and_leaves_the_table_alone(slots: SlotMap) -> None:
    low, _ = keys_in(slots)
    slot = commands.key_slot(low)
    sends: list[Any] = []

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if call == slots.table_now:
            return slots.table
        sends.append([(node.address, cmds) for node, cmds in args[0]])
        if len(sends) == 1:
            return [[response_error("ASK", f"ASK {slot} 127.0.0.1:7003", slot, "127.0.0.1:7003")]]
        return [[True, b"migrated"]]

    assert drive(parts.run_parts(slots, [("GET", low)], [slot]), answer) == [b"migrated"]
    assert sends[1] == [("127.0.0.1:7003", [("ASKING",), ("GET", low)])]
    assert slots.table is not None and slots.table[slot].address == "127.0.0.1:7000"


def test_tryagain_pauses_and_relearns_before_resending(slots: SlotMap) -> None:
    low, _ = keys_in(slots)
    steps: list[Any] = []

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        steps.append(call)
        if call == slots.table_now:
            return slots.table
        if call is plans.pause:
            assert args == (parts.RETRY_PAUSE,)
            return None
        if call == slots.relearn:
            return None
        if steps.count(parts.send) == 1:
            return [[response_error("TRYAGAIN", "TRYAGAIN Multiple keys request")]]
        return [[b"v"]]

    assert drive(parts.run_parts(slots, [("GET", low)], [commands.key_slot(low)]), answer) == [b"v"]
    assert steps[2:4] == [plans.pause, slots.relearn]


def test_a_lost_connection_raises_unless_the_slot_moved(slots: SlotMap) -> None:
    low, _ = keys_in(slots)

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if call == slots.table_now:
            return slots.table
        if call == slots.relearn:
            return None  # the table still names the same node
        return [ConnectionInterrupted("broke")]

    with pytest.raises(ConnectionInterrupted):
        drive(parts.run_parts(slots, [("SET", low, b"v")], [commands.key_slot(low)]), answer)


def test_error_replies_that_are_no_redirect_come_back_as_values(slots: SlotMap) -> None:
    low, _ = keys_in(slots)

    def answer(call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if call == slots.table_now:
            return slots.table
        return [[response_error("WRONGTYPE", "WRONGTYPE Operation")]]

    (reply,) = drive(parts.run_parts(slots, [("GET", low)], [commands.key_slot(low)]), answer)
    assert isinstance(reply, ResponseError) and reply.code == "WRONGTYPE"


def test_every_primary_targets_follow_the_table(slots: SlotMap) -> None:
    assert [slots.node_for(PrimaryAt(k)).address for k in range(3)] == [
        "127.0.0.1:7000",
        "127.0.0.1:7001",
        "127.0.0.1:7000",
    ]


@pytest.mark.parametrize(
    ("command", "slot_key"),
    [
        (("GET", "a"), "a"),
        (("EVAL", "return 1", 1, "b"), "b"),
        (("OBJECT", "ENCODING", "c"), "c"),
        (("XREAD", "COUNT", 1, "STREAMS", "d", "0"), "d"),
        (("PING",), None),
        (("EVAL", "return 1", 0), None),
    ],
)
def test_slot_of_finds_the_key_argument(command: tuple[Any, ...], slot_key: str | None) -> None:
    expected = None if slot_key is None else commands.key_slot(slot_key)
    assert commands.slot_of(command) == expected


@pytest.mark.parametrize("key", ["plain", "a}b", "x{", "{}x", "{tag}name"])
def test_companion_keys_share_the_key_slot(key: str) -> None:
    assert commands.key_slot(commands.same_slot(key, ":lock")) == commands.key_slot(key)
