"""Promises the backend's documentation makes, held where they are easiest to break.

- incr/decr stay atomic when the value leaves 64 bits or is a float (threads and tasks racing
  on one key lose no update), and big ints keep their exact digits;
- CLEAR_PREFIX_ONLY with a KEY_FUNCTION deletes exactly this cache's keys, or refuses (a
  ConfigurationError, nothing deleted) when the key function hides the prefix; so do
  delete_pattern, keys and ``cache_clear --prefix-only``;
- a user's COMPRESSOR (redoxide's BaseCompressor or a django-redis style class) and a
  SERIALIZER whose output is compressed already round-trip, long and short values;
- STAMPEDE_PROTECTION leaves no lock behind when the callable raises or its value cannot be
  pickled;
- SOCKET_TIMEOUT bounds a whole reply on the sync path (a server trickling a reply, a server
  that stops reading a large write);
- a decompression bomb is refused without inflating it all;
- fail-open get_many misses only the key that cannot be decoded;
- ``manage.py check`` reports a bad option with its id instead of a traceback;
- and their siblings: fail-open hash, set and sorted-set reads miss only the undecodable
  member; get_or_set replaces an undecodable value under fail-open and never calls its
  function twice; a lock whose acquire lost its reply is released, not held for ever.

Servers are real redis-server processes on loopback, except for the misbehaving server of
the timeout tests (support/netfakes.py). Key functions, compressors and serializers are this
module's, by dotted path (``test_promises.NAME``) as a user writes them in settings.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import lzma
import os
import pickle
import random
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redoxide
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redoxide.compressors import BaseCompressor
from redoxide.exceptions import (
    CacheTimeout,
    ConfigurationError,
    ConnectionInterrupted,
    SerializationError,
)
from support.backend import build_cache, is_redoxide
from support.dispatch import Ops
from support.netfakes import MisbehavingServer
from support.operations import LOCMEM, run, run_process
from support.servers import Cluster, RedisServer, free_port

pytestmark = pytest.mark.skipif(not is_redoxide(), reason="redoxide's promises")

MakeCache = Callable[..., Any]
HERE = "test_promises"

# -- plugins, by dotted path ("test_promises.NAME") -------------------------------------------


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def hashed_tail_key(key: Any, key_prefix: str, version: Any) -> str:
    """Prefix and version kept in front, the key hashed: "prefix:version:sha1(key)"."""
    return f"{key_prefix}:{version}:{_sha1(str(key))}"


def hashed_key(key: Any, key_prefix: str, version: Any) -> str:
    """Everything hashed: nothing in the stored key says which cache wrote it."""
    return _sha1(f"{key_prefix}:{version}:{key}")


def verbatim_key(key: Any, key_prefix: str, version: Any) -> str:
    """The key kept verbatim, in another layout than Django's: "key|prefix|version"."""
    return f"{key}|{key_prefix}|{version}"


class HeaderZlibCompressor(BaseCompressor):
    """A format of its own, which no built-in compressor recognises: b"MYZ1" + zlib."""

    min_length = 64
    HEADER = b"MYZ1"

    def compress(self, data: bytes) -> bytes:
        return self.HEADER + zlib.compress(data)

    def decompress(self, data: bytes) -> bytes:
        return zlib.decompress(data[len(self.HEADER) :])

    def is_compressed(self, data: bytes) -> bool:
        return data[: len(self.HEADER)] == self.HEADER


class CompressorError(Exception):
    """What DjangoRedisStyleCompressor raises for data it did not compress (django-redis'
    compressors raise their own CompressorError)."""


