"""A raw command's arguments as redis-py sends them: its encoder's rules for values, its
expiry options, its "a list or the arguments" and its checks, so ``get_redis_connection()``
takes what redis-py takes and refuses what it refuses, with ``DataError``, before sending.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from redoxide._protocols import Arg
from redoxide.exceptions import DataError

__all__ = [
    "Expiry",
    "Moment",
    "check_one",
    "counted",
    "encoded",
    "expire_flags",
    "expiry",
    "limit_option",
    "list_or_args",
    "lpos_options",
    "milliseconds",
    "scan_command",
    "seconds",
    "unix",
    "unix_ms",
]

#: A relative expiry: seconds (or ms) as an int or a digit string, or a timedelta.
Expiry = int | str | datetime.timedelta
#: An absolute expiry: a Unix time as an int, or a datetime.
Moment = int | datetime.datetime

# The types the Rust core sends as redis-py's encoder does; anything else is converted here.
_SENT_AS_IS = frozenset((str, bytes, int))
_ONE_MS = datetime.timedelta(milliseconds=1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _encode(value: Any) -> Arg:
    """One argument as redis-py's Encoder.encode turns it into bytes."""
    if type(value) in _SENT_AS_IS:
        return value  # type: ignore[no-any-return]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool):
        # A bool is an int to Python; redis-py refuses it rather than store b"True".
        raise DataError(
            "Invalid input of type: 'bool'. Convert to a bytes, string, int or float first."
        )
    if isinstance(value, (int, float)):
        return repr(value)  # redis-py's spelling: 1e+16, inf, an IntEnum's repr
    if isinstance(value, str):
        return str(value)
    raise DataError(
        f"Invalid input of type: '{type(value).__name__}'. "
        "Convert to a bytes, string, int or float first."
    )


def encoded(command: tuple[Any, ...]) -> tuple[Arg, ...]:
    """The command with every argument as redis-py would send it (the same tuple when each is
    a str, bytes or int already, as nearly every command's are)."""
    for arg in command:
        if type(arg) not in _SENT_AS_IS:
            return tuple(_encode(item) for item in command)
    return command


def check_one(message: str, *given: Any) -> None:
    """Raise DataError(message) when more than one of `given` is set (redis-py's
    at_most_one_value_set)."""
    if sum(1 for flag in given if flag) > 1:
        raise DataError(message)


def list_or_args(keys: Any, args: Iterable[Any]) -> list[Any]:
    """`keys` as a list (one key when it is a str, bytes or not iterable), then `args`."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        names = [keys]
    else:
        try:
            names = list(keys)
        except TypeError:
            names = [keys]
    names.extend(args)
    return names


def seconds(time: Any) -> Any:
    """A relative time in seconds: a timedelta's whole seconds, anything else as given."""
    return int(time.total_seconds()) if isinstance(time, datetime.timedelta) else time


def _whole_ms(delta: datetime.timedelta) -> int:
    # Integer arithmetic (total_seconds() * 1000 can come out 1 ms low), toward zero.
    return -(-delta // _ONE_MS) if delta < datetime.timedelta(0) else delta // _ONE_MS


def milliseconds(time: Any) -> Any:
    """A relative time in milliseconds: a timedelta's whole ms, anything else as given."""
    return _whole_ms(time) if isinstance(time, datetime.timedelta) else time


def unix(when: Any) -> Any:
    """An absolute time in Unix seconds: a datetime's, anything else as given."""
    return int(when.timestamp()) if isinstance(when, datetime.datetime) else when


def unix_ms(when: Any) -> Any:
    """An absolute time in Unix milliseconds: a datetime's (exact), anything else as given."""
    if not isinstance(when, datetime.datetime):
        return when
    if when.utcoffset() is None:  # local time: whole seconds from the OS, then the µs
        whole = int(when.replace(microsecond=0).timestamp())
        return _whole_ms(datetime.timedelta(seconds=whole, microseconds=when.microsecond))
    return _whole_ms(when - _EPOCH)


def _relative(name: str, time: Any, convert: Any) -> Any:
    if isinstance(time, datetime.timedelta):
        return convert(time)
    if isinstance(time, int):
        return time
    if isinstance(time, str) and time.isdecimal():
        return int(time)
    raise DataError(f"{name} must be datetime.timedelta, int, or a digit string")


def expiry(ex: Any, px: Any, exat: Any, pxat: Any) -> tuple[Arg, ...]:
    """SET's and GETEX's EX / PX / EXAT / PXAT option, the first one given (the caller has
    checked that only one is)."""
    if ex is not None:
        return ("EX", _relative("ex", ex, seconds))
    if px is not None:
        return ("PX", _relative("px", px, milliseconds))
    if exat is not None:
        return ("EXAT", unix(exat))
    if pxat is not None:
        return ("PXAT", unix_ms(pxat))
    return ()


def expire_flags(nx: bool, xx: bool, gt: bool, lt: bool) -> tuple[str, ...]:
    """EXPIRE's (and PEXPIRE's, EXPIREAT's, PEXPIREAT's) NX / XX / GT / LT, those asked for;
    the server refuses the combinations it does not take."""
    return tuple(
        name for name, wanted in (("NX", nx), ("XX", xx), ("GT", gt), ("LT", lt)) if wanted
    )


def limit_option(offset: int | None, num: int | None, names: str) -> tuple[Any, ...]:
    """LIMIT offset num, both or neither (as redis-py insists)."""
    if (offset is None) != (num is None):
        raise DataError(f"{names} must both be specified")
    return () if offset is None or num is None else ("LIMIT", offset, num)


def scan_command(cursor: Any, match: Any, count: int | None, _type: str | None) -> Any:
    command: tuple[Any, ...] = ("SCAN", cursor)
    if match is not None:
        command += ("MATCH", match)
    if count is not None:
        command += ("COUNT", count)
    if _type is not None:
        command += ("TYPE", _type)
    return command


def lpos_options(rank: int | None, count: int | None, maxlen: int | None) -> tuple[Any, ...]:
    """LPOS's RANK, COUNT and MAXLEN, those given."""
    given = (("RANK", rank), ("COUNT", count), ("MAXLEN", maxlen))
    return tuple(item for option, value in given if value is not None for item in (option, value))


def counted(command: tuple[Any, ...], count: int | None) -> tuple[Any, ...]:
    return command if count is None else (*command, count)
