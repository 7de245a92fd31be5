"""The async contract: every a* method behaves exactly like its sync twin.

Django ships no async backend contract, so this one is derived from the sync behaviour: each
case runs once through the sync method and once through its a* twin, each time from the same
Redis state, and both runs must give the same return value (or the same exception type and
message), the same warnings and the same Redis contents afterwards (raw keys, raw stored
bytes, TTLs). The cases run under several cache configurations (key prefix, version, custom
key function, default timeout). The rest of the file covers what only async code meets:
several event loops in one process, asgiref's async_to_sync, cancellation, and uvloop. The
last section runs the same cases on a cluster and on a sentinel set.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from support.backend import NEAR_CACHE, is_redoxide, topology_cache
from support.servers import RedisServer

ASYNC_TWINS = {
    "aadd": "add",
    "aget": "get",
    "aset": "set",
    "atouch": "touch",
    "adelete": "delete",
    "aget_many": "get_many",
    "aset_many": "set_many",
    "adelete_many": "delete_many",
    "ahas_key": "has_key",
    "aincr": "incr",
    "adecr": "decr",
    "aget_or_set": "get_or_set",
    "aincr_version": "incr_version",
    "adecr_version": "decr_version",
    "aclear": "clear",
    "aclose": "close",
}

# TTLs of the two runs differ by how long each took from its writes to its snapshot: at most
# the longer run's duration (measured, not assumed: a loaded or emulated host takes longer),
# plus a millisecond of rounding either side.
TTL_ROUNDING_MS = 2


def custom_key(key: str, key_prefix: str, version: int) -> str:
    return f"CUSTOM-{key_prefix}-{version}-{key}"


class Unpicklable:
    def __getstate__(self) -> Any:
        raise pickle.PickleError("cannot pickle this")


def make_value() -> str:
    return "from-callable"


def make_none() -> None:
    return None


VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "prefix_version": {"KEY_PREFIX": "pfx", "VERSION": 3},
    "key_function": {"KEY_FUNCTION": custom_key, "KEY_PREFIX": "kf"},
    "timeout_none": {"TIMEOUT": None},
    "timeout_float": {"TIMEOUT": 42.5},
}


@dataclass(frozen=True)
class Case:
    """One call of a sync method (and of its a* twin), run from a prepared Redis state."""

    id: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # (key, value, set() kwargs) stored through the sync cache before the call.
    setup: tuple[tuple[Any, Any, dict[str, Any]], ...] = ()
    # Raw keys written to Redis directly (not through the cache).
    raw: tuple[tuple[str, bytes], ...] = ()


def case(
    id: str,
    method: str,
    *args: Any,
    setup: tuple[tuple[Any, Any, dict[str, Any]] | tuple[Any, Any], ...] = (),
    raw: tuple[tuple[str, bytes], ...] = (),
    **kwargs: Any,
) -> Case:
    full_setup = tuple((s[0], s[1], s[2] if len(s) == 3 else {}) for s in setup)
    return Case(id, method, args, kwargs, full_setup, raw)


K = ("k", "value")  # the usual pre-existing key
K_TTL = ("k", "value", {"timeout": 100})
N = ("n", 41)
N_TTL = ("n", 41, {"timeout": 100})
TEXT = ("t", "text")
NONE = ("none", None)
V5 = ("k", "value-v5", {"version": 5})
LONG_KEY = "a" * 251

CASES = [
    # get
    case("get_hit", "get", "k", setup=(K,)),
    case("get_miss", "get", "missing"),
    case("get_miss_default", "get", "missing", "fallback"),
    case("get_miss_default_kw", "get", "missing", default=0),
    case("get_stored_none_ignores_default", "get", "none", "fallback", setup=(NONE,)),
    case("get_int", "get", "n", setup=(N,)),
    case("get_negative_int", "get", "n", setup=(("n", -12),)),
    case("get_big_int", "get", "n", setup=(("n", 2**70),)),
    case("get_bool", "get", "b", setup=(("b", True),)),
    case("get_float", "get", "f", setup=(("f", 1.25),)),
    case("get_bytes", "get", "by", setup=(("by", b"\x00\xff\x80raw"),)),
    case("get_dict", "get", "d", setup=(("d", {"a": [1, 2], "b": (3, "x")}),)),
    case("get_large", "get", "big", setup=(("big", "x" * 300_000),)),
    case("get_unicode_key", "get", "clé-✓", setup=(("clé-✓", "ü"),)),
    case("get_other_version_misses", "get", "k", setup=(V5,)),
    case("get_version", "get", "k", version=5, setup=(V5, K)),
    case("get_key_warning_space", "get", "has space"),
    case("get_key_warning_length", "get", LONG_KEY),
    case("get_int_key", "get", 17, setup=((17, "int-key"),)),
    # set
    case("set_new", "set", "k", {"a": 1}),
    case("set_overwrite", "set", "k", "new", setup=(K,)),
    case("set_timeout_none", "set", "k", "v", timeout=None),
    case("set_timeout_none_clears_ttl", "set", "k", "v", timeout=None, setup=(K_TTL,)),
    case("set_timeout_zero", "set", "k", "v", timeout=0, setup=(K,)),
    case("set_timeout_negative", "set", "k", "v", timeout=-5, setup=(K,)),
    case("set_timeout_int", "set", "k", "v", timeout=30),
    case("set_timeout_float", "set", "k", "v", timeout=1.5),
    case("set_timeout_small_float", "set", "k", "v", timeout=0.25),
    case("set_timeout_positional", "set", "k", "v", 60),
    case("set_version", "set", "k", "v", version=7),
    case("set_int", "set", "n", 7),
    case("set_negative_int", "set", "n", -7),
    case("set_big_int", "set", "n", 2**70),
    case("set_bool", "set", "b", False),
    case("set_none", "set", "k", None),
    case("set_bytes", "set", "by", b"\x00\x01"),
    case("set_unpicklable_writes_nothing", "set", "k", Unpicklable(), setup=(K,)),
    case("set_key_warning", "set", "has space", 1),
    # add
    case("add_new", "add", "k", "v"),
    case("add_existing", "add", "k", "other", setup=(K,)),
    case("add_existing_other_version", "add", "k", "v1", setup=(V5,)),
    case("add_timeout_none", "add", "k", "v", timeout=None),
    case("add_timeout_zero_new", "add", "k", "v", timeout=0),
    case("add_timeout_zero_existing", "add", "k", "v", timeout=0, setup=(K,)),
    case("add_timeout_negative", "add", "k", "v", timeout=-1),
    case("add_timeout_float", "add", "k", "v", timeout=2.5),
    case("add_int", "add", "n", 5),
    case("add_version", "add", "k", "v", version=2, setup=(K,)),
    case("add_unpicklable_writes_nothing", "add", "k", Unpicklable()),
    # touch
    case("touch_existing", "touch", "k", 30, setup=(K,)),
    case("touch_default_timeout", "touch", "k", setup=(K_TTL,)),
    case("touch_timeout_none", "touch", "k", None, setup=(K_TTL,)),
    case("touch_timeout_zero", "touch", "k", 0, setup=(K,)),
    case("touch_timeout_negative", "touch", "k", timeout=-3, setup=(K,)),
    case("touch_timeout_float", "touch", "k", 3.5, setup=(K,)),
    case("touch_missing", "touch", "missing", 30),
    case("touch_version", "touch", "k", 30, version=5, setup=(V5, K_TTL)),
    # delete
    case("delete_existing", "delete", "k", setup=(K, N)),
    case("delete_missing", "delete", "missing", setup=(K,)),
    case("delete_version", "delete", "k", version=5, setup=(V5, K)),
    case("delete_key_warning", "delete", LONG_KEY),
    # get_many
    case("get_many_mixed", "get_many", ["k", "missing", "n", "none"], setup=(K, N, NONE)),
    case("get_many_empty", "get_many", []),
    case("get_many_all_missing", "get_many", ["x", "y"]),
    case("get_many_duplicates", "get_many", ["k", "k"], setup=(K,)),
    case("get_many_version", "get_many", ["k", "n"], version=5, setup=(V5, K, N)),
    case("get_many_key_warning", "get_many", ["has space", "k"], setup=(K,)),
    case("get_many_non_str_keys", "get_many", [17, "k", 2.5], setup=((17, 1), K, (2.5, "f"))),
    # set_many
    case("set_many_basic", "set_many", {"a": 1, "b": "two", "c": None}),
    case("set_many_overwrite", "set_many", {"k": "new", "n": 0}, setup=(K_TTL, N)),
    case("set_many_timeout_none", "set_many", {"a": 1, "b": 2}, timeout=None),
    case("set_many_timeout_zero", "set_many", {"k": 1, "b": 2}, timeout=0, setup=(K,)),
    case("set_many_timeout_negative", "set_many", {"k": 1}, timeout=-10, setup=(K,)),
    case("set_many_timeout_float", "set_many", {"a": 1, "b": 2}, timeout=1.5),
    case("set_many_timeout_positional", "set_many", {"a": 1}, 45),
    case("set_many_empty", "set_many", {}),
    case("set_many_version", "set_many", {"k": "v9"}, version=9, setup=(K,)),
    case("set_many_unpicklable_writes_nothing", "set_many", {"a": 1, "u": Unpicklable()}),
    case("set_many_key_warning", "set_many", {"has space": 1, "b": 2}),
    # delete_many
    case("delete_many_mixed", "delete_many", ["k", "missing", "n"], setup=(K, N, TEXT)),
    case("delete_many_empty", "delete_many", [], setup=(K,)),
    case("delete_many_version", "delete_many", ["k"], version=5, setup=(V5, K)),
    case("delete_many_duplicates", "delete_many", ["k", "k", "n"], setup=(K, N)),
    # has_key
    case("has_key_present", "has_key", "k", setup=(K,)),
    case("has_key_stored_none", "has_key", "none", setup=(NONE,)),
    case("has_key_missing", "has_key", "missing"),
    case("has_key_version", "has_key", "k", version=5, setup=(V5,)),
    case("has_key_other_version", "has_key", "k", setup=(V5,)),
    # incr / decr
    case("incr_default_delta", "incr", "n", setup=(N,)),
    case("incr_delta", "incr", "n", 10, setup=(N,)),
    case("incr_negative_delta", "incr", "n", -50, setup=(N,)),
    case("incr_zero_delta", "incr", "n", 0, setup=(N,)),
    case("incr_keeps_ttl", "incr", "n", 2, setup=(N_TTL,)),
    case("incr_keeps_no_ttl", "incr", "n", setup=(("n", 1, {"timeout": None}),)),
    case("incr_missing", "incr", "missing"),
    case("incr_missing_negative_delta", "incr", "missing", -1),
    case("incr_other_version_missing", "incr", "k", setup=(("k", 1, {"version": 5}),)),
    case("incr_version", "incr", "k", 1, version=5, setup=(("k", 1, {"version": 5}),)),
    case("incr_text_value", "incr", "t", setup=(TEXT,)),
    case("incr_none_value", "incr", "none", setup=(NONE,)),
    case("incr_float_value", "incr", "f", 2, setup=(("f", 1.5, {"timeout": 100}),)),
    case("incr_float_delta", "incr", "n", 0.5, setup=(N,)),
    case("incr_big_int", "incr", "n", setup=(("n", 2**70),)),
    case("incr_overflow", "incr", "n", setup=(("n", 2**63 - 1),)),
    case("incr_bool_value", "incr", "b", setup=(("b", True),)),
    case("decr_below_int64", "decr", "n", 10, setup=(("n", -(2**63) + 5),)),
    case("decr_default_delta", "decr", "n", setup=(N,)),
    case("decr_delta", "decr", "n", 50, setup=(N,)),
    case("decr_negative_delta", "decr", "n", -9, setup=(N,)),
    case("decr_keeps_ttl", "decr", "n", setup=(N_TTL,)),
    case("decr_missing", "decr", "missing"),
    case("decr_text_value", "decr", "t", setup=(TEXT,)),
    # get_or_set
    case("get_or_set_missing", "get_or_set", "k", "dflt"),
    case("get_or_set_present", "get_or_set", "k", "dflt", setup=(K,)),
    case("get_or_set_callable", "get_or_set", "k", make_value),
    case("get_or_set_callable_present", "get_or_set", "k", make_value, setup=(K,)),
    case("get_or_set_none", "get_or_set", "k", None),
    case("get_or_set_callable_none", "get_or_set", "k", make_none),
    case("get_or_set_stored_none", "get_or_set", "none", "dflt", setup=(NONE,)),
    case("get_or_set_int", "get_or_set", "n", 5),
    case("get_or_set_timeout_none", "get_or_set", "k", "v", timeout=None),
    case("get_or_set_timeout_zero", "get_or_set", "k", "v", timeout=0),
    case("get_or_set_timeout_negative", "get_or_set", "k", "v", timeout=-2),
    case("get_or_set_timeout_float", "get_or_set", "k", "v", timeout=7.5),
    case("get_or_set_version", "get_or_set", "k", "v2", version=2, setup=(K,)),
    case("get_or_set_missing_default_arg", "get_or_set", "k"),
    # incr_version / decr_version
    case("incr_version_existing", "incr_version", "k", setup=(K,)),
    case("incr_version_delta", "incr_version", "k", 3, setup=(K,)),
    case("incr_version_explicit", "incr_version", "k", version=5, setup=(V5,)),
    case("incr_version_int_value", "incr_version", "n", setup=(N,)),
    case("incr_version_overwrites_target", "incr_version", "k", setup=(K, V5)),
    case("incr_version_missing", "incr_version", "missing"),
    case("decr_version_existing", "decr_version", "k", version=5, setup=(V5,)),
    case("decr_version_delta", "decr_version", "k", 2, version=5, setup=(V5,)),
    case("decr_version_missing", "decr_version", "missing"),
    # clear / close
    case("clear", "clear", setup=(K, N, V5), raw=(("foreign", b"x"),)),
    case("clear_empty", "clear"),
    case("close", "close", setup=(K,)),
]


@dataclass
class Outcome:
    """What one call did: its result or error, its warnings, and Redis afterwards."""

    result: tuple[Any, ...]
    warnings: list[tuple[type[Warning], str]]
    state: dict[bytes, tuple[bytes | None, int]]
    #: From before the run's first write to after its snapshot.
    elapsed_ms: float = 0.0


def _near_marker(key: bytes) -> bool:
    """Whether a server key is a near cache's database marker: ``KEY_PREFIX:redoxide:near-*``
    (the cache's key function with the version "redoxide"), or ``redoxide:near:*``."""
    return key.startswith(b"redoxide:near:") or b":redoxide:near-" in key


def snapshot(client: Any) -> dict[bytes, tuple[bytes | None, int]]:
    """Return every key in Redis db 0 with its raw value and its PTTL in ms (-1: none); a
    near cache's database markers (REDOXIDE_TEST_NEAR_CACHE) are not the cache's data."""
    keys = [k for k in client.keys("*") if not _near_marker(k)]
    return {key: (client.get(key), client.pttl(key)) for key in keys}


def prepare(cache: Any, client: Any, c: Case) -> None:
    client.flushall()
    if NEAR_CACHE:
        # A near cache hears another client's FLUSHALL when its invalidation arrives (within
        # MAX_STALE_MS), not when flushall() returns; a cache kept over several cases (the
        # topology pair) could still serve the last case's value. Its own clear() drops
        # everything it keeps before it returns.
        cache.clear()
    for key, value in c.raw:
        client.set(key, value)
    for key, value, kwargs in c.setup:
        cache.set(key, value, **kwargs)


def capture(call: Callable[[], Any], rename: tuple[str, str] | None = None) -> tuple[Any, ...]:
    try:
        return ("returned", call())
    except Exception as exc:
        message = str(exc)
        if rename:  # "aget_or_set() missing ... argument" names the async method
            message = message.replace(f"{rename[0]}(", f"{rename[1]}(")
        return ("raised", type(exc), message)


def run_sync(cache: Any, client: Any, c: Case) -> Outcome:
    started = time.monotonic()
    prepare(cache, client, c)
    method = getattr(cache, c.method)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = capture(lambda: method(*c.args, **c.kwargs))
    state = snapshot(client)
    elapsed = (time.monotonic() - started) * 1000
    return Outcome(result, [(w.category, str(w.message)) for w in caught], state, elapsed)


def run_async(cache: Any, client: Any, c: Case) -> Outcome:
    started = time.monotonic()
    prepare(cache, client, c)
    amethod = getattr(cache, f"a{c.method}")

    async def call() -> Any:
        return await amethod(*c.args, **c.kwargs)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = capture(lambda: asyncio.run(call()), rename=(f"a{c.method}", c.method))
    state = snapshot(client)
    elapsed = (time.monotonic() - started) * 1000
    return Outcome(result, [(w.category, str(w.message)) for w in caught], state, elapsed)


def assert_same_state(
    sync_state: dict[bytes, tuple[bytes | None, int]],
    async_state: dict[bytes, tuple[bytes | None, int]],
    slack_ms: float,
) -> None:
    assert sorted(async_state) == sorted(sync_state), "different keys in Redis"
    for key, (sync_value, sync_ttl) in sync_state.items():
        async_value, async_ttl = async_state[key]
        assert async_value == sync_value, f"different raw value stored at {key!r}"
        if sync_ttl < 0 or async_ttl < 0:
            assert async_ttl == sync_ttl, f"different TTL at {key!r}"
        else:
            assert abs(async_ttl - sync_ttl) <= slack_ms + TTL_ROUNDING_MS, (
                f"different TTL at {key!r}: async {async_ttl} ms, sync {sync_ttl} ms"
            )


@pytest.fixture(params=list(VARIANTS), ids=list(VARIANTS))
def variant_cache(request: pytest.FixtureRequest, make_cache: Callable[..., Any]) -> Any:
    return make_cache(**VARIANTS[request.param])


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_async_twin_matches_sync(variant_cache: Any, redis_client: Any, c: Case) -> None:
    sync = run_sync(variant_cache, redis_client, c)
    asynchronous = run_async(variant_cache, redis_client, c)
    assert asynchronous.result == sync.result
    assert asynchronous.warnings == sync.warnings
    assert_same_state(sync.state, asynchronous.state, max(sync.elapsed_ms, asynchronous.elapsed_ms))


def test_cases_cover_every_async_method() -> None:
    assert {f"a{c.method}" for c in CASES} == set(ASYNC_TWINS)


@pytest.mark.parametrize("amethod", list(ASYNC_TWINS))
def test_async_method_is_a_coroutine_function(cache: Any, amethod: str) -> None:
    assert inspect.iscoroutinefunction(getattr(cache, amethod))
    sync_params = inspect.signature(getattr(cache, ASYNC_TWINS[amethod])).parameters
    async_params = inspect.signature(getattr(cache, amethod)).parameters
    assert list(async_params) == list(sync_params)
    for name, param in sync_params.items():
        assert async_params[name].default == param.default, name
        assert async_params[name].kind == param.kind, name


def test_async_twins_do_not_call_sync_methods(cache: Any) -> None:
    """Native async: no a* method falls back to its sync twin (sync_to_async)."""
    if not is_redoxide():
        pytest.skip("Django's BaseCache runs several a* methods through sync_to_async")

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an async method called a sync cache method")

    for name in ASYNC_TWINS.values():
        setattr(cache, name, forbidden)

    async def main() -> None:
        assert await cache.aset("k", "v") is None
        assert await cache.aget("k") == "v"
        assert await cache.aadd("n", 1) is True
        assert await cache.aincr("n", 4) == 5
        assert await cache.adecr("n") == 4
        assert await cache.atouch("k", 30) is True
        assert await cache.ahas_key("k") is True
        assert await cache.aset_many({"a": 1, "b": 2}) == []
        assert await cache.aget_many(["a", "b", "c"]) == {"a": 1, "b": 2}
        await cache.adelete_many(["a", "b"])
        assert await cache.aget_or_set("g", "x") == "x"
        assert await cache.aincr_version("g") == 2
        assert await cache.adecr_version("g", version=2) == 1
        assert await cache.adelete("k") is True
        await cache.aclear()
        await cache.aclose()

    try:
        asyncio.run(main())
    finally:
        for name in ASYNC_TWINS.values():
            delattr(cache, name)


# -- several event loops ----------------------------------------------------------------------


async def roundtrip(cache: Any, prefix: str, count: int) -> None:
    """Write count keys concurrently, then read them back concurrently and check each."""
    await asyncio.gather(*(cache.aset(f"{prefix}:{i}", (prefix, i)) for i in range(count)))
    values = await asyncio.gather(*(cache.aget(f"{prefix}:{i}") for i in range(count)))
    assert values == [(prefix, i) for i in range(count)]
    assert await cache.aget_many([f"{prefix}:{i}" for i in range(count)]) == {
        f"{prefix}:{i}": (prefix, i) for i in range(count)
    }


def test_sequential_event_loops_share_one_cache(cache: Any) -> None:
    for loop_number in range(20):
        asyncio.run(roundtrip(cache, f"loop{loop_number}", 25))
    assert cache.get("loop0:0") == ("loop0", 0)


def test_fresh_cache_instance_per_loop(make_cache: Callable[..., Any]) -> None:
    for loop_number in range(5):
        asyncio.run(roundtrip(make_cache(), f"loop{loop_number}", 10))


def test_loops_in_two_threads_at_once_beside_sync_traffic(cache: Any) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def in_thread(prefix: str) -> None:
        try:
            start.wait()
            for round_number in range(5):
                asyncio.run(roundtrip(cache, f"{prefix}{round_number}", 100))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=in_thread, args=(name,)) for name in ("t1-", "t2-")]
    for thread in threads:
        thread.start()
    start.wait()
    for i in range(300):  # sync traffic from the main thread meanwhile
        cache.set(f"sync:{i}", i)
        assert cache.get(f"sync:{i}") == i
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert cache.get_many(["t1-4:99", "t2-4:99"]) == {
        "t1-4:99": ("t1-4", 99),
        "t2-4:99": ("t2-4", 99),
    }


