"""Timeout rules, sync and async.

DEFAULT_TIMEOUT (the TIMEOUT setting, 300 s by default), None = never expire (TTL -1 on the
server), 0 or negative = expire now, float seconds kept to the millisecond (checked with PTTL on
the server). A timeout of the wrong type, not finite, or beyond what Redis can store is refused
before anything is sent, and the cache stays usable. Key making is in test_keys.py, ttl /
expire and their kin in test_expiry.py.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.backend import is_redoxide
from support.dispatch import Ops

redoxide_only = pytest.mark.skipif(not is_redoxide(), reason="redoxide only")


def make_ops(make_cache: Callable[..., Any], mode: str, **kwargs: Any) -> Ops:
    return Ops(make_cache(**kwargs), mode)


# -- timeouts ----------------------------------------------------------------------------


def test_default_timeout_is_300_seconds(ops: Ops, redis_client: Any) -> None:
    ops.set("k", "v")
    assert 299_000 < redis_client.pttl(":1:k") <= 300_000


def test_timeout_setting_is_the_default(
    make_cache: Callable[..., Any], mode: str, redis_client: Any
) -> None:
    ops = make_ops(make_cache, mode, TIMEOUT=120)
    ops.set("a", "v")
    ops.add("b", "v")
    ops.set_many({"c": 1, "d": "x"})
    ops.get_or_set("e", "v")
    for key in ("a", "b", "c", "d", "e"):
        assert 119_000 < redis_client.pttl(f":1:{key}") <= 120_000, key


def test_timeout_setting_none_means_forever(
    make_cache: Callable[..., Any], mode: str, redis_client: Any
) -> None:
    ops = make_ops(make_cache, mode, TIMEOUT=None)
    ops.set("a", "v")
    ops.set_many({"b": 1})
    assert redis_client.ttl(":1:a") == -1
    assert redis_client.ttl(":1:b") == -1


def test_timeout_setting_zero_expires_everything_now(
    make_cache: Callable[..., Any], mode: str, redis_client: Any
) -> None:
    ops = make_ops(make_cache, mode, TIMEOUT=0)
    ops.set("a", "v")
    ops.add("b", "v")
    ops.set_many({"c": 1})
    assert redis_client.keys("*") == []
    assert ops.get("a") is None


def test_none_timeout_never_expires(ops: Ops, redis_client: Any) -> None:
    ops.set("a", "v", None)
    ops.add("b", "v", None)
    ops.set_many({"c": "v", "d": 4}, None)
    ops.get_or_set("e", "v", None)
    for key in ("a", "b", "c", "d", "e"):
        assert redis_client.ttl(f":1:{key}") == -1, key
    assert ops.get("a") == "v"
    assert ops.get("d") == 4


def test_set_with_none_removes_an_existing_expiry(ops: Ops, redis_client: Any) -> None:
    ops.set("k", "v", 100)
    assert redis_client.ttl(":1:k") > 0
    ops.set("k", "w", None)
    assert redis_client.ttl(":1:k") == -1


@pytest.mark.parametrize("timeout", [0, -1, -100, -0.5])
def test_zero_or_negative_timeout_expires_now(ops: Ops, redis_client: Any, timeout: float) -> None:
    ops.set("old", "v")
    ops.set("old", "new", timeout)
    assert ops.get("old") is None
    assert redis_client.exists(":1:old") == 0
    ops.set("fresh", "v", timeout)
    ops.add("added", "v", timeout)
    ops.set_many({"m1": "v", "m2": 2}, timeout)
    assert ops.get("fresh") is None
    assert ops.get("added") is None
    assert ops.get_many(["m1", "m2"]) == {}
    assert ops.has_key("m2") is False
    for key in ("fresh", "added", "m1", "m2"):
        assert redis_client.exists(f":1:{key}") == 0, key


@pytest.mark.parametrize("timeout", [0, -1])
def test_touch_with_zero_or_negative_timeout_expires_now(
    ops: Ops, redis_client: Any, timeout: int
) -> None:
    ops.set("k", "v")
    ops.touch("k", timeout)
    assert ops.get("k") is None
    assert redis_client.exists(":1:k") == 0


@pytest.mark.parametrize(
    ("timeout", "expected_ms"), [(1.234, 1234), (0.25, 250), (2.5, 2500), (60.001, 60001)]
)
def test_float_timeout_kept_to_the_millisecond(
    ops: Ops, redis_client: Any, timeout: float, expected_ms: int
) -> None:
    def kept(*keys: str) -> None:
        # Read right after the write: within 200 ms below the requested expiry (the time
        # spent since), never above.
        for key in keys:
            pttl = redis_client.pttl(f":1:{key}")
            assert expected_ms - 200 < pttl <= expected_ms, (key, pttl)

    ops.set("a", "v", timeout)
    kept("a")
    ops.add("b", "v", timeout)
    kept("b")
    ops.set_many({"c": "v", "d": 7}, timeout)
    kept("c", "d")
    ops.set("e", "v", None)
    assert ops.touch("e", timeout) is True
    kept("e")
    assert ops.get_or_set("f", "v", timeout) == "v"
    kept("f")


def test_short_float_timeout_actually_expires(ops: Ops) -> None:
    ops.set("k", "v", 0.5)
    ops.set_many({"m": "v"}, 0.5)
    assert ops.get("k") == "v"
    time.sleep(0.8)
    assert ops.get("k") is None
    assert ops.get_many(["m"]) == {}


def test_touch_sets_updates_and_removes_expiry(ops: Ops, redis_client: Any) -> None:
    ops.set("k", "v", 10)
    assert ops.touch("k", 100) is True
    assert 99_000 < redis_client.pttl(":1:k") <= 100_000
    assert ops.touch("k", None) is True
    assert redis_client.ttl(":1:k") == -1
    assert ops.touch("k") is True  # DEFAULT_TIMEOUT: back to 300 s
    assert 299_000 < redis_client.pttl(":1:k") <= 300_000
    assert ops.touch("missing", 100) is False
    assert redis_client.exists(":1:missing") == 0


def test_incr_and_decr_keep_the_expiry(ops: Ops, redis_client: Any) -> None:
    ops.set("n", 10, 100)
    assert ops.incr("n", 5) == 15
    assert ops.decr("n") == 14
    assert 99_000 < redis_client.pttl(":1:n") <= 100_000
    assert ops.get("n") == 14


# -- key warnings (Django's memcached portability warnings) --------------------------------


# -- refused timeouts --------------------------------------------------------------------------


TIMEOUT_WRITES: list[tuple[str, Callable[[Ops, Any], object]]] = [
    ("set", lambda ops, t: ops.set("k", "v", timeout=t)),
    ("add", lambda ops, t: ops.add("k", "v", timeout=t)),
    ("set_many", lambda ops, t: ops.set_many({"k": "v"}, timeout=t)),
    ("get_or_set", lambda ops, t: ops.get_or_set("k", "v", timeout=t)),
    ("touch", lambda ops, t: ops.touch("existing", timeout=t)),
    ("expire", lambda ops, t: ops.expire("existing", t)),
]


def _assert_refused(
    ops: Ops,
    redis_client: Any,
    timeout: Any,
    error: type[Exception],
    match: str,
) -> None:
    ops.set("existing", "e", timeout=None)
    for name, write in TIMEOUT_WRITES:
        with pytest.raises(error, match=match):
            write(ops, timeout)
        assert redis_client.keys("*") == [b":1:existing"], name
        assert redis_client.ttl(":1:existing") == -1, f"{name} changed the expiry"


@redoxide_only
@pytest.mark.parametrize(
    "timeout",
    ["10", b"10", object(), [10], True, False],
    ids=["str", "bytes", "object", "list", "True", "False"],
)
def test_timeout_of_the_wrong_type_is_a_type_error(
    ops: Ops, redis_client: Any, timeout: Any
) -> None:
    """A timeout must be a number of seconds or None. Stricter than Django's builtin, which
    runs int() over it (so "10" means 10 s and True 1 s): a string is a bug in the caller, and
    a bool almost always a misplaced argument."""
    _assert_refused(ops, redis_client, timeout, TypeError, "number of seconds or None")


@redoxide_only
@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_timeout_is_a_value_error(ops: Ops, redis_client: Any, timeout: float) -> None:
    """NaN and infinities raise ValueError before sending (Django's builtin raises ValueError
    or OverflowError from int()). "Forever" is timeout=None."""
    _assert_refused(ops, redis_client, timeout, ValueError, "finite")


@redoxide_only
@pytest.mark.parametrize(
    "timeout", [1e300, 10**30, 2**63 / 1000], ids=["1e300", "10**30", "2**63ms"]
)
def test_timeout_beyond_what_redis_can_store_is_a_value_error(
    ops: Ops, redis_client: Any, timeout: float
) -> None:
    """A finite but astronomically long timeout raises ValueError naming the limit before
    anything is sent (was OverflowError from the Rust core for set, and a server error reply
    for touch, after a round trip)."""
    _assert_refused(ops, redis_client, timeout, ValueError, "at most")


@redoxide_only
def test_longest_allowed_timeouts_work(ops: Ops, redis_client: Any) -> None:
    century = 100 * 365 * 86400
    ops.set("k", "v", timeout=century)
    assert ops.get("k") == "v"
    assert redis_client.ttl(":1:k") > century - 10
    ops.set("k", "v", timeout=2**61 // 1000)  # far in the future, yet under the limit
    assert ops.get("k") == "v"
    assert redis_client.pttl(":1:k") > 2**60


@redoxide_only
def test_wrong_timeout_in_a_call_leaves_the_cache_usable(ops: Ops) -> None:
    for bad in ("10", math.nan, 1e300):
        with pytest.raises((TypeError, ValueError)):
            ops.set("k", "v", timeout=bad)
    ops.set("k", "v", timeout=None)
    assert ops.get("k") == "v"


# -- expire-now writes -------------------------------------------------------------------------


@redoxide_only
def test_add_with_zero_timeout_stores_nothing(cache: Any, redis_client: Any) -> None:
    assert cache.add("z", 1, timeout=0) is True
    assert redis_client.exists(cache.make_key("z")) == 0
    cache.set("z", 2)
    assert cache.add("z", 3, timeout=0) is False
    assert asyncio.run(cache.aadd("y", 1, timeout=0)) is True
    assert cache.get_or_set("w", 5, timeout=0) == 5
    assert redis_client.exists(cache.make_key("w")) == 0
