"""Benchmark redoxide beside the Django cache backends people run today.

One program, one throwaway redis-server, every target measured in the same run:

    .venv/bin/python benchmarks/bench.py            # idle regime
    .venv/bin/python benchmarks/bench.py --busy     # busy regime (/dev/cpu_dma_latency held at 0)
    .venv/bin/python benchmarks/bench.py --both     # idle then busy, one server (`make bench`)
    .venv/bin/python benchmarks/bench.py --quick    # a short smoke run

The workload is the one the field publishes: seven phases (get hits, get misses, set, 10-key
get_many, 10-key set_many, incr, delete) of 1,000 calls each, a ~150-byte pickled dict as
the value, in three modes (sync, async serial, async with 50 in flight), in that order.
Targets are interleaved round by round after a warm-up round (five with 50 in flight: warm,
as in a running process), and the median of the timed runs is reported, with client CPU per
call, server connections per target, and the `redis-benchmark -P 1` ceilings measured
against the same server. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import importlib
import importlib.metadata
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import result_files
from servers import RedisServer, redis_benchmark, redis_benchmark_version, redis_server_version

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# ~150 bytes once pickled (protocol 5): a small user-like record.
VALUE: dict[str, Any] = {
    "id": 12345,
    "username": "user12345",
    "email": "user12345@example.com",
    "is_active": True,
    "score": 3.5,
    "groups": ["staff"],
    "joined": "2026-11-30",
}
PICKLED_VALUE = pickle.dumps(VALUE, pickle.HIGHEST_PROTOCOL)
BATCH = 10  # keys per get_many / set_many call

PHASES = ("get", "get-miss", "set", "mget", "mset", "incr", "delete")
MODES = ("sync", "async-serial", "async-concurrent")
MODE_ALIASES = {"serial": "async-serial", "concurrent": "async-concurrent"}
# Which redis-benchmark figure bounds each phase and mode.
PHASE_CEILING = {
    "get": "get",
    "get-miss": "get",
    "mget": "get",
    "set": "set",
    "mset": "set",
    "incr": "set",
    "delete": "set",
}
MODE_CEILING = {"sync": "c1", "async-serial": "c1", "async-concurrent": "c50"}
PACKAGES = (
    "redoxide",
    "django",
    "asgiref",
    "redis",
    "hiredis",
    "django-redis",
    "django-valkey",
    "valkey",
    "libvalkey",
)


@dataclass(frozen=True)
class Target:
    """A cache backend under test."""

    name: str
    backend: str
    sync_api: bool
    # "native": a* methods await the client directly; "sync_to_async": Django's BaseCache
    # defaults (a thread hop per call); "none": the backend has no a* methods.
    async_api: str
    # Its stored format is its own (a wire prefix): its keys are prepared through it.
    own_format: bool = False
    # OPTIONS of its cache, as (name, value) pairs.
    options: tuple[tuple[str, Any], ...] = ()
    # Run unless --targets names others; the rest run only when named.
    default: bool = True

    def supports(self, mode: str) -> bool:
        return self.sync_api if mode == "sync" else self.async_api != "none"


TARGETS = (
    Target("redoxide", "redoxide.RedisCache", sync_api=True, async_api="native"),
    Target(
        "django",
        "django.core.cache.backends.redis.RedisCache",
        sync_api=True,
        async_api="sync_to_async",
    ),
    Target(
        "django-redis", "django_redis.cache.RedisCache", sync_api=True, async_api="sync_to_async"
    ),
    # django-valkey's sync backend has no a* methods at all; its async backend has only
    # coroutine methods (get, aget, ... are all async).
    Target("valkey", "django_valkey.cache.ValkeyCache", sync_api=True, async_api="none"),
    Target(
        "valkey-async",
        "django_valkey.async_cache.cache.AsyncValkeyCache",
        sync_api=False,
        async_api="native",
    ),
    # Rust-cored and multiplexed; needs Python >= 3.12 (skipped with a note where it does not
    # import). Its defaults: msgpack with its own wire prefix, so it reads only what it wrote.
    Target(
        "vcache",
        "django_vcache.backend.ValkeyCache",
        sync_api=True,
        async_api="native",
        own_format=True,
    ),
    # Opt-in: redoxide storing MessagePack, the format family of vcache's default, for the
    # like-for-like comparison (its values are unreadable by Django's backend and django-redis).
    Target(
        "redoxide-msgpack",
        "redoxide.RedisCache",
        sync_api=True,
        async_api="native",
        own_format=True,
        options=(("SERIALIZER", "redoxide.serializers.MsgPackSerializer"),),
        default=False,
    ),
)
TARGET_NAMES = tuple(t.name for t in TARGETS)
DEFAULT_TARGETS = tuple(t.name for t in TARGETS if t.default)


@dataclass
class Config:
    """What to run, from the command line."""

    regime: str
    quick: bool
    runs: int
    warmup: int
    # Warm-up rounds of the 50-in-flight mode: a running process's clients are warm, and
    # django-vcache's rate with many calls in flight rises over its first thousands of calls.
    inflight_warmup: int
    ops: int
    s2a_ops: int
    concurrency: int
    targets: tuple[str, ...]
    modes: tuple[str, ...]
    phases: tuple[str, ...]
    c1_requests: int
    c50_requests: int
    save: bool

    def warmup_of(self, mode: str) -> int:
        """Untimed warm-up rounds before mode's timed ones."""
        return self.inflight_warmup if mode == "async-concurrent" else self.warmup

    def ops_for(self, target: Target, mode: str) -> int:
        """Return the calls per phase (fewer for sync_to_async peers in async modes)."""
        if mode != "sync" and target.async_api == "sync_to_async":
            return self.s2a_ops
        return self.ops


