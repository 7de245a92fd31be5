"""What a raw command's reply becomes: redis-py's reply for it (RESP2, bytes not decoded),
one converter per kind of reply, used by ``redoxide._raw_commands``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "Convert",
    "as_is",
    "float_or_none",
    "ok",
    "pairs_dict",
    "parse_info",
    "pong",
    "rank_score",
    "scan_reply",
    "score_cast",
    "scores",
    "status",
    "to_float",
    "true",
]

Convert = Callable[[Any], Any]


def as_is(reply: Any) -> Any:
    return reply


def ok(reply: Any) -> bool | None:
    # redis-py: True when stored, None when NX / XX kept SET from storing.
    return True if reply is True or reply == b"OK" else None


def pairs_dict(reply: Any) -> dict[Any, Any]:
    pairs = iter(reply)
    return dict(zip(pairs, pairs, strict=True))


def float_or_none(reply: Any) -> float | None:
    return None if reply is None else float(reply)


def score_cast(cast: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A score_cast_func as redis-py applies it: a score it cannot read as it is (an int cast
    of b"2.5" or b"1e+18") is read through float first."""
    if cast is float:
        return cast

    def cast_score(score: Any) -> Any:
        try:
            return cast(score)
        except (ValueError, TypeError):
            return cast(float(score))

    return cast_score


def scores(cast: Callable[[Any], Any]) -> Convert:
    """ZRANGE ... WITHSCORES: the flat reply as (member, score) pairs."""
    cast = score_cast(cast)

    def convert(reply: Any) -> list[tuple[Any, Any]]:
        items = iter(reply)
        return [(member, cast(score)) for member, score in zip(items, items, strict=True)]

    return convert


def rank_score(cast: Callable[[Any], Any]) -> Convert:
    """ZRANK ... WITHSCORE: [rank, score], or None for a missing member."""
    cast = score_cast(cast)
    return lambda reply: [reply[0], cast(reply[1])] if reply else reply


def scan_reply(reply: Any) -> tuple[int, list[Any]]:
    return int(reply[0]), reply[1]


def true(reply: Any) -> bool:
    # redis-py's bool_ok: a +OK reply is True.
    return reply is True or reply == b"OK"


def to_float(reply: Any) -> float:
    return float(reply)


def status(reply: Any) -> Any:
    # A status reply (+string) arrives as str; redis-py gives bytes.
    return reply.encode() if isinstance(reply, str) else reply


def pong(reply: Any) -> bool:
    return reply in (b"PONG", "PONG")


def _info_value(text: str) -> Any:
    """One INFO value as redis-py gives it: a number, a list, a dict of k=v items, or text."""
    if "=" in text:
        fields: dict[str, Any] = {}
        for item in filter(None, text.split(",")):
            name, sep, value = item.rpartition("=")
            if sep:
                fields[name] = _info_value(value)
            else:
                fields[value] = True
        return fields
    if "," in text:
        return [_info_value(item) for item in text.split(",") if item]
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


def parse_info(reply: Any) -> dict[str, Any]:
    """INFO's text as redis-py's dict: every `name:value` line, `module` lines gathered in
    "modules", anything else in "__raw__"."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    info: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if ":" not in line:
            info.setdefault("__raw__", []).append(line)
            continue
        # A value may hold ':' (and only cmdstat_host's name does).
        name, _, value = (
            line.rpartition(":") if line.startswith("cmdstat_host:") else (line.partition(":"))
        )
        if name == "module":
            info.setdefault("modules", []).append(_info_value(value))
        else:
            info[name] = _info_value(value)
    return info
