"""Where benchmark results go: one current file per benchmark, and a dated history.

Each benchmark keeps one current result, ``results/<name>.json`` (what the READMEs quote), and
appends one line per run to ``results/history.jsonl``: the date, the commit, the benchmark and
a small summary of its figures. Full results of older runs are in git's history of the
current file, not in dated copies of it.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["HISTORY", "RESULTS_DIR", "commit", "history", "save"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
HISTORY = RESULTS_DIR / "history.jsonl"


def commit() -> str:
    """The commit the run measured (with ``+`` when the tree had changes), or ``unknown``."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=root, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+" if dirty else "")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save(name: str, data: Any, summary: Any, *, indent: int = 2) -> Path:
    """Write ``results/<name>.json`` (the current result) and add the run to the history."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    _write(path, json.dumps(data, indent=indent) + "\n")
    line = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "benchmark": name,
        "summary": summary,
    }
    with HISTORY.open("a") as out:
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path


def history(name: str | None = None) -> list[dict[str, Any]]:
    """The history's runs (of one benchmark), oldest first."""
    if not HISTORY.exists():
        return []
    runs = [json.loads(line) for line in HISTORY.read_text().splitlines() if line.strip()]
    return [r for r in runs if name is None or r["benchmark"] == name]
