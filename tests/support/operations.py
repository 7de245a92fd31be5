"""Helpers of the operations tests: run a management command and keep what it said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError
from redoxide.cache import RedisCache

#: A cache alias that is not redoxide's (Django requires a "default").
LOCMEM = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}


@dataclass
class Outcome:
    """A command's exit status and output."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run(name: str, *args: Any, **options: Any) -> Outcome:
    """call_command(name, ...): the exit status a CommandError would give, and the output."""
    out, err = StringIO(), StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err, **options)
    except CommandError as exc:
        err.write(str(exc))
        return Outcome(exc.returncode, out.getvalue(), err.getvalue())
    return Outcome(0, out.getvalue(), err.getvalue())


def run_process(
    tmp_path: Path, caches: dict[str, Any], *argv: str
) -> subprocess.CompletedProcess[str]:
    """Run ``django-admin ARGV`` in a child process with a settings module of these CACHES
    and the redoxide app installed."""
    (tmp_path / "ops_settings.py").write_text(
        f'INSTALLED_APPS = ["redoxide"]\nCACHES = {caches!r}\nSECRET_KEY = "ops-tests"\n'
        "USE_TZ = True\n"
    )
    package_root = Path(__file__).resolve().parents[2] / "python"
    paths = [str(tmp_path), str(package_root), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env["DJANGO_SETTINGS_MODULE"] = "ops_settings"
    return subprocess.run(
        [sys.executable, "-m", "django", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )


class StatsCache(RedisCache):
    """A redoxide cache whose stats() returns fixed nested counters (to test how they are
    shown, whatever the real backend keeps)."""

    def stats(self) -> dict[str, Any]:
        return {"calls": {"get": 3, "set": 1}, "nodes": [{"address": "n1", "errors": 0}]}


class NoStatsCache(RedisCache):
    """A redoxide cache without stats(), whether or not the real backend has one."""

    def __getattribute__(self, name: str) -> Any:
        if name == "stats":
            raise AttributeError(name)
        return super().__getattribute__(name)
