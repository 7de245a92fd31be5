"""The wheel and the sdist, as users get them: build, check the platform tag, install each in
fresh virtualenvs of the oldest and newest supported CPython, use the cache against a real
redis-server (sync and async).

The wheel is the one `make wheel` builds (manylinux2014 through zig): taken from dist/ if it
is newer than every source file, else built here the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from support.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1200  # a clean release build with fat LTO takes minutes on 2 cores
# The oldest glibc the wheel may need: manylinux2014 is glibc 2.17.
MANYLINUX = "manylinux2014"
# This machine's wheel: dist/ may also hold another architecture's (CI builds the aarch64 wheel
# beside the suite), which must not be taken for it.
MACHINE = platform.machine()
MAX_GLIBC_MINOR = 17

# Whichever test first asks for the module's wheel builds it, within its own timeout: each test
# here may take a clean release build (the suite's 60 s default is far too short for that).
# One xdist worker takes them all (and builds the wheel once), first (tests/conftest.py).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(BUILD_TIMEOUT + 300),
    pytest.mark.xdist_group("packaging"),
]

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


async def twins():
    await cache.aset("agreeting", {"hello": "async"}, 30)
    await cache.aset_many({"a1": 1, "a2": [2]})
    return {
        "aget": await cache.aget("greeting"),
        "aget_set": await cache.aget("agreeting"),
        "aget_many": await cache.aget_many(["a1", "a2", "nope"]),
        "aincr": await cache.aincr("count", 10),
        "amissing": await cache.aget("missing", "default"),
    }


cache.set("greeting", {"hello": "wheel"}, 30)
cache.set("count", 41)
cache.set_many({"m1": 1, "m2": "two"})
result = {
    "python": list(sys.version_info[:2]),
    "package": redoxide.__file__,
    "extension": redoxide._redoxide.__file__,
    "get": cache.get("greeting"),
    "get_many": cache.get_many(["m1", "m2", "nope"]),
    "incr": cache.incr("count"),
    "missing": cache.get("missing", "default"),
    **asyncio.run(twins()),
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


# What this module checks (tags, contents, the glibc needed, that the package installs and
# serves the cache) does not depend on link-time optimisation, which is most of a clean release
# build's minutes: the builds here skip it, unless REDOXIDE_PACKAGING_FULL_BUILD=1 (`make
# wheel-check` tests the wheel `make wheel` made, with the shipped profile, anyway).
QUICK_PROFILE = (
    {}
    if os.environ.get("REDOXIDE_PACKAGING_FULL_BUILD") == "1"
    else {"CARGO_PROFILE_RELEASE_LTO": "off", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16"}
)


def _build_env() -> dict[str, str]:
    return {
        **os.environ,
        **QUICK_PROFILE,
        "PATH": os.pathsep.join(
            [
                str(Path(sys.executable).parent),
                str(Path.home() / ".cargo" / "bin"),
                os.environ["PATH"],
            ]
        ),
    }


def _fresh(pattern: str, where: Path = ROOT / "dist") -> Path | None:
    """Return the newest file in where (dist/ by default) matching pattern if it is newer than
    every source."""
    built = sorted(where.glob(pattern), key=lambda w: w.stat().st_mtime)
    if built and built[-1].stat().st_mtime > _newest_source_mtime():
        return built[-1]
    return None


# Builds go to one folder per kind under target/, under an exclusive lock: whichever process
# asks first builds, and any other (another xdist worker, another run in the same checkout)
# waits for it and takes what it made. Two builders never share maturin's target dir at once,
# whatever the scheduler does with the tests.
BUILT = ROOT / "target" / "packaging"


@contextlib.contextmanager
def _exclusive(name: str) -> Iterator[None]:
    BUILT.mkdir(parents=True, exist_ok=True)
    with open(BUILT / f"{name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def _built_once(name: str, pattern: str, cmd: list[str]) -> Path:
    """Return dist/'s or an earlier build's fresh file matching pattern, else build it with
    cmd (plus --out) under the lock."""
    with _exclusive(name):
        found = _fresh(pattern) or _fresh(pattern, BUILT / name)
        if found is not None:
            return found
        out = BUILT / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        return _run_build([*cmd, "--out", str(out)], out, pattern)


def _run_build(cmd: list[str], out: Path, pattern: str) -> Path:
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=_build_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-6000:]}"
    made = list(out.glob(pattern))
    assert len(made) == 1, f"expected one {pattern}, got {made}:\n{proc.stdout[-2000:]}"
    return made[0]


@pytest.fixture(scope="module")
def wheel() -> Path:
    """Return the manylinux2014 abi3 wheel, built as `make wheel` builds it if dist/ has no
    fresh one."""
    pattern = f"redoxide-*-abi3-{MANYLINUX}_{MACHINE}*.whl"
    found = _fresh(pattern)
    if found is not None:
        return found
    maturin = _maturin()
    if maturin is None:
        pytest.skip("maturin is not installed")
    if importlib.util.find_spec("ziglang") is None:
        pytest.skip("ziglang is not installed (pip install ziglang; make wheel does)")
    # The same command as `make wheel` (but QUICK_PROFILE); its own target dir, so that the
    # zig-linked build and `maturin develop`'s do not rebuild each other's dependencies.
    cmd = [maturin, "build", "--release", "--zig", "--compatibility", MANYLINUX]
    cmd += ["--target-dir", str(ROOT / "target" / "wheel"), "--interpreter", sys.executable]
    return _built_once("wheel", pattern, cmd)


def _interpreters() -> list[object]:
    """The current interpreter and the oldest and newest supported CPython from pyenv."""
    params: list[object] = [pytest.param(sys.executable, id="current")]
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    for minor in ("3.10", "3.13"):
        found = sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python"))
        marks = [] if found else [pytest.mark.skip(reason=f"no CPython {minor} under {root}")]
        params.append(pytest.param(found[-1] if found else minor, id=minor, marks=marks))
    return params


def _clean_env() -> dict[str, str]:
    """The environment for a fresh venv: nothing from the checkout or the dev venv."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"}
        and not key.startswith("REDOXIDE_")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(QUICK_PROFILE)  # for pip's build of the sdist
    return env


