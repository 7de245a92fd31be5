"""OPTIONS["NEAR_CACHE"]: which keys this process keeps in its own memory, and the bounds; the
name of a near cache's database marker."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redoxide.exceptions import ConfigurationError

__all__ = ["MAX_ADMIT_AFTER", "NearCacheConfig", "marker_name", "parse_near_cache"]

_KEYS = ("PREFIXES", "ADMIT_AFTER_READS", "MAX_BYTES", "MAX_VALUE_BYTES", "MAX_TTL", "MAX_STALE_MS")

#: The most reads ADMIT_AFTER_READS may ask for (the sketch's counters halve as reads go by:
#: a key must be read this often within about one window to be kept).
MAX_ADMIT_AFTER = 64


@dataclass(frozen=True)
class NearCacheConfig:
    """A parsed OPTIONS["NEAR_CACHE"]."""

    #: Kept locally: keys starting with one of these (the key given to the cache, before
    #: KEY_PREFIX and VERSION; with a custom KEY_FUNCTION, the key as stored on the server).
    #: "" keeps every key of the cache's version.
    prefixes: tuple[str, ...]
    #: Admission by use: a key under the prefixes is kept only once it has been read this
    #: many times lately (None: from its first read). The server then tracks only the keys
    #: kept (OPTIN), not every key under the prefixes (BCAST).
    admit_after: int | None = None
    #: The most the kept values (and their keys) take in each process, in bytes.
    max_bytes: int = 32 * 2**20
    #: Values larger than this once encoded are never kept.
    max_value_bytes: int = 64 * 1024
    #: A kept value is dropped after this many seconds at the latest (or its own TTL).
    max_ttl: float = 60.0
    #: No local hit once the tracking connection has not answered for this many ms.
    max_stale_ms: int = 500


def _fail(name: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"redoxide: OPTIONS[{name!r}] {message}")


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(name, f"must be a whole number from {low:,} to {high:,}, not {value!r}")
    return value


def _prefixes(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise _fail(name, f"must be a non-empty list of key prefixes, not {value!r}")
    for prefix in value:
        if not isinstance(prefix, str):
            raise _fail(name, f"must hold strings, not {prefix!r}")
    return tuple(value)


def parse_near_cache(option: str, value: Any) -> NearCacheConfig | None:
    """Validate OPTIONS["NEAR_CACHE"] (a dict; None or False: off)."""
    if value is None or value is False:
        return None
    if not isinstance(value, dict):
        raise _fail(
            option, f"must be a dict with PREFIXES or ADMIT_AFTER_READS and limits, not {value!r}"
        )
    unknown = sorted(str(k) for k in value if str(k).upper() not in _KEYS)
    if unknown:
        raise _fail(option, f"has unknown keys {unknown}; known: {', '.join(_KEYS)}")
    opts = {str(k).upper(): v for k, v in value.items()}
    kwargs: dict[str, Any] = {}
    if "ADMIT_AFTER_READS" in opts:
        kwargs["admit_after"] = _int(
            f"{option}.ADMIT_AFTER_READS", opts["ADMIT_AFTER_READS"], 1, MAX_ADMIT_AFTER
        )
    if "PREFIXES" in opts:
        kwargs["prefixes"] = _prefixes(f"{option}.PREFIXES", opts["PREFIXES"])
    elif "admit_after" in kwargs:
        kwargs["prefixes"] = ("",)  # admission by use picks among all of the cache's keys
    else:
        raise _fail(
            option,
            "needs PREFIXES (the key prefixes to keep in process memory) or ADMIT_AFTER_READS "
            "(keep the keys read that often)",
        )
    if "MAX_BYTES" in opts:
        kwargs["max_bytes"] = _int(f"{option}.MAX_BYTES", opts["MAX_BYTES"], 4096, 2**40)
    if "MAX_VALUE_BYTES" in opts:
        kwargs["max_value_bytes"] = _int(
            f"{option}.MAX_VALUE_BYTES", opts["MAX_VALUE_BYTES"], 1, 2**40
        )
    if "MAX_STALE_MS" in opts:
        kwargs["max_stale_ms"] = _int(f"{option}.MAX_STALE_MS", opts["MAX_STALE_MS"], 10, 60_000)
    if "MAX_TTL" in opts:
        ttl = opts["MAX_TTL"]
        if (
            isinstance(ttl, bool)
            or not isinstance(ttl, (int, float))
            or not math.isfinite(ttl)
            or not 0.001 <= ttl <= 86400
        ):
            raise _fail(f"{option}.MAX_TTL", f"must be seconds from 0.001 to 86400, not {ttl!r}")
        kwargs["max_ttl"] = float(ttl)
    config = NearCacheConfig(**kwargs)
    if config.max_value_bytes > config.max_bytes:
        raise _fail(f"{option}.MAX_VALUE_BYTES", "must not be larger than MAX_BYTES")
    return config


#: Where the key function's version goes in a database marker's name: no version the cache
#: has (those are numbers), so keys(), delete_pattern() and clear() pass the marker by.
_MARKER_VERSION = "redoxide"


def marker_name(key_func: Callable[..., Any], key_prefix: str, token: str) -> str:
    """The name of a near cache's database marker (the key its tracking connections keep to
    see a SWAPDB): one the cache's own key function makes, with KEY_PREFIX and the version
    "redoxide" (for Django's, ``KEY_PREFIX:redoxide:near-<token>``), so an ACL user limited
    to the application's keys (``~KEY_PREFIX:*``) may write it. A key function that cannot
    make it (one that wants a number for the version) gets ``redoxide:near:<token>``."""
    try:
        name = key_func(f"near-{token}", key_prefix, _MARKER_VERSION)
    except Exception:
        name = None
    if isinstance(name, str) and name:
        return name
    return f"redoxide:near:{token}"
