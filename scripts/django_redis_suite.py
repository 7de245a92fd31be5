"""Run django-redis' own test suite against redoxide, with BACKEND swapped.

    .venv/bin/python scripts/django_redis_suite.py          # make test-django-redis

django-redis' tests come from its sdist on PyPI (the version pinned below, downloaded once into
~/.cache/redoxide/django-redis). They run as django-redis' users' code would: their settings
files with ``"BACKEND": "redoxide.RedisCache"`` instead of ``"django_redis.cache.RedisCache"``,
everything else (OPTIONS, CLIENT_CLASS, serializers, compressors, the key format) as written.
Their settings point at fixed ports (6379, 26379); here they point at a redis-server and a
Sentinel set started on free loopback ports, and stopped by pid, as every test of ours does.

What is not run says why, below: whole files that test django-redis' own classes (its
connection pools, client objects, hash ring, serializer classes), settings variants for a
client redoxide does not have, and single tests that patch django-redis internals. Exit status
is pytest's: 0 only if every selected test passed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.servers import RedisServer, SentinelSet, free_port  # noqa: E402

VERSION = "7.0.0"
#: Variants run at once: their tests mostly wait (expiry sleeps), so three share two cores.
PARALLEL = 3
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "redoxide" / "django-redis"

#: Their settings variants we run, and the ones we do not (with why).
VARIANTS = [
    "sqlite",
    "sqlite_json",
    "sqlite_msgpack",
    "sqlite_gzip",
    "sqlite_zlib",
    "sqlite_lz4",
    "sqlite_zstd",
    "sqlite_sentinel",
    "sqlite_sentinel_opts",
    "sqlite_usock",
]
NOT_RUN_VARIANTS = {
    "sqlite_herd": "CLIENT_CLASS HerdClient: redoxide refuses it by name (STAMPEDE_PROTECTION "
    "is its answer to the thundering herd, and reads a value HerdClient wrote as plain data)",
    "sqlite_sharding": "CLIENT_CLASS ShardClient (client-side hash-ring sharding): redoxide "
    "shards with Redis Cluster, and refuses ShardClient by name",
}

#: Test files that test django-redis' own classes, not the cache API.
NOT_RUN_FILES = {
    "test_client.py": "DefaultClient / ShardClient methods called directly",
    "test_connection_factory.py": "django-redis' ConnectionFactory and pools",
    "test_connection_params.py": "redis-py connection keyword arguments built by its factory",
    "test_hashring.py": "ShardClient's hash ring",
    "test_serializers.py": "django-redis' serializer classes (redoxide's read and write the "
    "same bytes: tests/values/test_interop.py)",
}
RUN_FILES = [
    "test_backend.py",
    "test_backend_sorted_sets.py",
    "test_cache_options.py",
    "test_session.py",
]

#: Single tests that reach into django-redis internals (node id prefix -> why). Each asserts
#: something about django-redis' own objects, not about what the cache stores or returns.
_BACKEND = "tests/test_backend.py::TestDjangoRedisCache::"
_OPTIONS = "tests/test_cache_options.py::"
DESELECT = {
    _BACKEND + "test_delete_pattern_with_custom_count": "patches RedisCache.client with a mock",
    _BACKEND + "test_delete_pattern_with_settings_default_scan_count": "patches RedisCache.client",
    _BACKEND + "test_close_uninitialized_client": "patches RedisCache.client",
    _BACKEND + "test_close_with_signal_parameter": "patches RedisCache.client",
    _BACKEND + "test_close_client": "patches cache.client.close: redoxide's close() does "
    "nothing (connections belong to the process, not the request)",
    _BACKEND + "test_set_call_empty_pipeline": "passes a mocked redis-py pipeline as set()'s "
    "client= argument (django-redis' methods take a redis-py client; redoxide's do not)",
    _BACKEND + "test_save_dict": "reads cache.client._serializer, a DefaultClient private, and "
    "takes its branch by django-redis' serializer classes",
    _BACKEND + "test_intenum": "reads cache.client._serializer (as test_save_dict)",
    _BACKEND + "test_primary_replica_switching": "assigns DefaultClient privates (_server, "
    "_clients) on the 'sample' alias, whose LOCATION is host:port:db in a URL",
    _BACKEND + "test_primary_replica_switching_with_index": "as test_primary_replica_switching",
    _BACKEND + "test_sscan_with_match": "calls cache.client._has_compression_enabled(), a "
    "DefaultClient private (the same case runs in tests/structures)",
    _BACKEND + "test_sscan_iter_with_match": "calls cache.client._has_compression_enabled()",
    _OPTIONS + "test_get_django_omit_exceptions_many_returns_default_arg": "reads "
    "cache._ignore_exceptions, a django-redis private (tests/reliability/test_fail_open.py "
    "checks the same settings' precedence)",
    _OPTIONS + "test_get_django_omit_exceptions": "reads cache._ignore_exceptions and "
    "_log_ignored_exceptions; expects django-redis' log message text",
    _OPTIONS + "test_get_django_omit_exceptions_priority_1": "reads cache._ignore_exceptions",
    _OPTIONS + "test_get_django_omit_exceptions_priority_2": "reads cache._ignore_exceptions and "
    "expects redis-py's ConnectionError class (redoxide raises its ConnectionInterrupted, a "
    "builtin ConnectionError)",
}


def sdist() -> Path:
    """django-redis' sdist, downloaded once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"django_redis-{VERSION}.tar.gz"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        what = ["--no-binary", ":all:", f"django-redis=={VERSION}", "-d", str(CACHE)]
        subprocess.run([*pip, *what], check=True)
        found = sorted(CACHE.glob(f"django_redis-{VERSION}.tar.gz"))
    return found[0]


