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
    assert seen == [0, 1, 2, 3]


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
