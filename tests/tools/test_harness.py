"""The benchmarks' shared pieces: harness.py runs contenders interleaved and reports medians
with ratios; result_files.py keeps one current file per benchmark and a history line per run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import harness
import pytest
import result_files


def test_contenders_run_interleaved_workload_by_workload() -> None:
    order: list[str] = []

    def recorder(name: str) -> Any:
        return lambda i: order.append(name)

    contenders = {
        "a": {"get": recorder("a.get"), "set": recorder("a.set")},
        "b": {"get": recorder("b.get"), "set": recorder("b.set")},
    }
    results = harness.interleaved(contenders, rounds=2, calls=3)
    one_round = ["a.get"] * 3 + ["b.get"] * 3 + ["a.set"] * 3 + ["b.set"] * 3
    assert order == one_round * 2
    assert set(results) == {("a", "get"), ("b", "get"), ("a", "set"), ("b", "set")}
    assert all(len(figures) == 2 and min(figures) > 0 for figures in results.values())


def test_async_workloads_are_awaited() -> None:
    seen: list[int] = []

    async def call(i: int) -> None:
        seen.append(i)

    assert harness.per_second(call, 4) > 0
    assert seen == [0, 0, 1, 2, 3]  # one untimed call first, on the new loop


def test_the_table_shows_medians_and_ratios_to_the_reference() -> None:
    results = {("ours", "get"): [30.0, 10.0, 20.0], ("theirs", "get"): [10.0, 10.0, 5.0]}
    lines = harness.table(results, reference="theirs").splitlines()
    assert lines[0] == "| workload | ours calls/s | theirs calls/s | ours / theirs |"
    assert lines[2] == "| get | 20 | 10 | 2.00x |"
    lower = harness.table(results, reference="theirs", unit="us", higher_is_better=False)
    assert lower.splitlines()[2].endswith("| 0.50x |")


def test_a_saved_result_replaces_the_current_file_and_adds_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(result_files, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(result_files, "HISTORY", tmp_path / "history.jsonl")
    result_files.save("thing", {"v": 1}, {"median": 1})
    result_files.save("thing", {"v": 2}, {"median": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl", "thing.json"]
    assert json.loads((tmp_path / "thing.json").read_text()) == {"v": 2}
    runs = result_files.history("thing")
    assert [r["summary"] for r in runs] == [{"median": 1}, {"median": 2}]
    assert all(r["commit"] and r["date"].endswith("Z") for r in runs)


def test_a_full_stack_variant_is_data_on_the_command_line() -> None:
    import argparse

    import fullstack

    made = fullstack.variant(
        'before-near=redoxide-near:{"OPTIONS": {"SOCKET_TIMEOUT": 3}, "pythonpath": "/tmp/x",'
        ' "env": {"REDOXIDE_POLL": "never"}}'
    )
    assert made.name == "before-near"
    assert made.sync_class == fullstack.BACKENDS["redoxide-near"].sync_class
    assert json.loads(made.options) == {"NEAR_CACHE": {"PREFIXES": ["hot:"]}, "SOCKET_TIMEOUT": 3}
    assert dict(made.env) == {"REDOXIDE_POLL": "never", "PYTHONPATH": "/tmp/x"}
    for bad in ("x=nope", "redoxide=redoxide", 'y=redoxide:{"bad": 1}', "z=redoxide:[1]"):
        with pytest.raises(argparse.ArgumentTypeError):
            fullstack.variant(bad)


def test_calls_are_driven_blocking_serially_and_n_in_flight() -> None:
    import asyncio

    seen: list[tuple[Any, ...]] = []
    calls = [(i,) for i in range(10)]
    wall, cpu = harness.timed(harness.run_sync, lambda *a: seen.append(a), calls)
    assert seen == calls and wall >= 0 and cpu >= 0

    in_flight = 0
    most = 0
    gate = asyncio.Event()

    async def call(i: int) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == 3:
            gate.set()  # the third call in flight lets every worker go on
        await gate.wait()
        seen.append((i,))
        in_flight -= 1

    async def main() -> tuple[float, float]:
        return await harness.timed_async(harness.run_concurrent, call, calls, 3)

    seen.clear()
    wall, cpu = asyncio.run(main())
    assert most == 3  # exactly the width in flight, built by the gate, not by timing
    assert sorted(seen) == calls

    seen.clear()

    async def one(i: int) -> None:
        seen.append((i,))

    asyncio.run(harness.run_serial(one, calls))
    assert seen == calls


def test_rotation_markdown_median_and_environment() -> None:
    assert [harness.rotated("abc", r) for r in range(4)] == [
        list("abc"),
        list("bca"),
        list("cab"),
        list("abc"),
    ]
    assert harness.rotated([], 3) == []
    assert harness.markdown(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |"]
    assert harness.median([3.0, 1.0, 2.0]) == 2.0
    assert harness.median([]) is None
    env = harness.environment(["pytest", "no-such-package-here"], extra=1)
    assert env["versions"] == {"pytest": pytest.__version__, "no-such-package-here": None}
    assert env["extra"] == 1
    assert {"timestamp", "python", "platform", "cpus", "redoxide_tree"} <= set(env)
    with harness.busy(False):  # the idle regime touches nothing
        pass
