"""The command table (src/commands.rs) against the server's own account of each command: what it
does to the data (COMMAND INFO's flags) and where its keys are (the key positions, and COMMAND
GETKEYS for the commands whose keys move). Each row the server knows is checked; Python's
routing reads the same table (redoxide.topology.commands)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redoxide import _redoxide
from redoxide.topology import commands
from support.servers import RedisServer

FACTS = _redoxide.command_facts()

# Commands whose keys move (the server gives no fixed positions): a sample of each shape, and
# the keys it names.
MOVING = {
    "counted": (["2", "k1", "k2", "arg"], ["k1", "k2"]),
    "counted_pairs": (["2", "k1", "v1", "k2", "v2"], ["k1", "k2"]),
    "streams": (["COUNT", "1", "STREAMS", "k1", "k2", "0", "0"], ["k1", "k2"]),
}
THIRD = {"OBJECT": "ENCODING", "MEMORY": "USAGE", "XINFO": "STREAM"}
LEADING = {
    "EVAL": ["return 1"],
    "EVAL_RO": ["return 1"],
    "EVALSHA": ["e0e1f9fabfc9d4800c877a703b823ac0578ff8db"],
    "EVALSHA_RO": ["e0e1f9fabfc9d4800c877a703b823ac0578ff8db"],
    "FCALL": ["f"],
    "FCALL_RO": ["f"],
    "XREADGROUP": ["GROUP", "g", "c"],
}


@pytest.fixture(scope="module")
def server_commands(redis_server: RedisServer) -> dict[str, dict[str, Any]]:
    """{NAME: COMMAND INFO}, a container command (OBJECT...) by the subcommand the table's
    key position is for, where the server describes subcommands (Redis 7 and later)."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        known = {name.upper(): info for name, info in client.command().items()}
        for name, sub in THIRD.items():
            full = f"{name}|{sub}".lower()
            try:
                found = client.execute_command("COMMAND", "INFO", full)
            except (redis.ResponseError, AttributeError, TypeError):
                continue  # no subcommands here: the container's own entry stands
            if isinstance(found, dict) and found.get(full):
                known[name] = found[full]
        return known
    finally:
        client.close()


@pytest.fixture(scope="module")
def raw(redis_server: RedisServer) -> Any:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def _known(server_commands: dict[str, dict[str, Any]]) -> list[str]:
    return [name for name in FACTS if name in server_commands]


def test_the_table_is_read_whole_by_python_and_names_the_server_commands_it_can(
    server_commands: dict[str, dict[str, Any]],
) -> None:
    assert len(FACTS) >= 150
    assert {"GET", "SET", "LPOS", "LPUSH", "EVAL", "FLUSHDB"} <= set(FACTS)
    # Redis 6.2 lacks a few (EXPIRETIME, EVAL_RO...); most rows must be the server's.
    assert len(_known(server_commands)) >= len(FACTS) - 12
    assert commands.FACTS == FACTS


def test_each_rows_effect_agrees_with_the_servers_flags(
    server_commands: dict[str, dict[str, Any]],
) -> None:
    wrong = []
    for name in _known(server_commands):
        effect, keys, _route = FACTS[name]
        flags = {str(flag) for flag in server_commands[name]["flags"]}
        if effect == "read":
            ok = "write" not in flags and (keys == "none" or "readonly" in flags)
        elif effect == "write":
            # A script's writes are its own business: the server flags EVAL neither way.
            ok = "write" in flags or (keys == "counted" and "readonly" not in flags)
        elif effect == "flush":
            ok = "write" in flags
        else:
            ok = "write" not in flags and "readonly" not in flags
        if not ok:
            wrong.append((name, effect, sorted(flags)))
    assert wrong == []


def test_each_rows_keys_are_where_the_server_says(
    server_commands: dict[str, dict[str, Any]], raw: Any
) -> None:
    fixed = {
        "none": (0, 0, 0),
        "first": (1, 1, 1),
        "two": (1, 2, 1),
        "all": (1, -1, 1),
        "pairs": (1, -1, 2),
    }
    wrong = []
    for name in _known(server_commands):
        _effect, keys, _route = FACTS[name]
        info = server_commands[name]
        positions = (info["first_key_pos"], info["last_key_pos"], info["step_count"])
        if keys == "third" and positions != (0, 0, 0):
            if positions != (2, 2, 1):
                wrong.append((name, keys, positions))
            continue
        if keys in fixed:
            if positions != fixed[keys]:
                wrong.append((name, keys, positions))
            continue
        if keys == "third":
            args = [name, THIRD[name], "k1"]
            expected = ["k1"]
        else:
            tail, expected = MOVING[keys]
            args = [name, *LEADING.get(name, []), *tail]
        try:
            found = [k.decode() if isinstance(k, bytes) else k for k in raw.command_getkeys(*args)]
        except redis.ResponseError as exc:
            wrong.append((name, keys, str(exc)))
            continue
        if found != expected or commands.first_key(args) != expected[0]:
            wrong.append((name, keys, found, commands.first_key(args)))
    assert wrong == []


def test_split_and_every_primary_routes_have_the_keys_they_need() -> None:
    for name, (_effect, keys, route) in FACTS.items():
        if route.startswith("each_key"):
            assert keys == "all", name
        if route.startswith("every_primary"):
            assert keys == "none", name
    assert {"DEL", "UNLINK", "EXISTS", "TOUCH"} == commands.SUMMED
    assert {"FLUSHDB", "FLUSHALL", "DBSIZE", "KEYS", "SCRIPT"} <= commands.EVERY_PRIMARY
    assert commands.combine_for("DBSIZE")([1, 2]) == 3
    assert commands.combine_for("KEYS")([[b"a"], [b"b"]]) == [b"a", b"b"]
    assert commands.combine_for("FLUSHDB")([True, True]) is True


def test_python_finds_the_first_key_by_the_table() -> None:
    assert commands.first_key(["GET", "k"]) == "k"
    assert commands.first_key(["LPOS", "k", "x"]) == "k"
    assert commands.first_key(["PING"]) is None
    assert commands.first_key(["KEYS", "pattern*"]) is None, "a pattern is no key"
    assert commands.first_key(["OBJECT", "ENCODING", "k"]) == "k"
    assert commands.first_key(["EVAL", "return 1", "0"]) is None
    assert commands.first_key(["NOSUCHCOMMAND", "k"]) == "k", "a command without a row"