@dataclass
class Stats:
    """Timed runs of one phase of one target in one mode."""

    ops: int
    ops_s: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "median_ops_s": harness.median(self.ops_s),
            "median_cpu_us_per_op": harness.median(self.cpu_us),
            "runs_ops_s": [round(x, 1) for x in self.ops_s],
            "runs_cpu_us_per_op": [round(x, 2) for x in self.cpu_us],
        }


# --- workload -------------------------------------------------------------------------


def phase_calls(phase: str, n: int) -> tuple[str, list[tuple[Any, ...]]]:
    """Return (sync method name, argument tuples) for n calls of a phase."""
    hits = [f"k{i}" for i in range(n)]
    if phase == "get":
        return "get", [(k,) for k in hits]
    if phase == "get-miss":
        return "get", [(f"miss{i}",) for i in range(n)]
    if phase == "set":
        return "set", [(k, VALUE) for k in hits]
    if phase == "mget":
        return "get_many", [([hits[(BATCH * j + x) % n] for x in range(BATCH)],) for j in range(n)]
    if phase == "mset":
        return "set_many", [
            ({f"m{(BATCH * j + x) % n}": VALUE for x in range(BATCH)},) for j in range(n)
        ]
    if phase == "incr":
        return "incr", [("ctr",)] * n
    if phase == "delete":
        return "delete", [(k,) for k in hits]
    raise ValueError(phase)


# --- server-side observation ------------------------------------------------------------


class Observer:
    """A raw redis-py connection used to prepare keys and to count server connections.

    Connections that appear while a target runs are attributed to that target (targets
    run one at a time); ones that appear otherwise (redis-benchmark) are attributed to
    nobody.
    """

    def __init__(self, url: str) -> None:
        import redis

        self.raw = redis.Redis.from_url(url)
        self.own_id = int(self.raw.client_id())
        self.seen: set[int] = set()
        self.owned: dict[str, set[int]] = {}
        self.absorb()

    def live_ids(self) -> set[int]:
        return {int(c["id"]) for c in self.raw.client_list()} - {self.own_id}

    def absorb(self) -> None:
        """Mark every connection open now as belonging to no target."""
        self.seen |= self.live_ids()

    def sample(self, target: str) -> tuple[int, int]:
        """Attribute new connections to target; return (its live count, its new count)."""
        ids = self.live_ids()
        new = ids - self.seen
        self.seen |= new
        owned = self.owned.setdefault(target, set())
        owned |= new
        return len(owned & ids), len(new)

    def received(self) -> int:
        return int(self.raw.info("stats")["total_connections_received"])

    def prepare(self, prefix: str, n: int, through: Any = None) -> None:
        """Store n hit keys and a zeroed counter in the Django/django-redis format (or with
        the cache `through`, for a backend with a format of its own)."""
        if through is not None:
            through.set_many({f"k{i}": VALUE for i in range(n)})
            through.set("ctr", 0)
            return
        pipe = self.raw.pipeline(transaction=False)
        pipe.mset({f"{prefix}:1:k{i}": PICKLED_VALUE for i in range(n)})
        pipe.set(f"{prefix}:1:ctr", 0)  # ints are stored as raw digits
        pipe.execute()


