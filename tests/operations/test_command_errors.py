"""What every cache_* command does with an alias it cannot use (exit status 2, nothing done),
and the exit statuses a shell sees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.backend import is_redoxide
from support.operations import run, run_process
from support.servers import RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's app")

Use = Callable[..., None]

COMMANDS = [
    ("cache_ping",),
    ("cache_stats",),
    ("cache_keys", "*"),
    ("cache_clear", "--yes"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unknown_alias_is_refused_naming_the_known_ones(
    project: Use, command: tuple[str, ...]
) -> None:
    project({})
    name, *rest = command
    args = ["nope", *rest]
    outcome = run(name, *args)
    assert outcome.code == 2
    assert "no cache 'nope' in CACHES (aliases: 'default')" in outcome.err


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_alias_that_is_not_redoxide_is_refused(project: Use, command: tuple[str, ...]) -> None:
    project({})
    name, *rest = command
    outcome = run(name, "default", *rest)
    assert outcome.code == 2
    assert "CACHES['default'] is not a redoxide cache" in outcome.err
    assert "LocMemCache" in outcome.err


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_settings_redoxide_refuses_are_reported_with_their_id(
    project: Use, command: tuple[str, ...]
) -> None:
    bad = {"BACKEND": "redoxide.RedisCache", "LOCATION": "redis://127.0.0.1/0"}
    project({"bad": {**bad, "OPTIONS": {"DB": -1}}})
    name, *rest = command
    outcome = run(name, "bad", *rest)
    assert outcome.code == 2
    assert "OPTIONS['DB'] must be a non-negative integer" in outcome.err
    assert "(redoxide.E003)" in outcome.err


def test_without_any_redoxide_cache_every_cache_command_says_so(project: Use) -> None:
    project({})
    assert "No cache in CACHES has a redoxide BACKEND" in run("cache_ping").err


def test_a_shell_sees_exit_status_1_when_the_server_is_down(tmp_path: Path) -> None:
    caches = {
        "default": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    done = run_process(tmp_path, caches, "cache_ping")
    assert done.returncode == 1
    assert "DOWN" in done.stdout and "CommandError: 1 node(s)" in done.stderr


def test_a_shell_sees_exit_status_2_for_a_refused_flush_and_0_when_done(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    redis_server.flushall()
    redis_server.cli("set", "foreign", "1")
    caches: dict[str, Any] = {
        "default": {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url}
    }
    refused = run_process(tmp_path, caches, "cache_clear")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert redis_server.cli("exists", "foreign") == "1"
    done = run_process(tmp_path, caches, "cache_clear", "--yes")
    assert done.returncode == 0, done.stderr
    assert redis_server.cli("exists", "foreign") == "0"


def test_check_connectivity_from_a_shell(tmp_path: Path, redis_server: RedisServer) -> None:
    up = {"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url}}
    done = run_process(tmp_path, up, "check", "--tag", "redoxide_connectivity")
    assert done.returncode == 0, done.stderr
    down = {
        "default": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    done = run_process(tmp_path, down, "check", "--tag", "redoxide_connectivity")
    assert done.returncode == 1 and "redoxide.E010" in done.stderr
