"""Key making, sync and async: KEY_PREFIX, VERSION, KEY_FUNCTION (dotted path and callable),
keys of other types formatted as Django does, and Django's CacheKeyWarning for keys memcached
would reject (250+ characters, control characters), which cannot inject commands either.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache.backends.base import CacheKeyWarning, default_key_func
from support.backend import custom_key_func, is_redoxide
from support.dispatch import Ops
from support.servers import RedisServer

redoxide_only = pytest.mark.skipif(not is_redoxide(), reason="redoxide only")


def make_ops(make_cache: Callable[..., Any], mode: str, **kwargs: Any) -> Ops:
    return Ops(make_cache(**kwargs), mode)


# -- key layout --------------------------------------------------------------------------------


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
    "key_function", [custom_key_func, "support.backend.custom_key_func"], ids=["callable", "path"]
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


# -- key warnings (Django's memcached portability warnings) ------------------------------------


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


# -- odd keys ----------------------------------------------------------------------------------


def dbsize(server: RedisServer) -> int:
    return int(server.cli("DBSIZE"))


@redoxide_only
@pytest.mark.parametrize(
    "key",
    [b"bytes", None, 3.5, ("tuple", 1), frozenset({"x"})],
    ids=["bytes", "None", "float", "tuple", "frozenset"],
)
def test_keys_of_other_types_are_formatted_as_django_does(
    ops: Ops, redis_client: Any, key: Any
) -> None:
    """Django formats any key with f-strings (its builtin stores b"k" as ":1:b'k'"): the same
    object finds the same value again, in the same Redis key as Django's builtin backend."""
    expected = default_key_func(key, "", 1)
    with pytest.warns(CacheKeyWarning) if " " in expected else contextlib.nullcontext():
        ops.set(key, "value")
        assert ops.get(key) == "value"
        assert ops.get_many([key, "other"]) == {key: "value"}
    assert redis_client.keys("*") == [expected.encode()]


@redoxide_only
@pytest.mark.parametrize("call", ["get", "set", "get_many", "delete", "has_key"])
def test_key_that_is_not_valid_unicode_raises_before_sending(
    make_cache: Callable[..., Any], redis_server: RedisServer, mode: str, call: str
) -> None:
    """A str key with a lone surrogate cannot be UTF-8 encoded: UnicodeEncodeError (a
    ValueError, as with Django's builtin), even under fail-open; nothing is written."""
    ops = Ops(make_cache(IGNORE_EXCEPTIONS=True), mode)
    key = "half\udc80surrogate"
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: ops.get(key),
        "set": lambda: ops.set(key, 1),
        "get_many": lambda: ops.get_many(["fine", key]),
        "delete": lambda: ops.delete(key),
        "has_key": lambda: ops.has_key(key),
    }
    with pytest.raises(UnicodeEncodeError):
        calls[call]()
    assert dbsize(redis_server) == 0
    ops.set("fine", 1)
    assert ops.get("fine") == 1


@redoxide_only
def test_megabyte_key_warns_and_works(ops: Ops, redis_client: Any) -> None:
    """A 1 MB key is legal in Redis (keys may be 512 MB): Django's length warning, then it
    works like any key."""
    key = "k" * (1 << 20)
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        ops.set(key, "big key")
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        assert ops.get(key) == "big key"
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        assert ops.get_many([key, "small"]) == {key: "big key"}
    assert redis_client.exists(f":1:{key}") == 1
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        assert ops.delete(key) is True
    assert redis_client.dbsize() == 0


@redoxide_only
@pytest.mark.parametrize(
    "key",
    ["line\r\nSET injected 1", "\r\n*1\r\n$8\r\nFLUSHALL\r\n", "nul\x00byte"],
    ids=["crlf-command", "resp-frame", "nul"],
)
def test_control_characters_in_keys_warn_and_cannot_inject_commands(
    ops: Ops, redis_client: Any, key: str
) -> None:
    """Keys travel as length-prefixed bulk strings: CR, LF and NUL are just bytes of the key
    (Django warns about them), never a second command."""
    redis_client.set("sentinel", "still here")
    with pytest.warns(CacheKeyWarning, match="characters that will cause errors"):
        ops.set(key, "value")
    with pytest.warns(CacheKeyWarning):
        assert ops.get(key) == "value"
    with pytest.warns(CacheKeyWarning):
        assert ops.get_many([key]) == {key: "value"}
    assert sorted(redis_client.keys("*")) == sorted([f":1:{key}".encode(), b"sentinel"])
    assert redis_client.get("sentinel") == b"still here"
    assert redis_client.exists("injected") == 0