@dataclass
class ConnStats:
    max_live: int = 0
    opened: int = 0
    accepted: int = 0  # total_connections_received delta: catches open/close churn

    def as_json(self) -> dict[str, int]:
        return {"max_live": self.max_live, "opened": self.opened, "accepted": self.accepted}


# --- the run ----------------------------------------------------------------------------


class Bench:
    """One regime's run: every selected mode, target and phase, against one server."""

    def __init__(self, config: Config, url: str, port: int) -> None:
        self.config = config
        self.url = url
        self.port = port
        self.observer = Observer(url)
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.caches: dict[str, Any] = {}
        self.targets: list[Target] = []
        self.results: dict[str, dict[str, dict[str, Stats]]] = {}
        self.conns: dict[str, dict[str, ConnStats]] = {}
        self.errors: dict[str, dict[str, str]] = {}
        self.ceiling_runs: dict[str, dict[str, list[float]]] = {
            "c1": {"get": [], "set": []},
            "c50": {"get": [], "set": []},
        }
        self.parsers: dict[str, str] = {}
        self.mode_seconds: dict[str, float] = {}
        self._calls: dict[tuple[str, int], tuple[str, list[tuple[Any, ...]]]] = {}

    # setup

    def load_targets(self) -> None:
        """Configure Django with one cache alias per target and build the instances."""

        wanted = [t for t in TARGETS if t.name in self.config.targets]
        caches_setting: dict[str, dict[str, Any]] = {
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
        }
        for target in wanted:
            location = self.url
            if target.name == "valkey-async":
                # django-valkey keeps one process-wide pool per LOCATION string, shared by its
                # sync and async backends (base_pool.py `_pools`): the same URL would hand the
                # async backend the sync backend's pool. A valkey:// URL keeps them apart.
                location = self.url.replace("redis://", "valkey://", 1)
            caches_setting[target.name] = {
                "BACKEND": target.backend,
                "LOCATION": location,
                "KEY_PREFIX": f"bench-{target.name}",
                "TIMEOUT": 300,
            }
            if target.options:
                caches_setting[target.name]["OPTIONS"] = dict(target.options)
        # Some backends read settings at import time: configure first, import after.
        harness.setup_django(CACHES=caches_setting, USE_TZ=True)
        from django.core.cache import caches

        for target in wanted:
            module = target.backend.rsplit(".", 1)[0]
            try:
                importlib.import_module(module)
            except Exception as exc:
                self.skipped[target.name] = f"import {module} failed: {exc!r}"
                continue
            try:
                self.caches[target.name] = caches.create_connection(target.name)
            except Exception as exc:
                self.skipped[target.name] = f"configuring {target.backend} failed: {exc!r}"
                continue
            self.targets.append(target)
            self.parsers[target.name] = parser_of(target, self.caches[target.name])
            self.observer.sample(target.name)

    def calls(self, phase: str, n: int) -> tuple[str, list[tuple[Any, ...]]]:
        key = (phase, n)
        if key not in self._calls:
            self._calls[key] = phase_calls(phase, n)
        return self._calls[key]

    def ceilings(self) -> None:
        """Sample redis-benchmark -c 1 and -c 50 against the server."""
        for label, clients, requests in (
            ("c1", 1, self.config.c1_requests),
            ("c50", 50, self.config.c50_requests),
        ):
            rates = redis_benchmark(self.port, clients, requests, len(PICKLED_VALUE))
            for cmd, rate in rates.items():
                self.ceiling_runs[label][cmd].append(rate)
        self.observer.absorb()

    # checks (untimed): the stored format must be the one the observer prepares

    def check_sync(self, cache: Any, prefix: str, own: bool = False) -> str | None:
        self.observer.prepare(prefix, BATCH, cache if own else None)
        if cache.get("k0") != VALUE:
            return "get of a prepared key did not return the value"
        if len(cache.get_many([f"k{i}" for i in range(BATCH)])) != BATCH:
            return "get_many did not return every prepared key"
        if cache.incr("ctr") != 1:
            return "incr of a prepared counter did not return 1"
        return None

    async def check_async(self, cache: Any, prefix: str, own: bool = False) -> str | None:
        self.observer.prepare(prefix, BATCH, cache if own else None)
        if await cache.aget("k0") != VALUE:
            return "aget of a prepared key did not return the value"
        if len(await cache.aget_many([f"k{i}" for i in range(BATCH)])) != BATCH:
            return "aget_many did not return every prepared key"
        if await cache.aincr("ctr") != 1:
            return "aincr of a prepared counter did not return 1"
        return None

    # one target, one run, every phase

    def begin_target_run(self, target: Target, mode: str) -> tuple[int, int]:
        n = self.config.ops_for(target, mode)
        own = self.caches[target.name] if target.own_format else None
        self.observer.prepare(f"bench-{target.name}", n, own)
        gc.collect()
        return n, self.observer.received()

    def track(self, target: Target, mode: str) -> None:
        """Sample the server's connections and update the target's counts for mode."""
        live, new = self.observer.sample(target.name)
        conn = self.conns.setdefault(mode, {}).setdefault(target.name, ConnStats())
        conn.max_live = max(conn.max_live, live)
        conn.opened += new

    def record(
        self, target: Target, mode: str, phase: str, n: int, t: float, cpu: float, timed: bool
    ) -> None:
        self.track(target, mode)
        if timed:
            stats = self.results.setdefault(mode, {}).setdefault(target.name, {})
            stats.setdefault(phase, Stats(ops=n))
            stats[phase].ops_s.append(n / t)
            stats[phase].cpu_us.append(cpu / n * 1e6)

    def end_target_run(self, target: Target, mode: str, received0: int) -> None:
        conn = self.conns[mode][target.name]
        conn.accepted += self.observer.received() - received0

    def run_sync_target(self, target: Target, timed: bool) -> None:
        cache = self.caches[target.name]
        n, received0 = self.begin_target_run(target, "sync")
        for phase in self.config.phases:
            method, calls = self.calls(phase, n)
            fn = getattr(cache, method)
            wall, cpu = harness.timed(harness.run_sync, fn, calls)
            self.record(target, "sync", phase, n, wall, cpu, timed)
        self.end_target_run(target, "sync", received0)

    async def run_async_target(self, target: Target, mode: str, timed: bool) -> None:
        cache = self.caches[target.name]
        n, received0 = self.begin_target_run(target, mode)
        width = self.config.concurrency
        for phase in self.config.phases:
            method, calls = self.calls(phase, n)
            fn = getattr(cache, "a" + method)
            if mode == "async-serial":
                wall, cpu = await harness.timed_async(harness.run_serial, fn, calls)
            else:
                wall, cpu = await harness.timed_async(harness.run_concurrent, fn, calls, width)
            self.record(target, mode, phase, n, wall, cpu, timed)
        self.end_target_run(target, mode, received0)

    # modes: warm-up round(s), then timed rounds, targets interleaved within each round

    def mode_targets(self, mode: str) -> list[Target]:
        return [t for t in self.targets if t.supports(mode)]

    def fail(self, target: Target, mode: str, exc: BaseException) -> None:
        self.errors.setdefault(mode, {})[target.name] = repr(exc)
        print(f"  ! {target.name} failed in {mode}: {exc!r}; dropped from this mode", flush=True)

    def run_sync_mode(self) -> None:
        active = []
        for target in self.mode_targets("sync"):
            received0 = self.observer.received()
            try:
                cache = self.caches[target.name]
                problem = self.check_sync(cache, f"bench-{target.name}", target.own_format)
            except Exception as exc:
                problem = repr(exc)
            self.track(target, "sync")
            self.end_target_run(target, "sync", received0)
            if problem:
                self.fail(target, "sync", RuntimeError(problem))
            else:
                active.append(target)
        rounds = self.config.warmup + self.config.runs
        for r in range(rounds):
            for target in list(active):
                try:
                    self.run_sync_target(target, timed=r >= self.config.warmup)
                except Exception as exc:
                    self.fail(target, "sync", exc)
                    active.remove(target)
            progress("sync", r, self.config.warmup, rounds)

    async def run_async_mode(self, mode: str) -> None:
        active = []
        for target in self.mode_targets(mode):
            received0 = self.observer.received()
            try:
                cache = self.caches[target.name]
                problem = await self.check_async(cache, f"bench-{target.name}", target.own_format)
            except Exception as exc:
                problem = repr(exc)
            self.track(target, mode)
            self.end_target_run(target, mode, received0)
            if problem:
                self.fail(target, mode, RuntimeError(problem))
            else:
                active.append(target)
        warmup = self.config.warmup_of(mode)
        rounds = warmup + self.config.runs
        for r in range(rounds):
            for target in list(active):
                try:
                    await self.run_async_target(target, mode, timed=r >= warmup)
                except Exception as exc:
                    self.fail(target, mode, exc)
                    active.remove(target)
            progress(mode, r, warmup, rounds)

    def run(self) -> None:
        self.load_targets()
        for name, reason in self.skipped.items():
            print(f"  - skipping {name}: {reason}", flush=True)
        for mode in self.config.modes:
            for target in self.targets:
                if not target.supports(mode):
                    self.notes.append(f"{target.name}: n/a in {mode} (no {api_word(mode)} API)")
        slow = [
            t.name
            for t in self.targets
            if t.async_api == "sync_to_async" and any(m != "sync" for m in self.config.modes)
        ]
        if slow and self.config.s2a_ops != self.config.ops:
            self.notes.append(
                f"{', '.join(slow)}: async modes use Django's sync_to_async defaults "
                f"(one thread hop per call) and run {self.config.s2a_ops} calls a phase "
                f"instead of {self.config.ops} to keep the run short"
            )
        self.ceilings()
        if "sync" in self.config.modes:
            started = time.perf_counter()
            self.run_sync_mode()
            self.mode_seconds["sync"] = round(time.perf_counter() - started, 1)
            self.ceilings()
        async_modes = [m for m in self.config.modes if m != "sync"]
        if async_modes:
            asyncio.run(self.run_async_modes(async_modes))

    async def run_async_modes(self, modes: list[str]) -> None:
        for mode in modes:
            started = time.perf_counter()
            await self.run_async_mode(mode)
            self.mode_seconds[mode] = round(time.perf_counter() - started, 1)
            self.ceilings()

    # results

    def ceiling(self, mode: str, phase: str) -> float | None:
        return harness.median(self.ceiling_runs[MODE_CEILING[mode]][PHASE_CEILING[phase]])

    def ops_s(self, mode: str, target: str, phase: str) -> float | None:
        stats = self.results.get(mode, {}).get(target, {}).get(phase)
        return harness.median(stats.ops_s) if stats else None

    def cpu_us(self, mode: str, target: str, phase: str) -> float | None:
        stats = self.results.get(mode, {}).get(target, {}).get(phase)
        return harness.median(stats.cpu_us) if stats else None

    def as_json(self, environment: dict[str, Any]) -> dict[str, Any]:
        c = self.config
        return {
            "regime": c.regime,
            "timestamp": environment["timestamp"],
            "config": {
                "quick": c.quick,
                "runs": c.runs,
                "warmup_rounds": c.warmup,
                "inflight_warmup_rounds": c.inflight_warmup,
                "ops_per_phase": c.ops,
                "sync_to_async_ops_per_phase": c.s2a_ops,
                "concurrency": c.concurrency,
                "batch": BATCH,
                "value_pickled_bytes": len(PICKLED_VALUE),
                "targets": list(c.targets),
                "modes": list(c.modes),
                "phases": list(c.phases),
                "redis_benchmark_requests": {"c1": c.c1_requests, "c50": c.c50_requests},
            },
            "environment": environment,
            "targets": {
                t.name: {
                    "backend": t.backend,
                    "sync_api": t.sync_api,
                    "async_api": t.async_api,
                    "parser": self.parsers.get(t.name),
                }
                for t in self.targets
            },
            "skipped": self.skipped,
            "notes": self.notes,
            "errors": self.errors,
            "mode_seconds": self.mode_seconds,
            "ceilings": {
                label: {
                    cmd: {"median_ops_s": harness.median(runs), "runs_ops_s": runs}
                    for cmd, runs in per_cmd.items()
                }
                for label, per_cmd in self.ceiling_runs.items()
            },
            "results": {
                mode: {
                    target: {phase: stats.as_json() for phase, stats in phases.items()}
                    for target, phases in per_target.items()
                }
                for mode, per_target in self.results.items()
            },
            "connections": {
                mode: {target: conn.as_json() for target, conn in per_target.items()}
                for mode, per_target in self.conns.items()
            },
        }


