"""The small checks every option parser shares: an error naming its option, a flag, a string,
a list of (host, port) addresses. Here, apart from options.py, so that the topology kinds
(redoxide.topology.kinds) parse their own options with them."""

from __future__ import annotations

from typing import Any

from redoxide._location import is_number
from redoxide.exceptions import ConfigurationError

__all__ = ["fail", "flag", "optional_str", "sentinel_addresses"]


def fail(option: str | tuple[str, ...], message: str) -> ConfigurationError:
    """An error naming an option: OPTIONS['DB'], or for a key of a dict option, a tuple
    naming both: OPTIONS['CONNECTION_POOL_KWARGS']['db']."""
    path = (option,) if isinstance(option, str) else option
    return ConfigurationError(f"redoxide: OPTIONS{''.join(f'[{p!r}]' for p in path)} {message}")


def optional_str(option: str | tuple[str, ...], value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise fail(option, f"must be a string, not {type(value).__name__}")


def flag(opts: dict[str, Any], names: dict[str, str], key: str) -> bool | None:
    if key not in opts:
        return None
    if not isinstance(opts[key], bool):
        raise fail(names[key], f"must be True or False, not {opts[key]!r}")
    return bool(opts[key])


def sentinel_addresses(option: str, value: Any) -> tuple[tuple[str, int], ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
        raise fail(option, "must be a non-empty list of (host, port) pairs")
    found = []
    for item in value:
        if isinstance(item, str):
            host, _, port_text = item.rpartition(":")
            item = (host, int(port_text)) if is_number(port_text) and host else item
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not isinstance(item[0], str)
            or isinstance(item[1], bool)
            or not isinstance(item[1], int)
            or not 0 < item[1] < 65536
        ):
            raise fail(option, f"entries must be (host, port) pairs, not {item!r}")
        found.append((item[0], item[1]))
    return tuple(found)