class DjangoRedisStyleCompressor:
    """A compressor as django-redis writes them: no redoxide base class, no is_compressed,
    takes the OPTIONS dict, decides itself what is worth compressing, and raises an exception
    of its own on data it did not compress. Its format is its own (b"DRZ1" + zlib)."""

    min_length = 64
    HEADER = b"DRZ1"

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options

    def compress(self, value: bytes) -> bytes:
        if len(value) > self.min_length:
            return self.HEADER + zlib.compress(value)
        return value

    def decompress(self, value: bytes) -> bytes:
        if value[: len(self.HEADER)] != self.HEADER:
            raise CompressorError("not compressed by DjangoRedisStyleCompressor")
        try:
            return zlib.decompress(value[len(self.HEADER) :])
        except zlib.error as exc:
            raise CompressorError(str(exc)) from exc


class ZlibPickleSerializer:
    """A serializer whose output is compressed already (zlib over pickle)."""

    def dumps(self, value: Any) -> bytes:
        return zlib.compress(pickle.dumps(value))

    def loads(self, data: bytes) -> Any:
        return pickle.loads(zlib.decompress(data))


# Values: one that compresses well, one below every min_length above (a 17-byte pickle), and
# one whose zlib output is still kilobytes long (above Lz4Compressor's 256-byte min_length).
LONG = {"text": "long " * 400, "numbers": list(range(200))}
SHORT = "ab"
NOISE = {"blob": random.Random(7).randbytes(3000).hex()}


def raw_get(cache: Any, key: str) -> Any:
    """The bytes the server holds for a cache key (no decoding)."""
    return cache.client.execute("GET", cache.make_key(key))


def server_keys(cache: Any) -> set[bytes]:
    """Every key in the cache's database (a test server: KEYS is fine)."""
    return set(cache.client.execute("KEYS", "*"))


# -- 1. incr/decr: atomic past 64 bits and with floats -----------------------------------------

BIG = 2**63 - 1
THREADS, CALLS = 8, 100


def incr_from_threads(cache: Any, key: str, delta: Any) -> None:
    """THREADS threads, started together, each calling incr(key, delta) CALLS times."""
    start = threading.Barrier(THREADS)

    def work() -> None:
        start.wait(timeout=30)
        for _ in range(CALLS):
            cache.incr(key, delta)

    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(work) for _ in range(THREADS)]:
            future.result(timeout=60)


@pytest.mark.parametrize(
    ("initial", "delta", "expected"),
    [
        (BIG, 1, BIG + THREADS * CALLS),
        (1.5, 1, 1.5 + THREADS * CALLS),
        (10, 0.5, 10 + 0.5 * THREADS * CALLS),
    ],
    ids=["past-64-bits", "float-value", "float-delta"],
)
def test_concurrent_incr_loses_no_update(
    make_cache: MakeCache, initial: Any, delta: Any, expected: Any
) -> None:
    cache = make_cache()
    cache.set("n", initial)
    incr_from_threads(cache, "n", delta)
    got = cache.get("n")
    assert got == expected
    assert type(got) is type(expected)


def test_concurrent_aincr_past_64_bits_loses_no_update(make_cache: MakeCache) -> None:
    cache = make_cache()
    cache.set("n", BIG)

    async def work() -> None:
        for _ in range(CALLS):
            await cache.aincr("n")

    async def main() -> None:
        await asyncio.gather(*(work() for _ in range(THREADS)))

    asyncio.run(main())
    got = cache.get("n")
    assert got == BIG + THREADS * CALLS, f"{BIG + THREADS * CALLS - got} increments lost"


def test_incr_and_decr_past_64_bits_keep_exact_digits(ops: Ops) -> None:
    cache = ops.cache
    cache.set("up", BIG)
    assert ops.incr("up") == 2**63
    assert raw_get(cache, "up") == b"9223372036854775808"
    assert cache.get("up") == 2**63
    cache.set("down", -(2**63))
    assert ops.decr("down") == -(2**63) - 1
    assert cache.get("down") == -(2**63) - 1
    assert ops.incr("created", 2**64, ignore_key_check=True) == 2**64
    assert cache.get("created") == 2**64
    with pytest.raises(ValueError):
        ops.incr("missing")
    assert not cache.has_key("missing")


# -- 2. CLEAR_PREFIX_ONLY, delete_pattern and keys with a KEY_FUNCTION -------------------------