def api_word(mode: str) -> str:
    return "sync" if mode == "sync" else "async"


def progress(mode: str, r: int, warmup: int, rounds: int) -> None:
    label = "warm-up" if r < warmup else f"run {r - warmup + 1}/{rounds - warmup}"
    print(f"  {mode}: {label} done", flush=True)


def parser_of(target: Target, cache: Any) -> str:
    """Name the reply parser a target's client uses (to confirm hiredis / libvalkey)."""
    if target.backend == "redoxide.RedisCache":
        return "own RESP parser (Rust)"
    getters: list[Callable[[], Any]] = [
        lambda: cache._cache.get_client(write=True),  # Django builtin
        lambda: cache.client.get_client(write=True),  # django-redis, django-valkey (sync)
    ]
    for getter in getters:
        try:
            client = getter()
        except Exception:
            continue
        pool = getattr(client, "connection_pool", None)
        if pool is None:
            with contextlib.suppress(Exception):
                client.close()  # an un-awaited coroutine from an async client
            continue
        cls = pool.connection_kwargs.get("parser_class")
        if cls is None:
            module = importlib.import_module(pool.connection_class.__module__)
            cls = getattr(module, "DefaultParser", None)
        return f"{cls.__module__}.{cls.__qualname__}" if cls else "unknown"
    with contextlib.suppress(Exception):
        from valkey.asyncio.connection import DefaultParser

        if target.backend.startswith("django_valkey.async_cache"):
            return f"{DefaultParser.__module__}.{DefaultParser.__qualname__} (library default)"
    return "unknown"


