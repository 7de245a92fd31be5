"""How the suite runs in parallel: pytest-xdist's groups hold (the packaging tests build the
wheel on one worker), and where xdist cannot run (qemu-user), shards split the suite without
overlap or loss, each with ports of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.servers import _port_slice, shard

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    with open(os.environ["WHERE"], "a") as out:
        out.write(f"{n} {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""
ALONE = """
import pytest


@pytest.mark.parametrize("n", range(8))
def test_alone(n):
    pass
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_alone.py").write_text(ALONE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    where = tmp_path / "workers.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "REDOXIDE_"))}
    env["WHERE"] = str(where)
    proc = subprocess.run(
        [*PYTEST, "-n", "2", "--dist", "loadgroup", "-q", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [line.split() for line in where.read_text().splitlines()]
    assert sorted(n for n, _ in runs) == ["0", "1", "2", "3"]
    assert len({worker for _, worker in runs}) == 1, runs


def test_shard_reads_index_and_count_and_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDOXIDE_SHARD", raising=False)
    assert shard() is None
    monkeypatch.setenv("REDOXIDE_SHARD", "1/3")
    assert shard() == (1, 3)
    for bad in ("3/3", "1", "a/2", "-1/2", "1/"):
        monkeypatch.setenv("REDOXIDE_SHARD", bad)
        with pytest.raises(ValueError, match="REDOXIDE_SHARD"):
            shard()


def test_shards_have_port_slices_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    slices = []
    for index in range(3):
        monkeypatch.setenv("REDOXIDE_SHARD", f"{index}/3")
        slices.append(set(_port_slice()))
    for at, ports in enumerate(slices):
        assert len(ports) > 1000
        for other in slices[at + 1 :]:
            assert not ports & other


def test_shards_split_the_collection_without_overlap_or_loss() -> None:
    def collected(spec: str | None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        env.pop("REDOXIDE_SHARD", None)
        if spec is not None:
            env["REDOXIDE_SHARD"] = spec
        proc = subprocess.run(
            [*PYTEST, "--collect-only", "-q", str(Path(__file__))],
            capture_output=True,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return [line for line in proc.stdout.splitlines() if "::" in line]

    whole = collected(None)
    first, second = collected("0/2"), collected("1/2")
    assert len(whole) >= 4
    assert first and second
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(whole)
