"""Timeout rules and key making, sync and async.

Timeouts: DEFAULT_TIMEOUT (the TIMEOUT setting, 300 s by default), None = never expire
(TTL -1 on the server), 0 or negative = expire now, float seconds kept to the millisecond
(checked with PTTL on the server). Keys: KEY_PREFIX, VERSION, KEY_FUNCTION (dotted path and
callable) and Django's CacheKeyWarning for keys memcached would reject.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache.backends.base import CacheKeyWarning
from helpers_behaviour import MODES, Ops, custom_key_func

pytestmark = pytest.mark.parametrize("mode", MODES)


@pytest.fixture
def ops(cache: Any, mode: str) -> Ops:
    return Ops(cache, mode)


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
    ops.set("a", "v", timeout)
    ops.add("b", "v", timeout)
    ops.set_many({"c": "v", "d": 7}, timeout)
    ops.set("e", "v", None)
    assert ops.touch("e", timeout) is True
    assert ops.get_or_set("f", "v", timeout) == "v"
    for key in ("a", "b", "c", "d", "e", "f"):
        pttl = redis_client.pttl(f":1:{key}")
        # Within 200 ms below the requested expiry (time spent since the call), never above.
        assert expected_ms - 200 < pttl <= expected_ms, (key, pttl)


def test_short_float_timeout_actually_expires(ops: Ops) -> None:
    ops.set("k", "v", 0.1)
    ops.set_many({"m": "v"}, 0.1)
    assert ops.get("k") == "v"
    time.sleep(0.25)
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


# -- keys ----------------------------------------------------------------------------------


def test_default_key_layout_is_prefix_version_key(ops: Ops, redis_client: Any) -> None:
    ops.set("plain", "v")
    assert redis_client.exists(":1:plain") == 1
    assert redis_client.keys("*") == [b":1:plain"]


def test_key_prefix_and_version(
    make_cache: Callable[..., Any], mode: str, redis_client: Any
) -> None:
    ops = make_ops(make_cache, mode, KEY_PREFIX="site", VERSION=3)
    ops.set("k", "v3")
    ops.set("k", "v5", version=5)
    assert redis_client.exists("site:3:k") == 1
    assert redis_client.exists("site:5:k") == 1
    assert ops.get("k") == "v3"
    assert ops.get("k", version=5) == "v5"
    assert ops.get("k", version=1) is None
    assert ops.has_key("k", version=4) is False
    ops.set_many({"a": 1, "b": 2}, version=7)
    assert sorted(redis_client.keys("site:7:*")) == [b"site:7:a", b"site:7:b"]
    assert ops.get_many(["a", "b"], version=7) == {"a": 1, "b": 2}
    assert ops.get_many(["a", "b"]) == {}
    ops.delete_many(["a"], version=7)
    assert redis_client.exists("site:7:a") == 0
    assert redis_client.exists("site:7:b") == 1


def test_other_prefix_does_not_see_the_keys(make_cache: Callable[..., Any], mode: str) -> None:
    one = make_ops(make_cache, mode, KEY_PREFIX="one")
    two = make_ops(make_cache, mode, KEY_PREFIX="two")
    one.set("k", "from one")
    assert two.get("k") is None
    assert two.has_key("k") is False
    two.set("k", "from two")
    assert one.get("k") == "from one"


def test_incr_version_moves_the_key(
    make_cache: Callable[..., Any], mode: str, redis_client: Any
) -> None:
    ops = make_ops(make_cache, mode, KEY_PREFIX="p")
    ops.set("k", {"v": 1}, 100)
    assert ops.incr_version("k") == 2
    assert redis_client.exists("p:1:k") == 0
    assert redis_client.exists("p:2:k") == 1
    assert ops.get("k", version=2) == {"v": 1}
    assert ops.decr_version("k", version=2) == 1
    assert redis_client.exists("p:2:k") == 0
    assert ops.get("k") == {"v": 1}


@pytest.mark.parametrize(
    "key_function", [custom_key_func, "helpers_behaviour.custom_key_func"], ids=["callable", "path"]
)
def test_custom_key_function(
    make_cache: Callable[..., Any], mode: str, redis_client: Any, key_function: object
) -> None:
    ops = make_ops(make_cache, mode, KEY_PREFIX="pre", VERSION=2, KEY_FUNCTION=key_function)
    ops.set("k", "v")
    ops.set_many({"a": 1, "b": "x"})
    assert sorted(redis_client.keys("*")) == [
        b"custom|pre|2|a",
        b"custom|pre|2|b",
        b"custom|pre|2|k",
    ]
    assert ops.get("k") == "v"
    assert ops.get_many(["a", "b", "zz"]) == {"a": 1, "b": "x"}
    assert ops.incr("a") == 2
    assert redis_client.get("custom|pre|2|a") == b"2"
    ops.delete("k")
    assert redis_client.exists("custom|pre|2|k") == 0


def test_non_string_keys_are_formatted_like_django(ops: Ops, redis_client: Any) -> None:
    ops.set(42, "int key")
    ops.set_many({7: "seven"})
    assert sorted(redis_client.keys("*")) == [b":1:42", b":1:7"]
    assert ops.get(42) == "int key"
    assert ops.get_many([7, 42]) == {7: "seven", 42: "int key"}


def test_unicode_key_stored_as_utf8(ops: Ops, redis_client: Any) -> None:
    ops.set("ключ-é", "v")
    assert redis_client.keys("*") == [":1:ключ-é".encode()]
    assert ops.get("ключ-é") == "v"


# -- key warnings (Django's memcached portability warnings) --------------------------------

WARNING_CALLS: list[tuple[str, Callable[[Ops, str], object]]] = [
    ("get", lambda ops, key: ops.get(key)),
    ("set", lambda ops, key: ops.set(key, "v")),
    ("add", lambda ops, key: ops.add(key, "v")),
    ("touch", lambda ops, key: ops.touch(key)),
    ("delete", lambda ops, key: ops.delete(key)),
    ("has_key", lambda ops, key: ops.has_key(key)),
    ("get_many", lambda ops, key: ops.get_many([key])),
    ("set_many", lambda ops, key: ops.set_many({key: "v"})),
    ("delete_many", lambda ops, key: ops.delete_many([key])),
    ("get_or_set", lambda ops, key: ops.get_or_set(key, "v")),
]


@pytest.mark.parametrize("call", [c for _, c in WARNING_CALLS], ids=[n for n, _ in WARNING_CALLS])
def test_long_key_warns(ops: Ops, call: Callable[[Ops, str], object]) -> None:
    key = "x" * 248  # ":1:" + 248 = 251 characters, one over memcached's limit
    with pytest.warns(CacheKeyWarning, match=r"longer than 250"):
        call(ops, key)


@pytest.mark.parametrize("call", [c for _, c in WARNING_CALLS], ids=[n for n, _ in WARNING_CALLS])
def test_control_character_key_warns(ops: Ops, call: Callable[[Ops, str], object]) -> None:
    with pytest.warns(CacheKeyWarning, match=r"characters that will cause errors"):
        call(ops, "bad\x07key")


@pytest.mark.parametrize("key", ["with space", "tab\there", "nul\x00", "del\x7f"])
def test_keys_with_whitespace_or_control_chars_warn_and_still_work(ops: Ops, key: str) -> None:
    with pytest.warns(CacheKeyWarning, match=r"characters that will cause errors"):
        ops.set(key, "stored")
    with pytest.warns(CacheKeyWarning):
        assert ops.get(key) == "stored"


def test_key_of_exactly_250_characters_does_not_warn(ops: Ops) -> None:
    key = "x" * 247  # ":1:" + 247 = 250
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops.set(key, "v")
        assert ops.get(key) == "v"


def test_long_key_warns_and_still_works(ops: Ops) -> None:
    key = "y" * 400
    with pytest.warns(CacheKeyWarning, match=r"longer than 250"):
        ops.set(key, "big key")
    with pytest.warns(CacheKeyWarning, match=r"longer than 250"):
        assert ops.get(key) == "big key"


def test_warning_counts_the_prefix(make_cache: Callable[..., Any], mode: str) -> None:
    ops = make_ops(make_cache, mode, KEY_PREFIX="p" * 20)
    key = "z" * 230  # 230 alone is fine; with "ppp...:1:" it is 253
    with pytest.warns(CacheKeyWarning, match=r"longer than 250"):
        ops.set(key, "v")