VERSIONS = (1, 2, 7)


def fill(cache: Any, names: list[str], versions: tuple[int, ...] = (1,)) -> None:
    for version in versions:
        cache.set_many({name: f"{name}@{version}" for name in names}, version=version)


def test_clear_prefix_only_with_a_key_function_deletes_every_version_and_no_other_cache(
    make_cache: MakeCache, mode: str
) -> None:
    mine = make_cache(
        KEY_PREFIX="mine", KEY_FUNCTION=f"{HERE}.hashed_tail_key", CLEAR_PREFIX_ONLY=True
    )
    other = make_cache(KEY_PREFIX="other")
    names = ["a", "b", "long-" * 10]
    fill(mine, names, VERSIONS)
    fill(other, names)
    theirs = {other.make_key(name).encode() for name in names}
    assert len(server_keys(mine)) == len(names) * (len(VERSIONS) + 1)

    assert Ops(mine, mode).clear() is True

    assert server_keys(mine) == theirs
    for version in VERSIONS:
        assert mine.get_many(names, version=version) == {}
    assert other.get_many(names) == {name: f"{name}@1" for name in names}


def test_clear_prefix_only_refuses_a_key_function_that_hides_the_prefix(
    make_cache: MakeCache, mode: str
) -> None:
    mine = make_cache(KEY_PREFIX="mine", KEY_FUNCTION=f"{HERE}.hashed_key", CLEAR_PREFIX_ONLY=True)
    other = make_cache(KEY_PREFIX="other")
    fill(mine, ["a", "b"], VERSIONS)
    fill(other, ["a"])
    before = server_keys(mine)
    size = mine.client.execute("DBSIZE")

    with pytest.raises(ConfigurationError) as refused:
        Ops(mine, mode).clear()

    assert isinstance(refused.value, ImproperlyConfigured)
    assert mine.client.execute("DBSIZE") == size == 7
    assert server_keys(mine) == before


@pytest.mark.parametrize("key_function", ["hashed_tail_key", "hashed_key"])
@pytest.mark.parametrize("method", ["delete_pattern", "keys"])
def test_patterns_refuse_a_key_function_that_hashes_the_key(
    make_cache: MakeCache, mode: str, key_function: str, method: str
) -> None:
    mine = make_cache(KEY_PREFIX="mine", KEY_FUNCTION=f"{HERE}.{key_function}")
    fill(mine, ["a1", "a2", "b1"])
    before = server_keys(mine)

    with pytest.raises(ConfigurationError):
        getattr(Ops(mine, mode), method)("a*")

    assert server_keys(mine) == before
    assert mine.get("a1") == "a1@1"


def test_delete_pattern_with_a_verbatim_key_function_deletes_exactly_the_matches(
    make_cache: MakeCache, mode: str
) -> None:
    mine = make_cache(KEY_PREFIX="mine", KEY_FUNCTION=f"{HERE}.verbatim_key")
    other = make_cache(KEY_PREFIX="other", KEY_FUNCTION=f"{HERE}.verbatim_key")
    plain = make_cache(KEY_PREFIX="mine")
    fill(mine, ["a1", "a2", "ab", "b1", "ba"])
    fill(mine, ["a1"], (2,))
    fill(other, ["a1", "b1"])
    fill(plain, ["a1"])
    everything = server_keys(mine)
    matched = {mine.make_key(name).encode() for name in ("a1", "a2", "ab")}

    assert Ops(mine, mode).delete_pattern("a*") == 3

    assert server_keys(mine) == everything - matched
    assert mine.get_many(["a1", "a2", "ab", "b1", "ba"]) == {"b1": "b1@1", "ba": "ba@1"}
    assert mine.get("a1", version=2) == "a1@2"


