"""The typed seam: every router, the near-cache client and the Rust client are ClientLike, and
mypy sees a forgotten await at a call site (no bridge -> a value, a bridge -> an awaitable of
it); what the cache asks beyond commands is Topology's, never a forwarded attribute."""

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
from redoxide.near import NearClient
from redoxide.topology import ClusterRouter, ReplicaRouter, SentinelRouter


def every_client(
    a: ClusterRouter, b: ReplicaRouter, c: SentinelRouter, d: _redoxide.Client, e: NearClient
) -> list[ClientLike]:
    return [a, b, c, d, e, b.replica_reads(), e.replica_reads()]


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
    assert "seam_use.py:23:" in errors[0] and "Awaitable" in errors[0], result.stdout


def test_no_client_forwards_unknown_attributes() -> None:
    # A method the near-cache client does not define must not reach the inner client unseen
    # (it would skip the near cache's invalidation): no __getattr__ anywhere on the seam.
    from redoxide._near_parts import NearReads as _NearReads
    from redoxide._protocols import ClientLike, Topology
    from redoxide.near import NearClient
    from redoxide.topology import ClusterRouter, ReplicaRouter, SentinelRouter
    from redoxide.topology.base import ReplicaReads
    from redoxide.topology.sentinel import SentinelPrimary

    commands = {"get", "set", "mget", "set_many", "execute", "pipeline"}
    assert commands <= set(vars(ClientLike))
    topology = {"spans_primaries", "scan_nodes", "replica_reads", "primaries"}
    assert topology <= set(vars(Topology))
    for cls in (NearClient, _NearReads, ClusterRouter, ReplicaRouter, SentinelRouter,
                SentinelPrimary, ReplicaReads):  # fmt: skip
        assert issubclass(cls, Topology), cls
        assert not any("__getattr__" in vars(k) for k in cls.__mro__ if k is not object), cls
        for name in commands | {"replica_reads", "primaries"}:
            owner = next(k for k in cls.__mro__ if name in vars(k))
            assert owner is not Topology, f"{cls.__name__}.{name} is not implemented"