def rewrite_settings(
    settings_dir: Path, port: int, dead: int, socket: str, sentinels: list[tuple[str, int]]
) -> None:
    for path in settings_dir.glob("sqlite*.py"):
        text = path.read_text()
        text = text.replace('"django_redis.cache.RedisCache"', '"redoxide.RedisCache"')
        text = text.replace("127.0.0.1:56379", f"127.0.0.1:{dead}")
        text = text.replace("127.0.0.1:6379", f"127.0.0.1:{port}")
        text = text.replace("/tmp/redis.sock", socket)
        # The one service our Sentinel set watches (their two variants name it differently).
        text = text.replace("redis://default_service?", "redis://127.0.0.1?")
        text = re.sub(
            r"SENTINELS = \[.*?\]", f"SENTINELS = {sentinels!r}", text, count=1, flags=re.S
        )
        path.write_text(text)


def variant_from_environment(conftest: Path) -> None:
    """Their conftest parametrizes every test over all twelve variants; here each pytest
    process runs the one named by REDOXIDE_DJR_VARIANT (their conftest imports environ)."""
    text = conftest.read_text()
    start = text.index("settings = [")
    end = text.index("]", start) + 1
    conftest.write_text(text[:start] + 'settings = [environ["REDOXIDE_DJR_VARIANT"]]' + text[end:])


def run_variant(suite: Path, variant: str, extra: list[str]) -> tuple[int, str, str]:
    """One pytest process per settings variant: Django reads its settings once a process
    (django-redis' own CI gives each variant an xdist worker of its own for the same reason).
    Each variant has a database of its own in their settings, so variants run side by side."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        *[f"tests/{name}" for name in RUN_FILES],
        *[f"--deselect={node}" for node in DESELECT],
        *extra,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(suite),
        "DJANGO_SETTINGS_MODULE": f"settings.{variant}",
        "REDOXIDE_DJR_VARIANT": variant,
    }
    done = subprocess.run(command, cwd=suite, env=env, check=False, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else done.stderr.strip()[-300:]
    output = "" if done.returncode == 0 else done.stdout[-20000:] + "\n" + done.stderr[-5000:]
    return done.returncode, summary, output


def main() -> int:
    extra = sys.argv[1:]  # passed to pytest as they are (-k, -x, --tb=short...)
    with tempfile.TemporaryDirectory(prefix="django-redis-suite-") as tmp:
        with tarfile.open(sdist()) as archive:
            archive.extractall(tmp, filter="data")
        suite = Path(tmp) / f"django_redis-{VERSION}"
        socket = str(Path(tmp) / "redis.sock")
        with (
            RedisServer("--unixsocket", socket, "--unixsocketperm", "700") as server,
            SentinelSet(service="127.0.0.1") as sset,
        ):
            rewrite_settings(
                suite / "tests" / "settings",
                server.port,
                free_port(),
                socket,
                sset.sentinel_addresses,
            )
            print(f"django-redis {VERSION}'s own tests against redoxide (BACKEND swapped)")
            for name, why in {**NOT_RUN_VARIANTS, **NOT_RUN_FILES, **DESELECT}.items():
                print(f"  not run: {name}: {why}")
            variant_from_environment(suite / "tests" / "conftest.py")
            chosen = os.environ.get("DJANGO_REDIS_VARIANTS", "").split(",")
            variants = [v for v in VARIANTS if v in chosen or chosen == [""]]
            with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
                results = list(pool.map(lambda v: run_variant(suite, v, extra), variants))
            failed = []
            for variant, (code, _, output) in zip(variants, results, strict=True):
                if code != 0:
                    print(output)
                    failed.append(variant)
            for variant, (_, summary, _) in zip(variants, results, strict=True):
                print(f"  {variant:22} {summary}")
            print("FAILED: " + ", ".join(failed) if failed else "all variants passed")
            return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