# --- environment and regime -------------------------------------------------------------


def environment(server_version: str) -> dict[str, Any]:
    """The run's environment (harness.environment) with the peers' parsers and the server."""
    redis_py: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        import redis.connection
        import redis.utils

        redis_py = {
            "hiredis_available": bool(redis.utils.HIREDIS_AVAILABLE),
            "default_parser": redis.connection.DefaultParser.__name__,
        }
    valkey_py: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        import valkey.connection
        import valkey.utils

        valkey_py = {
            "libvalkey_available": bool(valkey.utils.LIBVALKEY_AVAILABLE),
            "default_parser": valkey.connection.DefaultParser.__name__,
        }
    return harness.environment(
        PACKAGES,
        redis_py=redis_py,
        valkey_py=valkey_py,
        redis_server=server_version,
        redis_benchmark=redis_benchmark_version(),
    )


# --- report -----------------------------------------------------------------------------


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def fmt_num(x: float | None, suffix: str = "", digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}{suffix}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def table(title: str, corner: str, cols: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Render rows (first cell = row label) under cols as an aligned text table."""
    header = [corner, *cols]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [title]
    for row in [header, *rows]:
        cells = [str(row[0]).ljust(widths[0])]
        cells += [str(c).rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  " + "  ".join(cells))
    return "\n".join(lines)


def mode_label(mode: str, concurrency: int) -> str:
    return {"sync": "sync", "async-serial": "async serial"}.get(
        mode, f"async, {concurrency} in flight"
    )


def mode_report(bench: Bench, mode: str) -> list[str]:
    """Return the tables of one mode: rates, CPU, ratios to peers and to the ceiling."""
    c = bench.config
    names = [t.name for t in bench.targets if t.name in bench.results.get(mode, {})]
    if not names:
        return []
    label = mode_label(mode, c.concurrency)
    rate = functools.partial(bench.ops_s, mode)

    def phase_table(title: str, cols: list[str], cell: Callable[[str, str], str]) -> str:
        return table(title, "phase", cols, [[p, *(cell(n, p) for n in cols)] for p in c.phases])

    out = [
        "",
        phase_table(
            f"== {label}: calls/s (median of {c.runs}, after {c.warmup_of(mode)} warm-up "
            f"round(s); mget/mset = 10-key calls) ==",
            names,
            lambda n, p: fmt_rate(rate(n, p)),
        ),
        phase_table(
            f"-- {label}: client CPU us per call (process-wide) --",
            names,
            lambda n, p: fmt_num(bench.cpu_us(mode, n, p), digits=1),
        ),
    ]
    peers = [n for n in names if not n.startswith("redoxide")]
    for ours in [n for n in names if n.startswith("redoxide")]:
        if peers:
            out.append(
                phase_table(
                    f"-- {label}: {ours} / peer --",
                    peers,
                    lambda n, p, ours=ours: fmt_num(ratio(rate(ours, p), rate(n, p)), "x"),
                )
            )
    clients = "1" if MODE_CEILING[mode] == "c1" else "50"
    out.append(
        phase_table(
            f"-- {label}: fraction of redis-benchmark -c {clients} -P 1 "
            "(GET for get/get-miss/mget, SET for the rest) --",
            names,
            lambda n, p: fmt_num(ratio(rate(n, p), bench.ceiling(mode, p))),
        )
    )
    rows = [
        [
            f"{multi} keys/s / {single}",
            *(fmt_num(ratio((rate(n, multi) or 0) * BATCH, rate(n, single)), "x") for n in names),
        ]
        for multi, single in (("mget", "get"), ("mset", "set"))
        if multi in c.phases and single in c.phases
    ]
    if rows:
        out.append(table(f"-- {label}: batching gain --", "", names, rows))
    return out


def connections_report(bench: Bench) -> list[str]:
    modes = [m for m in bench.config.modes if m in bench.conns]
    if not modes:
        return []

    def cell(target: str, mode: str) -> str:
        s = bench.conns[mode].get(target)
        return f"{s.max_live} / {s.opened} / {s.accepted}" if s else "-"

    rows = [[t.name, *(cell(t.name, m) for m in modes)] for t in bench.targets]
    title = "== server connections per target: max live / newly seen / accepted =="
    return ["", table(title, "target", modes, rows)]


def report(bench: Bench) -> str:
    """Return the whole human-readable report of one regime's run."""
    ceil = {
        label: {cmd: fmt_rate(harness.median(runs)) for cmd, runs in per_cmd.items()}
        for label, per_cmd in bench.ceiling_runs.items()
    }
    out = [
        f"redis-benchmark -P 1 -d {len(PICKLED_VALUE)} "
        f"(median of {len(bench.ceiling_runs['c1']['get'])} samples): "
        f"-c 1 GET {ceil['c1']['get']} SET {ceil['c1']['set']} ops/s; "
        f"-c 50 GET {ceil['c50']['get']} SET {ceil['c50']['set']} ops/s"
    ]
    for mode in bench.config.modes:
        out += mode_report(bench, mode)
    out += connections_report(bench)
    out.append("")
    out.append("parsers: " + ", ".join(f"{k}={v}" for k, v in bench.parsers.items()))
    out += [f"note: {note}" for note in bench.notes]
    out += [f"skipped: {name}: {reason}" for name, reason in bench.skipped.items()]
    out += [
        f"error: {name} in {mode}: {err}"
        for mode, errs in bench.errors.items()
        for name, err in errs.items()
    ]
    out.append("mode seconds: " + ", ".join(f"{m} {s}" for m, s in bench.mode_seconds.items()))
    return "\n".join(out)


def save(data: dict[str, Any], quick: bool) -> list[Path]:
    """The current result (results/latest-<regime>.json) and a line of history: each
    target's median calls/s per mode and operation. A --quick run keeps its own file."""
    suffix = f"{data['regime']}{'-quick' if quick else ''}"
    summary = {
        mode: {
            target: {phase: stats.get("median_ops_s") for phase, stats in phases.items()}
            for target, phases in per_target.items()
        }
        for mode, per_target in data["results"].items()
    }
    if quick:  # not a result to keep: no history line
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"latest-{suffix}.json"
        path.write_text(json.dumps(data, indent=2) + "\n")
        return [path]
    return [result_files.save(f"latest-{suffix}", data, summary)]


# --- command line -----------------------------------------------------------------------


def parse_list(
    value: str, allowed: Sequence[str], aliases: dict[str, str] | None = None
) -> tuple[str, ...]:
    items = [(aliases or {}).get(v.strip(), v.strip()) for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {', '.join(allowed)}")
    return tuple(v for v in allowed if v in items)  # canonical order


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--busy", action="store_true", help="busy regime: hold /dev/cpu_dma_latency at 0"
    )
    g.add_argument("--both", action="store_true", help="idle then busy regime, sharing one server")
    p.add_argument("--quick", action="store_true", help="smoke run: 3 runs of 200 calls a phase")
    p.add_argument("--runs", type=int, help="timed runs (default 10, quick 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up rounds (default 1)")
    p.add_argument(
        "--inflight-warmup",
        type=int,
        help="untimed warm-up rounds of the 50-in-flight mode, as warm as in a running process "
        "(default 5, quick 1)",
    )
    p.add_argument("--ops", type=int, help="calls per phase (default 1000, quick 200)")
    p.add_argument(
        "--s2a-ops",
        type=int,
        help="calls per phase for sync_to_async peers in async modes (default 200, quick 100)",
    )
    p.add_argument("--concurrency", type=int, default=50, help="calls in flight (default 50)")
    p.add_argument(
        "--targets",
        type=lambda v: parse_list(v, TARGET_NAMES),
        default=DEFAULT_TARGETS,
        help=f"comma-separated subset of {','.join(TARGET_NAMES)} (default: all but "
        f"{','.join(n for n in TARGET_NAMES if n not in DEFAULT_TARGETS)})",
    )
    p.add_argument(
        "--modes",
        type=lambda v: parse_list(v, MODES, MODE_ALIASES),
        default=MODES,
        help=f"comma-separated subset of {','.join(MODES)} (or serial, concurrent)",
    )
    p.add_argument(
        "--phases",
        type=lambda v: parse_list(v, PHASES),
        default=PHASES,
        help=f"comma-separated subset of {','.join(PHASES)}",
    )
    p.add_argument("--no-save", action="store_true", help="print only; write no JSON")
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)  # --both: the parent's server
    return p.parse_args(argv)


