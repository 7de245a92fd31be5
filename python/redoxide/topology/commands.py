"""What a cluster needs to know about commands: which argument is the key, which commands
split by slot or go to every primary, and how their replies join again. Read from the one
command table of the core (src/commands.rs), which stats, the near cache and replays read too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redoxide import _redoxide

__all__ = [
    "EVERY_PRIMARY",
    "FACTS",
    "SUMMED",
    "combine_for",
    "command_name",
    "first_key",
    "key_arg",
    "slot_of",
    "slot_tag",
]

T = TypeVar("T")

key_slot = _redoxide.key_slot
key_slots = _redoxide.key_slots

#: The command table: {name: (effect, keys, route)} (src/commands.rs says what each means).
FACTS = _redoxide.command_facts()


def _named(keep: Callable[[str, str, str], bool]) -> frozenset[str]:
    return frozenset(name for name, row in FACTS.items() if keep(*row))


#: Commands whose every argument is a key, split by slot, their integer replies summed.
SUMMED = _named(lambda _effect, _keys, route: route == "each_key_summed")
#: Keyless commands that concern every primary's data, and how their replies combine.
EVERY_PRIMARY = _named(lambda _effect, _keys, route: route.startswith("every_primary"))
_SUMMED_REPLIES = _named(lambda _e, _k, route: route in {"each_key_summed", "every_primary_summed"})
_JOINED_REPLIES = _named(lambda _effect, _keys, route: route == "every_primary_joined")
# Keyless commands (those of EVERY_PRIMARY aside, answered by any node).
_KEYLESS = _named(lambda _effect, keys, _route: keys == "none")
# Commands whose (first) key is the third word: after a subcommand, or after the count of
# MSETEX's key-value pairs.
_KEY_THIRD = _named(lambda _effect, keys, _route: keys in ("third", "counted_pairs"))
# The scripts: the keys follow their count.
_SCRIPTS = _named(lambda _effect, keys, _route: keys == "counted")
# The key follows the word STREAMS.
_STREAM_READS = _named(lambda _effect, keys, _route: keys == "streams")


def _upper(arg: Any) -> str:
    if isinstance(arg, bytes):
        return arg.decode("latin-1").upper()
    return str(arg).upper()


def command_name(args: Sequence[Any]) -> str:
    """The command's name, upper-cased."""
    if not args:
        raise ValueError("a command needs at least its name")
    return _upper(args[0])


def key_arg(arg: Any) -> str | bytes:
    """A key argument as the slot hash sees it."""
    if isinstance(arg, (str, bytes)):
        return arg
    return str(arg)


def first_key(args: Sequence[Any]) -> Any:
    """The command's first key (the one its slot follows: slot_of's cases), or None for a
    keyless command."""
    name = command_name(args)
    if name in _SCRIPTS:
        try:
            numkeys = int(args[2])
        except (IndexError, TypeError, ValueError):
            return None  # the server will say what is wrong
        return args[3] if numkeys > 0 and len(args) > 3 else None
    if name in _KEYLESS or len(args) < 2:
        return None
    if name in _KEY_THIRD:
        return args[2] if len(args) > 2 else None
    if name in _STREAM_READS:
        words = [_upper(a) for a in args]
        if "STREAMS" in words and words.index("STREAMS") + 1 < len(args):
            return args[words.index("STREAMS") + 1]
        return None
    return args[1]


def slot_of(args: Sequence[Any]) -> int | None:
    """The slot a command must run in, or None for a keyless command (first_key's, written
    out: a cluster's every routed command comes here)."""
    name = command_name(args)
    if name in _SCRIPTS:
        try:
            numkeys = int(args[2])
        except (IndexError, TypeError, ValueError):
            return None  # the server will say what is wrong
        return key_slot(key_arg(args[3])) if numkeys > 0 and len(args) > 3 else None
    if name in _KEYLESS or len(args) < 2:
        return None
    if name in _KEY_THIRD:
        return key_slot(key_arg(args[2])) if len(args) > 2 else None
    if name in _STREAM_READS:
        words = [_upper(a) for a in args]
        if "STREAMS" in words and words.index("STREAMS") + 1 < len(args):
            return key_slot(key_arg(args[words.index("STREAMS") + 1]))
        return None
    return key_slot(key_arg(args[1]))


def _sum(replies: list[Any]) -> int:
    total: int = sum(replies)
    return total


def _first(replies: list[T]) -> T:
    return replies[0]


def _concat(replies: list[Any]) -> list[Any]:
    return [item for reply in replies for item in reply]


def combine_for(name: str) -> Callable[[list[Any]], Any]:
    """How the replies of a command split over several nodes join into one."""
    if name in _SUMMED_REPLIES:
        return _sum
    if name in _JOINED_REPLIES:
        return _concat
    return _first


# One short hash tag per slot, for companion keys of keys whose own braces defeat tagging.
_slot_tags: list[str] = []


def slot_tag(slot: int) -> str:
    """A short string that hashes to `slot` (`{tag}` puts any key name in that slot)."""
    if not _slot_tags:
        table = [""] * 16384
        left, start = 16384, 0
        while left:
            candidates = [str(i) for i in range(start, start + 65536)]
            for candidate, found in zip(candidates, key_slots(candidates), strict=True):
                if not table[found]:
                    table[found] = candidate
                    left -= 1
            start += 65536
        _slot_tags[:] = table
    return _slot_tags[slot]


def same_slot(key: str, suffix: str) -> str:
    """A companion key name for `key` that a cluster stores in the same hash slot."""
    if "{" not in key and "}" not in key:
        return "{" + key + "}" + suffix
    name = key + suffix
    slot = key_slot(key)
    if key_slot(name) == slot:
        return name  # the key's own {tag} decides
    # Braces that are no tag ("a}b", "x{", "{}x"): lead with a tag of the key's slot.
    return "{" + slot_tag(slot) + "}" + name
