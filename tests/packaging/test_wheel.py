"""The wheel, as users get it: build it, install it in a fresh virtualenv, use the cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from support.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1200  # a clean release build with fat LTO takes minutes on 2 cores

pytestmark = pytest.mark.slow

USE_CACHE = """
import asyncio
import json
import sys

import django
from django.conf import settings

settings.configure(
    CACHES={"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": sys.argv[1]}}
)
django.setup()

import redoxide
import redoxide._redoxide
from django.core.cache import cache

cache.set("greeting", {"hello": "wheel"}, 30)
cache.set("count", 41)
result = {
    "package": redoxide.__file__,
    "extension": redoxide._redoxide.__file__,
    "get": cache.get("greeting"),
    "incr": cache.incr("count"),
    "aget": asyncio.run(cache.aget("greeting")),
    "aincr": asyncio.run(cache.aincr("count", 10)),
    "missing": cache.get("missing", "default"),
}
print(json.dumps(result))
"""


def _maturin() -> str | None:
    beside_python = Path(sys.executable).with_name("maturin")
    if beside_python.exists():
        return str(beside_python)
    return shutil.which("maturin")


def _newest_source_mtime() -> float:
    """Return the mtime of the newest file that goes into the wheel."""
    paths = [ROOT / "Cargo.toml", ROOT / "Cargo.lock", ROOT / "pyproject.toml", ROOT / "README.md"]
    paths += (ROOT / "src").rglob("*.rs")
    paths += (p for p in (ROOT / "python").rglob("*") if p.is_file() and p.suffix != ".so")
    return max(p.stat().st_mtime for p in paths if p.exists() and "__pycache__" not in p.parts)


def _wheel(tmp_path: Path) -> Path:
    """Return the abi3 wheel: from dist/ if `make wheel` built it after the last source
    change, otherwise freshly built (in the usual target/ dir: cargo's lock serialises it
    with any other build)."""
    newest_source = _newest_source_mtime()
    built = sorted(
        (ROOT / "dist").glob("redoxide-*-abi3-*.whl"),
        key=lambda w: w.stat().st_mtime,
    )
    if built and built[-1].stat().st_mtime > newest_source:
        return built[-1]
    maturin = _maturin()
    if maturin is None:
        pytest.skip("maturin is not installed")
    out = tmp_path / "dist"
    cmd = [maturin, "build", "--release", "--out", str(out), "--interpreter", sys.executable]
    env = {
        **os.environ,
        "PATH": f"{Path.home() / '.cargo' / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert proc.returncode == 0, f"maturin build failed:\n{proc.stdout[-6000:]}"
    wheels = list(out.glob("redoxide-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, got {wheels}:\n{proc.stdout[-2000:]}"
    return wheels[0]


@pytest.mark.timeout(BUILD_TIMEOUT + 300)
def test_wheel_installs_in_a_fresh_virtualenv_and_serves_the_cache(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    assert "-cp310-abi3-" in wheel.name, f"{wheel.name} is not an abi3 wheel for CPython 3.10+"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    for expected in ("redoxide/__init__.py", "redoxide/py.typed"):
        assert expected in names, f"{expected} missing from {wheel.name}: {names}"
    assert any(n.startswith("redoxide/_redoxide") and n.endswith(".abi3.so") for n in names), names

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # A clean environment: nothing from the source checkout or the dev venv may leak in.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"}
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    pip = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(wheel), f"django=={version('django')}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, f"pip install failed:\n{pip.stdout}\n{pip.stderr}"

    with RedisServer() as server:
        run = subprocess.run(
            [python, "-c", USE_CACHE, server.url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, f"using the installed wheel failed:\n{run.stderr}"
        result = json.loads(run.stdout)
        raw_count = server.cli("get", ":1:count")

    assert Path(result["package"]).is_relative_to(env_dir), result["package"]
    assert result["extension"].endswith(".abi3.so"), result["extension"]
    assert result["get"] == {"hello": "wheel"}
    assert result["incr"] == 42
    assert result["aget"] == {"hello": "wheel"}
    assert result["aincr"] == 52
    assert result["missing"] == "default"
    # Stored as Django's builtin backend stores it: key "prefix:version:key", ints as digits.
    assert raw_count == "52"