def config_from(args: argparse.Namespace, regime_name: str) -> Config:
    ops = args.ops or (200 if args.quick else 1000)
    return Config(
        regime=regime_name,
        quick=args.quick,
        runs=args.runs or (3 if args.quick else 10),
        warmup=args.warmup,
        inflight_warmup=args.inflight_warmup
        if args.inflight_warmup is not None
        else (1 if args.quick else 5),
        ops=ops,
        s2a_ops=args.s2a_ops or (100 if args.quick else 200),
        concurrency=args.concurrency,
        targets=args.targets,
        modes=args.modes,
        phases=args.phases,
        c1_requests=5_000 if args.quick else 10_000,
        c50_requests=20_000 if args.quick else 50_000,
        save=not args.no_save,
    )


def run_regime(args: argparse.Namespace, port: int) -> None:
    regime_name = "busy" if args.busy else "idle"
    config = config_from(args, regime_name)
    url = f"redis://127.0.0.1:{port}/0"
    env = environment(redis_server_version())
    print(
        f"redoxide benchmark: regime={regime_name} runs={config.runs} ops={config.ops} "
        f"server=127.0.0.1:{port} load={env['loadavg_at_start']}",
        flush=True,
    )
    started = time.perf_counter()
    with harness.busy(regime_name == "busy"):
        bench = Bench(config, url, port)
        bench.run()
    env["seconds"] = round(time.perf_counter() - started, 1)
    env["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if regime_name == "idle" and env["loadavg_at_start"][0] > 0.5:
        bench.notes.append(
            f"load average {env['loadavg_at_start'][0]} at start: other processes were running, "
            "so this idle regime may look more like the busy one"
        )
    print()
    print(f"##### regime: {regime_name} ({env['seconds']} s) #####")
    print(report(bench))
    if config.save:
        for path in save(bench.as_json(env), config.quick):
            print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if args.port:
        run_regime(args, args.port)
        return 0
    with RedisServer() as server:
        print(f"redis-server pid {server.pid} on 127.0.0.1:{server.port}", flush=True)
        if not args.both:
            run_regime(args, server.port)
            return 0
        # Each regime in a fresh process: no connections or pools carried over.
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--both"]
        for extra in ([], ["--busy"]):
            cmd = [sys.executable, __file__, *rest, *extra, "--port", str(server.port)]
            code = subprocess.run(cmd).returncode
            if code:
                return code
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
