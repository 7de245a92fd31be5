"""This process reads its own writes at once: every write through the cache drops the local
entries it touches before it is sent (and again once answered)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from redoxide.exceptions import ResponseError
from support.dispatch import Ops
from support.near import near_options, warm

# Each write through the cache, and what get("cfg:a") must return right after it.
WRITES: dict[str, tuple[Callable[[Ops], Any], Any]] = {
    "set": (lambda ops: ops.set("cfg:a", 2), 2),
    "add-after-delete": (lambda ops: (ops.delete("cfg:a"), ops.add("cfg:a", 3)), 3),
    "delete": (lambda ops: ops.delete("cfg:a"), None),
    "set_many": (lambda ops: ops.set_many({"cfg:a": 4, "cfg:b": 5}), 4),
    "delete_many": (lambda ops: ops.delete_many(["cfg:a", "cfg:b"]), None),
    "incr": (lambda ops: ops.incr("cfg:a"), 2),
    "decr": (lambda ops: ops.decr("cfg:a"), 0),
    "touch-now": (lambda ops: ops.touch("cfg:a", 0), None),
    "expire": (lambda ops: ops.expire("cfg:a", 0), None),
    "incr_version": (lambda ops: ops.incr_version("cfg:a"), None),
    "delete_pattern": (lambda ops: ops.delete_pattern("cfg:*"), None),
    "clear": (lambda ops: ops.clear(), None),
    "get_or_set-after-delete": (
        lambda ops: (ops.delete("cfg:a"), ops.get_or_set("cfg:a", 6)),
        6,
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_own_write_is_read_back_at_once(
    make_near: Callable[..., Any], mode: str, write: str
) -> None:
    cache = make_near()
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    cache.set("cfg:b", 1)
    assert warm(cache, "cfg:a") == 1
    do, expected = WRITES[write]
    do(ops)
    assert ops.get("cfg:a") == expected  # no wait for the server's invalidation


@pytest.mark.parametrize("write", ["set", "delete", "set_many", "incr", "delete_pattern", "clear"])
def test_a_write_through_another_cache_of_the_process_is_read_back_at_once(
    make_near: Callable[..., Any], mode: str, write: str
) -> None:
    # Two aliases over the same keys with different near-cache limits: two stores. A write
    # through either drops the other's copy too, without waiting for the server.
    prefix = f"s{uuid.uuid4().hex[:8]}"
    reader = make_near(KEY_PREFIX=prefix)
    other = make_near(KEY_PREFIX=prefix, near=near_options(MAX_BYTES=2**20))
    reader.set("cfg:a", 1)
    reader.set("cfg:b", 1)
    assert warm(reader, "cfg:a") == 1
    do, expected = WRITES[write]
    do(Ops(other, mode))
    assert reader.get("cfg:a") == expected


def test_raw_commands_through_the_cache_drop_what_they_touch(
    make_near: Callable[..., Any], mode: str
) -> None:
    cache = make_near()
    cache.set("cfg:a", 1)
    warm(cache, "cfg:a")
    made = cache.make_and_validate_key("cfg:a")
    if mode == "sync":
        cache.client.execute("SET", made, "9")
    else:
        import asyncio

        asyncio.run(cache.client.aexecute("SET", made, "9"))
    assert cache.get("cfg:a") == 9


def test_reads_keep_local_entries(make_near: Callable[..., Any], mode: str) -> None:
    cache = make_near()
    ops = Ops(cache, mode)
    cache.set("cfg:a", 1)
    warm(cache, "cfg:a")
    hits = cache.near_cache_stats()["hits"]
    assert ops.has_key("cfg:a")
    assert ops.ttl("cfg:a") is not None
    assert ops.get_many(["cfg:a", "cfg:missing"]) == {"cfg:a": 1}
    assert ops.get_or_set("cfg:a", 5) == 1
    assert cache.near_cache_stats()["hits"] >= hits + 3
    assert cache.near_cache_stats()["entries"] >= 1


# Raw commands through the cache, by what the command table (src/commands.rs) says they do:
# reads and control commands keep the local entry of a key among their arguments; writes and
# commands the table does not know drop it.
RAW: dict[str, tuple[Callable[[bytes], tuple[Any, ...]], bool]] = {
    "LPOS (a read)": (lambda key: ("LPOS", key, "x"), True),
    "STRLEN (a read)": (lambda key: ("STRLEN", key), True),
    "OBJECT ENCODING (a read)": (lambda key: ("OBJECT", "ENCODING", key), True),
    "PUBLISH (control)": (lambda key: ("PUBLISH", "channel", key), True),
    "APPEND (a write)": (lambda key: ("APPEND", key, "x"), False),
    "unknown": (lambda key: ("NOSUCHCOMMAND", key), False),
}


@pytest.mark.parametrize("command", list(RAW))
def test_raw_commands_keep_or_drop_by_the_command_table(
    make_near: Callable[..., Any], command: str
) -> None:
    cache = make_near()
    cache.set("cfg:a", "text")
    assert warm(cache, "cfg:a") == "text"
    made = cache.make_and_validate_key("cfg:a").encode()
    build, kept = RAW[command]
    with contextlib.suppress(ResponseError):  # LPOS of a string, an unknown command
        cache.client.execute(*build(made))
    hits = cache.near_cache_stats()["hits"]
    cache.get("cfg:a")
    assert (cache.near_cache_stats()["hits"] == hits + 1) is kept