def test_cache_clear_prefix_only_refuses_a_key_function_that_hides_the_prefix(
    make_cache: MakeCache, redis_server: RedisServer
) -> None:
    settings = {"KEY_PREFIX": "mine", "KEY_FUNCTION": f"{HERE}.hashed_key"}
    mine = make_cache(**settings)
    other = make_cache(KEY_PREFIX="other")
    fill(mine, ["a", "b"], VERSIONS)
    fill(other, ["a"])
    before = server_keys(mine)
    entry = {"BACKEND": "redoxide.RedisCache", "LOCATION": redis_server.url, **settings}

    with override_settings(INSTALLED_APPS=["redoxide"], CACHES={"default": LOCMEM, "mine": entry}):
        try:
            code = run("cache_clear", "mine", "--prefix-only").code
        except SystemExit as exit_:
            code = exit_.code

    assert code not in (0, None)
    assert server_keys(mine) == before


# -- 3. user codecs ----------------------------------------------------------------------------


def round_trip(ops: Ops, values: dict[str, Any]) -> None:
    """Each value back from get, and all of them from get_many, after set and set_many."""
    for name, value in values.items():
        ops.set(name, value)
    for name, value in values.items():
        assert ops.get(name) == value, name
    ops.set_many({f"many-{name}": value for name, value in values.items()})
    names = [f"many-{name}" for name in values] + ["missing"]
    assert ops.get_many(names) == {f"many-{name}": value for name, value in values.items()}


@pytest.mark.parametrize(
    "compressor",
    [f"{HERE}.HeaderZlibCompressor", f"{HERE}.DjangoRedisStyleCompressor"],
    ids=["base-compressor-subclass", "django-redis-style"],
)
def test_a_compressor_with_a_format_of_its_own_round_trips(
    make_cache: MakeCache, mode: str, compressor: str
) -> None:
    cache = make_cache(COMPRESSOR=compressor)
    ops = Ops(cache, mode)
    round_trip(ops, {"long": LONG, "short": SHORT, "noise": NOISE})
    header = b"MYZ1" if compressor.endswith("HeaderZlibCompressor") else b"DRZ1"
    assert raw_get(cache, "long").startswith(header)  # the user's compressor wrote it
    assert not raw_get(cache, "short").startswith(header)  # below min_length: as pickled


@pytest.mark.parametrize(
    "compressor", [None, "redoxide.compressors.Lz4Compressor"], ids=["alone", "with-lz4"]
)
def test_a_serializer_whose_output_is_compressed_round_trips(
    make_cache: MakeCache, mode: str, compressor: str | None
) -> None:
    options: dict[str, Any] = {"SERIALIZER": f"{HERE}.ZlibPickleSerializer"}
    if compressor is not None:
        options["COMPRESSOR"] = compressor
    ops = Ops(make_cache(**options), mode)
    round_trip(
        ops,
        {"dict": {"a": 1}, "text": "short", "long-dict": LONG, "long-text": "y" * 10_000},
    )
    round_trip(ops, {"noise": NOISE})


# -- 4. STAMPEDE_PROTECTION leaves no lock behind ----------------------------------------------


def boom() -> Any:
    raise RuntimeError("boom")


def unpicklable() -> Any:
    return threading.Lock()


@pytest.mark.parametrize(
    ("default", "error"),
    [(boom, RuntimeError), (unpicklable, (TypeError, pickle.PicklingError))],
    ids=["callable-raises", "value-unpicklable"],
)
def test_stampede_protected_get_or_set_releases_its_lock_when_computing_fails(
    make_cache: MakeCache, mode: str, default: Callable[[], Any], error: Any
) -> None:
    cache = make_cache(STAMPEDE_PROTECTION=True)
    ops = Ops(cache, mode)

    with pytest.raises(error):
        ops.get_or_set("k", default)

    assert server_keys(cache) == set(), "a recompute lock was left behind"
    assert ops.get_or_set("k", lambda: 2) == 2
    assert cache.get("k") == 2
    assert server_keys(cache) == {cache.make_key("k").encode()}


# -- 5. SOCKET_TIMEOUT bounds the whole reply --------------------------------------------------


