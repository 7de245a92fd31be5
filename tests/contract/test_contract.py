"""Django's own cache backend contract, run against the backend under test.

BaseCacheTests comes from tests/cache/tests.py of the Django sdist that matches the installed
Django. It is downloaded at test time (``pip download``) into tests/_django_contract/
(git-ignored), extracted there once and reused; it is never copied into the repository.

The test class mirrors Django's own RedisCacheTests: the same cache settings built by
caches_setting_for_tests() with Django's ``redis_excluded_caches`` (the cull caches, so the
cull tests skip themselves exactly as they do for the builtin RedisCache), and the same
override of ``incr_decr_type_error`` (the error the backend raises for incr of a value that
is not an integer; see support.backend.backend_incr_type_error). The
builtin-only tests of RedisCacheTests (redis-py pools and clients) are not part of the
contract and are not repeated.
"""

from __future__ import annotations

import fcntl
import importlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import django
import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import TestCase, override_settings
from django.test.utils import (
    setup_databases,
    setup_test_environment,
    teardown_databases,
    teardown_test_environment,
)
from django.utils.module_loading import import_string
from support.backend import BACKEND, backend_incr_type_error

# Beside the tests, not in this folder: the path is git-ignored and excluded from ruff.
CONTRACT_DIR = Path(__file__).resolve().parent.parent / "_django_contract"


def _download_sdist(version: str) -> Path:
    """Return the Django sdist for version, downloading it with pip unless it is cached."""
    CONTRACT_DIR.mkdir(exist_ok=True)
    for path in CONTRACT_DIR.iterdir():
        if path.name.lower() == f"django-{version}.tar.gz":
            return path
    result = subprocess.run(
        [
            sys.executable, "-m", "pip", "download", f"django=={version}",
            "--no-deps", "--no-binary", ":all:", "--dest", str(CONTRACT_DIR),
            "--disable-pip-version-check", "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    for path in CONTRACT_DIR.iterdir():
        if path.name.lower() == f"django-{version}.tar.gz":
            return path
    raise RuntimeError(
        f"could not download the Django {version} sdist for the contract tests "
        f"(pip exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    )


def _contract_root() -> Path:
    """Return a directory holding Django's tests/cache package as ``cache``.

    Every xdist worker imports this module, so the download and the extraction run under an
    exclusive lock on a file beside them: one worker fetches, the others wait for the lock and
    find the folder complete. Without it a second worker replaced the folder the first was
    importing from (``No module named 'cache.tests'`` on a fresh clone).
    """
    version = django.__version__
    root = CONTRACT_DIR / version
    if (root / "cache" / "tests.py").is_file():
        return root
    CONTRACT_DIR.mkdir(exist_ok=True)
    with open(CONTRACT_DIR / f"{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (root / "cache" / "tests.py").is_file():
                _extract_contract(version, root)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root


def _extract_contract(version: str, root: Path) -> None:
    """Extract the sdist's tests/cache into root/cache (the caller holds the lock)."""
    sdist = _download_sdist(version)
    staging = Path(tempfile.mkdtemp(prefix="contract-", dir=CONTRACT_DIR))
    try:
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/tests/cache/" in m.name]
            if not members:
                raise RuntimeError(f"{sdist.name} has no tests/cache/ directory")
            for member in members:
                member.name = "cache/" + member.name.split("/tests/cache/", 1)[1]
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=members, filter="data")
            else:
                tar.extractall(staging, members=members)
        if root.exists():
            shutil.rmtree(root)
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _import_django_cache_tests() -> ModuleType:
    """Import Django's cache tests as ``cache.tests`` with the ``cache`` test app installed."""
    root = str(_contract_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    importlib.invalidate_caches()
    # cache.tests imports cache.models (Poll); the app must be installed before that import.
    # The override stays on for the session: an extra test app does not affect other tests.
    if "cache" not in settings.INSTALLED_APPS:
        override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "cache"]).enable()
    return importlib.import_module("cache.tests")


django_cache_tests = _import_django_cache_tests()


@pytest.fixture(scope="module", autouse=True)
def contract_environment(contract_settings: dict[str, Any]) -> Iterator[None]:
    """Set up what Django's test runner would: test environment, test database, CACHES."""
    try:
        setup_test_environment()
        own_environment = True
    except RuntimeError:  # another module already set it up
        own_environment = False
    old_databases = setup_databases(verbosity=0, interactive=False)
    cache_settings = override_settings(
        CACHES=django_cache_tests.caches_setting_for_tests(
            base={"BACKEND": BACKEND, **contract_settings},
            exclude=django_cache_tests.redis_excluded_caches,
        )
    )
    cache_settings.enable()
    caches["default"].clear()
    try:
        yield
    finally:
        caches.close_all()
        cache_settings.disable()
        teardown_databases(old_databases, verbosity=0)
        if own_environment:
            teardown_test_environment()


class RedoxideContractTests(django_cache_tests.BaseCacheTests, TestCase):  # type: ignore[misc]
    """Django's BaseCacheTests, configured as Django configures its RedisCacheTests."""

    @property
    def incr_decr_type_error(self) -> type[Exception]:
        return backend_incr_type_error()

    def test_contract_runs_the_backend_under_test(self) -> None:
        # Guard against a settings mix-up silently testing another backend.
        self.assertIs(type(caches["default"]), import_string(BACKEND))