def test_async_to_sync_from_sync_code(cache: Any) -> None:
    async_to_sync(cache.aset)("k", {"v": 1}, timeout=None)
    assert async_to_sync(cache.aget)("k") == {"v": 1}
    cache.set("n", 1)
    assert async_to_sync(cache.aincr)("n", 5) == 6
    assert cache.get("k") == {"v": 1}

    async def both() -> tuple[Any, Any]:
        return await cache.aget("k"), await cache.aget_many(["k", "n"])

    assert async_to_sync(both)() == ({"v": 1}, {"k": {"v": 1}, "n": 6})


def test_async_to_sync_inside_sync_to_async_uses_the_outer_loop(cache: Any) -> None:
    """Django's pattern: async view -> sync code -> async_to_sync(cache.aget) on the main loop."""

    def sync_code() -> Any:
        async_to_sync(cache.aset)("k", "inner")
        return async_to_sync(cache.aget)("k")

    async def main() -> tuple[Any, Any]:
        inner = await sync_to_async(sync_code)()
        return inner, await cache.aget("k")

    assert asyncio.run(main()) == ("inner", "inner")


def test_loop_closed_with_requests_in_flight(cache: Any) -> None:
    cache.set_many({f"k{i}": i for i in range(50)})

    async def abandon() -> list[asyncio.Task[Any]]:
        # asyncio.run cancels these unfinished tasks when main() returns.
        tasks = [asyncio.ensure_future(cache.aget(f"k{i}")) for i in range(50)]
        await asyncio.sleep(0)
        return tasks

    asyncio.run(abandon())
    asyncio.run(roundtrip(cache, "after", 50))
    assert asyncio.run(cache.aget("k7")) == 7