def _venv_with(base_python: str, env_dir: Path, *requirements: str) -> Path:
    """Make a fresh venv with base_python and pip install requirements into it."""
    made = subprocess.run(
        [base_python, "-m", "venv", "--clear", str(env_dir)],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, f"venv failed:\n{made.stderr}"
    python = env_dir / "bin" / "python"
    pip = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", *requirements],
        cwd=env_dir.parent,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert pip.returncode == 0, f"pip install failed:\n{pip.stdout[-4000:]}\n{pip.stderr[-4000:]}"
    return python


def _check_serves_the_cache(python: Path, env_dir: Path) -> dict[str, object]:
    """Use the installed package against a throwaway redis-server; check the smoke contract."""
    with RedisServer() as server:
        run = subprocess.run(
            [python, "-c", USE_CACHE, server.url],
            cwd=env_dir.parent,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, f"using the installed package failed:\n{run.stderr}"
        result: dict[str, object] = json.loads(run.stdout)
        raw_count = server.cli("get", ":1:count")

    assert Path(str(result["package"])).is_relative_to(env_dir), result["package"]
    assert str(result["extension"]).endswith(".abi3.so"), result["extension"]
    assert result["get"] == {"hello": "wheel"}
    assert result["get_many"] == {"m1": 1, "m2": "two"}
    assert result["incr"] == 42
    assert result["missing"] == "default"
    assert result["aget"] == {"hello": "wheel"}
    assert result["aget_set"] == {"hello": "async"}
    assert result["aget_many"] == {"a1": 1, "a2": [2]}
    assert result["aincr"] == 52
    assert result["amissing"] == "default"
    # Stored as Django's builtin backend stores it: key "prefix:version:key", ints as digits.
    assert raw_count == "52"
    return result


def test_wheel_is_abi3_and_manylinux2014_by_auditwheel(wheel: Path) -> None:
    assert "-cp310-abi3-" in wheel.name, f"{wheel.name} is not an abi3 wheel for CPython 3.10+"
    assert f"{MANYLINUX}_{MACHINE}" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    for expected in ("redoxide/__init__.py", "redoxide/py.typed", "redoxide/_redoxide.pyi"):
        assert expected in names, f"{expected} missing from {wheel.name}: {names}"
    assert any(n.startswith("redoxide/_redoxide") and n.endswith(".abi3.so") for n in names), names
    auditwheel = Path(sys.executable).with_name("auditwheel")
    if not auditwheel.exists():
        pytest.skip("auditwheel is not installed (pip install auditwheel)")
    shown = subprocess.run(
        [auditwheel, "show", str(wheel)], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    platform_tag = r'consistent with the following platform tag: "manylinux_2_(\d+)_'
    tag = re.search(platform_tag + MACHINE + '"', text)
    assert tag, shown.stdout
    assert int(tag.group(1)) <= MAX_GLIBC_MINOR, shown.stdout


@pytest.mark.parametrize("base_python", _interpreters())
def test_wheel_installs_in_a_fresh_virtualenv_and_serves_the_cache(
    wheel: Path, base_python: str, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    python = _venv_with(base_python, env_dir, str(wheel), f"django=={version('django')}")
    result = _check_serves_the_cache(python, env_dir)
    expected = subprocess.run(
        [base_python, "-c", "import sys; print(list(sys.version_info[:2]))"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result["python"] == json.loads(expected.stdout)


@pytest.mark.timeout(2 * BUILD_TIMEOUT)
def test_sdist_builds_with_pip_in_a_clean_virtualenv(
    tmp_path: Path,
) -> None:
    sdist = _fresh("redoxide-*.tar.gz")
    if sdist is None:
        maturin = _maturin()
        if maturin is None:
            pytest.skip("maturin is not installed")
        sdist = _built_once("sdist", "redoxide-*.tar.gz", [maturin, "sdist"])
    env_dir = tmp_path / "venv"
    # pip builds it from source in isolation: maturin from the index, the crates from cargo.
    python = _venv_with(sys.executable, env_dir, str(sdist), f"django=={version('django')}")
    _check_serves_the_cache(python, env_dir)