@dataclass
class Outcome:
    """How a call run in a thread of its own ended, if it did within the bound."""

    finished: bool
    value: Any = None
    error: BaseException | None = None


def within(bound: float, call: Callable[[], Any]) -> Outcome:
    """Run call() in a daemon thread; wait at most `bound` seconds for it to end."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # reported to the test, whatever it is
            box["error"] = exc

    thread = threading.Thread(target=target, name="bounded-call", daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        return Outcome(False)
    return Outcome(True, box.get("value"), box.get("error"))


TIGHT = {"SOCKET_TIMEOUT": 0.5, "SOCKET_CONNECT_TIMEOUT": 0.5}


def test_a_trickled_reply_times_out(mode: str) -> None:
    with MisbehavingServer("trickle") as server:
        cache = build_cache(server.url, {"OPTIONS": TIGHT})
        if mode == "sync":
            outcome = within(5.0, lambda: cache.get("k"))
        else:
            outcome = within(5.0, lambda: asyncio.run(cache.aget("k")))
        assert outcome.finished, "get kept reading a reply trickled past SOCKET_TIMEOUT (5 s)"
        assert b"GET" in server.commands
    assert isinstance(outcome.error, CacheTimeout), outcome


def test_a_write_the_server_does_not_read_times_out(mode: str) -> None:
    value = b"x" * (64 * 2**20)
    with MisbehavingServer("deaf") as server:
        cache = build_cache(server.url, {"OPTIONS": TIGHT})
        if mode == "sync":
            outcome = within(10.0, lambda: cache.set("k", value))
        else:
            outcome = within(10.0, lambda: asyncio.run(cache.aset("k", value)))
        assert outcome.finished, "set kept writing to a server that reads nothing (10 s)"
    assert isinstance(outcome.error, (CacheTimeout, ConnectionInterrupted)), outcome


# -- 6. decompression bombs --------------------------------------------------------------------

BOMB_SIZE = 600 * 2**20
# HEAD before the fix grew ~1 GiB for zlib/xz (inflated to the 512 MiB cap, then joined) and
# for size-less lz4/zstd frames (a buffer grown to the cap, then copied).
MAX_GROWTH_KIB = 160 * 1024

# Run in a process of its own, so that its peak memory is the get's: a cache on argv[1] reads
# the planted key "bomb" after a warm-up get; prints the outcome and how much the peak resident
# set grew. The peak is VmHWM, this process image's own: ru_maxrss would do on a fresh
# process, but Linux carries the parent's peak into it across fork and exec, so under a test
# process that once held a few hundred MiB it would hide as much of the child's growth.
BOMB_READER = """
import json, resource, sys
from django.conf import settings
settings.configure(CACHES={"default": {"BACKEND": "redoxide.RedisCache", "LOCATION": sys.argv[1]}})
from django.core.cache import caches
from redoxide.exceptions import SerializationError

def peak_kib():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

cache = caches["default"]
cache.get("warm-up")
before = peak_kib()
try:
    cache.get("bomb")
    outcome = "returned"
except SerializationError:
    outcome = "SerializationError"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
