"""The typed seam: every router and the Rust client are ClientLike, and mypy sees a forgotten
await at a call site (no bridge -> a value, a bridge -> an awaitable of it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from redoxide import _redoxide
from redoxide._bridges import bridge
from redoxide._protocols import ClientLike
from redoxide.topology import ClusterRouter, ReplicaRouter, SentinelRouter


def every_client(
    a: ClusterRouter, b: ReplicaRouter, c: SentinelRouter, d: _redoxide.Client
) -> list[ClientLike]:
    return [a, b, c, d]


def blocking(client: ClientLike) -> bytes | None:
    return client.get("k")


async def awaited(client: ClientLike) -> bytes | None:
    return await client.get("k", bridge())


async def forgotten(client: ClientLike) -> bytes | None:
    return client.get("k", bridge())  # the await is missing
"""


@pytest.mark.slow
def test_mypy_accepts_the_clients_and_catches_a_forgotten_await(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    source = tmp_path / "seam_use.py"
    source.write_text(textwrap.dedent(SNIPPET).lstrip())
    env = {**os.environ, "MYPYPATH": str(ROOT / "python")}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "",
         str(source)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout
    assert "seam_use.py:22:" in errors[0] and "Awaitable" in errors[0], result.stdout