def test_uvloop(cache: Any) -> None:
    uvloop = pytest.importorskip("uvloop")
    cache.set_many({f"u{i}": i for i in range(100)}, timeout=None)

    async def with_cancellations() -> None:
        tasks = [asyncio.ensure_future(cache.aget(f"u{i}")) for i in range(100)]
        await asyncio.sleep(0)
        for task in tasks[::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i, result in enumerate(results):
            assert result == i or type(result) is asyncio.CancelledError, (i, result)
        await roundtrip(cache, "uv", 100)

    for _ in range(3):
        loop = uvloop.new_event_loop()
        try:
            loop.run_until_complete(with_cancellations())
        finally:
            loop.close()
    asyncio.run(roundtrip(cache, "after-uv", 10))


# -- cancellation -----------------------------------------------------------------------------

# asyncio.TimeoutError is the builtin TimeoutError only from Python 3.11 on.
CANCELLATIONS = (asyncio.CancelledError, asyncio.TimeoutError, TimeoutError)


def test_cancelled_agets_do_not_desynchronise(cache: Any, redis_server: RedisServer) -> None:
    rng = random.Random(1234)
    keys = [f"c{i}" for i in range(200)]
    cache.set_many({key: f"value-of-{key}" for key in keys}, timeout=None)
    connections_before = redis_server.client_count()

    async def read(i: int, key: str) -> Any:
        if i % 4 == 0:  # a multi-key request cancelled half way must not desync either
            return (await cache.aget_many([key, "never-set"])).get(key)
        return await cache.aget(key)

    async def cancel_storm() -> int:
        cancelled = 0
        loop = asyncio.get_running_loop()
        for _ in range(10):
            tasks: list[Any] = []
            for i, key in enumerate(keys):
                how = rng.random()
                if how < 0.33:
                    tasks.append(asyncio.wait_for(read(i, key), timeout=rng.uniform(0, 5e-4)))
                elif how < 0.66:
                    task = asyncio.ensure_future(read(i, key))
                    loop.call_later(rng.uniform(0, 5e-4), task.cancel)
                    tasks.append(task)
                else:
                    tasks.append(read(i, key))
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for key, result in zip(keys, results, strict=True):
                if isinstance(result, BaseException):
                    # Exactly these: a backend error that subclasses TimeoutError is a failure.
                    assert type(result) in CANCELLATIONS, repr(result)
                    cancelled += 1
                else:
                    assert result == f"value-of-{key}"
        # Cancel a task that is parked on a reply, then read straight after it.
        for key in keys[:50]:
            task = asyncio.ensure_future(cache.aget(key))
            await asyncio.sleep(0)
            task.cancel()
            assert await cache.aget(keys[-1]) == f"value-of-{keys[-1]}"
        return cancelled

    async def follow_up() -> None:
        for i in range(1000):  # serial follow-ups: every reply must match its own request
            assert await cache.aset(f"f{i}", i) is None
            assert await cache.aget(f"f{i}") == i
        values = await asyncio.gather(*(cache.aget(key) for key in keys))
        assert values == [f"value-of-{key}" for key in keys]
        assert asyncio.all_tasks() == {asyncio.current_task()}

    cancelled = asyncio.run(cancel_storm())
    assert cancelled > 0, "the storm cancelled nothing; the test proves nothing"
    asyncio.run(follow_up())
    assert cache.get("f999") == 999
    # Cancelled requests must not leave extra connections behind.
    assert redis_server.client_count() <= max(connections_before, 1) + 1


def test_cancelled_aset_leaves_old_or_new_value(cache: Any) -> None:
    async def main() -> None:
        for i in range(200):
            cache_value = f"v{i}"
            task = asyncio.ensure_future(cache.aset("k", cache_value))
            for _ in range(i % 3):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert await cache.aget("n-missing") is None
            await cache.aset("k", "settled")
            assert await cache.aget("k") == "settled"

    asyncio.run(main())


def test_concurrent_mixed_operations_each_get_their_own_reply(cache: Any) -> None:
    """Many kinds of request in flight at once on one loop: no reply reaches the wrong caller."""
    count = 100
    cache.set_many({f"n{i}": i for i in range(count)}, timeout=None)
    cache.set_many({f"d{i}": i for i in range(count)})

    async def worker(i: int) -> None:
        assert await cache.aset(f"s{i}", {"i": i}) is None
        assert await cache.aincr(f"n{i}", i) == 2 * i
        assert await cache.aadd(f"n{i}", "taken") is False
        assert await cache.aget_many([f"s{i}", f"n{i}", "absent"]) == {
            f"s{i}": {"i": i},
            f"n{i}": 2 * i,
        }
        assert await cache.adelete(f"d{i}") is True
        assert await cache.ahas_key(f"d{i}") is False
        assert await cache.aget_or_set(f"g{i}", lambda: [i]) == [i]
        assert await cache.atouch(f"s{i}", 60) is True

    async def main() -> None:
        await asyncio.gather(*(worker(i) for i in range(count)))

    asyncio.run(main())
    assert cache.get_many([f"g{count - 1}", f"n{count - 1}"]) == {
        f"g{count - 1}": [count - 1],
        f"n{count - 1}": 2 * (count - 1),
    }


def test_cache_is_usable_after_aclose(cache: Any) -> None:
    async def main() -> Any:
        await cache.aset("k", 1)
        await cache.aclose()
        assert await cache.aget("k") == 1
        await cache.aclose()
        return await cache.aincr("k")

    assert asyncio.run(main()) == 2
    cache.close()
    assert asyncio.run(cache.aget("k")) == 2


# -- the async contract on each topology -------------------------------------------------------


@pytest.fixture(scope="module", params=["cluster", "sentinel"])
def topology_pair(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """A cache on a topology and a redis-py client that sees all of its keys."""
    import redis
    from redis.cluster import RedisCluster

    cache = topology_cache(request.param, request)
    if request.param == "cluster":
        running = request.getfixturevalue("cluster")
        raw: Any = RedisCluster(host="127.0.0.1", port=running.nodes[0].port)
    else:
        running = request.getfixturevalue("sentinel_set")
        raw = redis.Redis(host="127.0.0.1", port=running.current_primary_port())
    yield cache, raw
    raw.close()


@pytest.mark.skipif(not is_redoxide(), reason="redoxide topologies")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_async_twin_matches_sync_on_topologies(topology_pair: tuple[Any, Any], c: Any) -> None:
    cache, raw = topology_pair
    sync = run_sync(cache, raw, c)
    asynchronous = run_async(cache, raw, c)
    assert asynchronous.result == sync.result
    assert asynchronous.warnings == sync.warnings
    assert_same_state(sync.state, asynchronous.state, max(sync.elapsed_ms, asynchronous.elapsed_ms))