after = peak_kib()
print(json.dumps({"outcome": outcome, "growth_kib": after - before}))
"""


def bomb(kind: str) -> bytes:
    """BOMB_SIZE zero bytes compressed, streamed (never holding them all)."""
    compressor: Any
    if kind == "zlib":
        compressor = zlib.compressobj(1)
    elif kind == "xz":
        compressor = lzma.LZMACompressor(preset=0)
    elif kind == "zstd":  # a streamed frame: no content size in its header
        import zstandard

        compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    else:  # lz4, streamed: no content size either
        import lz4.frame

        lz4_frames = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB)
        head = lz4_frames.begin()
        chunk = bytes(8 * 2**20)
        body = [lz4_frames.compress(chunk) for _ in range(BOMB_SIZE // len(chunk))]
        return head + b"".join(body) + lz4_frames.flush()
    chunk = bytes(8 * 2**20)
    parts = [compressor.compress(chunk) for _ in range(BOMB_SIZE // len(chunk))]
    parts.append(compressor.flush())
    return b"".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["zlib", "xz", "zstd", "lz4"])
def test_a_decompression_bomb_is_refused_without_inflating_it(
    make_cache: MakeCache, redis_server: RedisServer, kind: str
) -> None:
    cache = make_cache()
    cache.client.execute("SET", cache.make_key("bomb"), bomb(kind))
    package_root = Path(redoxide.__file__).resolve().parents[1]
    paths = [str(package_root), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-c", BOMB_READER, redis_server.url],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["outcome"] == "SerializationError"
    growth_mib = report["growth_kib"] / 1024
    assert report["growth_kib"] < MAX_GROWTH_KIB, f"peak RSS grew {growth_mib:.0f} MiB"


# -- 7. fail-open get_many misses only the undecodable key -------------------------------------

GARBAGE = b"\x80\x05garbage"


def plant_garbage(cache: Any) -> None:
    cache.set_many({"a": "A", "b": "B", "c": "C"})
    cache.client.execute("SET", cache.make_key("b"), GARBAGE)


def check_get_many_misses_only_the_bad_key(fail_open: Any, strict: Any, mode: str) -> None:
    plant_garbage(fail_open)
    before = fail_open.stats()["fail_open_misses"]
    assert Ops(fail_open, mode).get_many(["a", "b", "c"]) == {"a": "A", "c": "C"}
    assert fail_open.stats()["fail_open_misses"] >= before + 1
    with pytest.raises(SerializationError) as refused:
        Ops(strict, mode).get_many(["a", "b", "c"])
    message = str(refused.value)
    assert "'b'" in message or strict.make_key("b") in message, message


def test_fail_open_get_many_misses_only_the_undecodable_key(
    make_cache: MakeCache, mode: str
) -> None:
    check_get_many_misses_only_the_bad_key(make_cache(IGNORE_EXCEPTIONS=True), make_cache(), mode)


def test_fail_open_get_many_on_a_cluster_misses_only_the_undecodable_key(
    cluster: Cluster, mode: str
) -> None:
    def on_cluster(**options: Any) -> Any:
        params = {"KEY_PREFIX": f"promises-{mode}", "OPTIONS": {"CLUSTER": True, **options}}
        return build_cache(cluster.urls[:2], params)

    check_get_many_misses_only_the_bad_key(on_cluster(IGNORE_EXCEPTIONS=True), on_cluster(), mode)


# -- 8. manage.py check reports a bad option -------------------------------------------------


@pytest.mark.parametrize(
    ("options", "check_id"),
    [({"SOCKET_TIMEOUT": "soon"}, "redoxide.E003"), ({"SOKET_TIMEOUT": 1}, "redoxide.E002")],
    ids=["invalid-value", "unknown-name"],
)
def test_manage_py_check_reports_a_bad_option_instead_of_crashing(
    tmp_path: Path, options: dict[str, Any], check_id: str
) -> None:
    caches_setting = {
        "default": {
            "BACKEND": "redoxide.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": options,
        }
    }
    done = run_process(tmp_path, caches_setting, "check")
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert done.returncode == 1, output
    assert check_id in output, output


# -- siblings ------------------------------------------------------------------------------------


def test_fail_open_structure_reads_miss_only_the_undecodable_member(
    make_cache: MakeCache, mode: str
) -> None:
    fail_open, strict = make_cache(IGNORE_EXCEPTIONS=True), make_cache()
    ops = Ops(fail_open, mode)
    ops.hset("h", "a", "A")
    ops.hset("h", "c", "C")
    fail_open.client.execute("HSET", fail_open.make_key("h"), "b", GARBAGE)
    ops.sadd("s", "A", "C")
    fail_open.client.execute("SADD", fail_open.make_key("s"), GARBAGE)
    ops.zadd("z", {"A": 1, "C": 3})
    fail_open.client.execute("ZADD", fail_open.make_key("z"), 2, GARBAGE)
    before = fail_open.stats()["fail_open_misses"]
    assert ops.hgetall("h") == {"a": "A", "c": "C"}
    assert ops.hmget("h", "a", "b") == ["A", None]
    assert ops.smembers("s") == {"A", "C"}
    assert ops.zrange("z", 0, -1) == ["A", "C"]
    assert ops.zrange("z", 0, -1, withscores=True) == [("A", 1.0), ("C", 3.0)]
    assert fail_open.stats()["fail_open_misses"] >= before + 5
    for call in (
        lambda: Ops(strict, mode).hgetall("h"),
        lambda: Ops(strict, mode).smembers("s"),
        lambda: Ops(strict, mode).zrange("z", 0, -1),
    ):
        with pytest.raises(SerializationError):
            call()


@pytest.mark.parametrize("guarded", [False, True], ids=["plain", "stampede-protected"])
def test_fail_open_get_or_set_replaces_an_undecodable_value(
    make_cache: MakeCache, mode: str, guarded: bool
) -> None:
    cache = make_cache(IGNORE_EXCEPTIONS=True, STAMPEDE_PROTECTION=guarded)
    cache.client.execute("SET", cache.make_key("g"), GARBAGE)
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return 5

    ops = Ops(cache, mode)
    assert ops.get_or_set("g", compute) == 5
    assert ops.get_or_set("g", compute) == 5  # stored this time: not computed again
    assert calls == [1]
    assert cache.get("g") == 5
    strict = make_cache(STAMPEDE_PROTECTION=guarded)
    strict.client.execute("SET", strict.make_key("g"), GARBAGE)
    with pytest.raises(SerializationError):
        Ops(strict, mode).get_or_set("g", compute)


def test_fail_open_get_or_set_calls_its_function_once_when_storing_fails(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    """The store after the computation times out (the server froze meanwhile): fail-open
    returns the computed value, without calling the function a second time."""
    params = {"OPTIONS": {"IGNORE_EXCEPTIONS": True, "SOCKET_TIMEOUT": 0.3}}
    cache = build_cache(fresh_redis_server.url, params)
    calls: list[int] = []

    def compute() -> str:
        calls.append(1)
        fresh_redis_server.pause()
        return "fresh"

    try:
        assert Ops(cache, mode).get_or_set("k", compute) == "fresh"
    finally:
        fresh_redis_server.resume()
    assert calls == [1]


def test_a_lock_whose_acquire_lost_its_reply_is_released(
    fresh_redis_server: RedisServer, mode: str
) -> None:
    """A lock without a timeout, acquired while the server is frozen: the SET NX waits in the
    socket and is applied when the server resumes, long after the caller got CacheTimeout.
    Nobody knows that token, so the lock would be held for ever; it is released instead."""
    cache = build_cache(fresh_redis_server.url, {"OPTIONS": {"SOCKET_TIMEOUT": 0.3}})
    name = cache.make_key("job")
    polls = 400  # up to ~20 s on a loaded host; usually the first poll
    if mode == "sync":
        fresh_redis_server.pause()
        try:
            with pytest.raises(CacheTimeout):
                cache.lock("job").acquire()
        finally:
            fresh_redis_server.resume()
        for _ in range(polls):
            if not cache.client.execute("EXISTS", name):
                break
            threading.Event().wait(0.05)
    else:

        async def scenario() -> None:
            lock = cache.alock("job")
            fresh_redis_server.pause()
            try:
                with pytest.raises(CacheTimeout):
                    await lock.acquire()
            finally:
                fresh_redis_server.resume()
            # The release runs as a task of this loop: give it its time before the loop ends.
            for _ in range(polls):
                if not await cache.client.aexecute("EXISTS", name):
                    return
                await asyncio.sleep(0.05)

        asyncio.run(scenario())
    assert cache.client.execute("EXISTS", name) == 0
