"""What the benchmarks share: Django set up once; the loops that drive calls (blocking, awaited
one by one, or N in flight) and their wall and CPU time; contenders run interleaved round by
round (or, for a whole server per contender, in an order rotated each round); medians with
ratios to a reference printed as a Markdown table; the busy-host regime; and the environment
a result file records. A benchmark is then its workloads and contenders, as data:

    results = interleaved({"redoxide": {"get": ...}, "django-redis": {"get": ...}}, rounds, calls)
    print(table(results, reference="django-redis"))

Servers come from servers.py (tests/support's throwaway redis-server processes); results
that are kept go through result_files.py. Standard library only: the full-stack benchmark
runs it under other interpreters.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import inspect
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "Results",
    "busy",
    "environment",
    "interleaved",
    "markdown",
    "median",
    "median_of",
    "per_second",
    "rotated",
    "run_concurrent",
    "run_serial",
    "run_sync",
    "setup_django",
    "table",
    "timed",
    "timed_async",
]

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

#: (contender, workload) -> one figure per round.
Results = dict[tuple[str, str], list[float]]


def setup_django(**settings: Any) -> None:
    """Configure Django for a script (once), with no caches unless given."""
    import django
    from django.conf import settings as django_settings

    if not django_settings.configured:
        django_settings.configure(**{"CACHES": {}, "INSTALLED_APPS": [], **settings})
        django.setup()


# -- driving calls ---------------------------------------------------------------------------


def run_sync(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> None:
    """fn(*args) for each argument tuple, blocking."""
    for args in calls:
        fn(*args)


async def run_serial(fn: Callable[..., Awaitable[Any]], calls: Sequence[tuple[Any, ...]]) -> None:
    """await fn(*args) for each argument tuple, one at a time."""
    for args in calls:
        await fn(*args)


async def run_concurrent(
    fn: Callable[..., Awaitable[Any]], calls: Sequence[tuple[Any, ...]], width: int
) -> None:
    """Keep `width` calls in flight: `width` tasks, each awaiting its share in turn."""

    async def worker(chunk: Sequence[tuple[Any, ...]]) -> None:
        for args in chunk:
            await fn(*args)

    await asyncio.gather(*(worker(calls[i::width]) for i in range(width)))


def timed(run: Callable[..., Any], *args: Any) -> tuple[float, float]:
    """(wall seconds, this process' CPU seconds) of run(*args)."""
    cpu, wall = time.process_time(), time.perf_counter()
    run(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


async def timed_async(run: Callable[..., Awaitable[Any]], *args: Any) -> tuple[float, float]:
    """(wall seconds, this process' CPU seconds) of await run(*args)."""
    cpu, wall = time.process_time(), time.perf_counter()
    await run(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def per_second(call: Callable[[int], Any], calls: int) -> float:
    """Calls per second of `call(i)` for i in range(calls), blocking; a coroutine function
    is awaited call by call on a new event loop (so its rate includes the awaits), after one
    untimed call."""
    if inspect.iscoroutinefunction(call):
        return asyncio.run(_per_second_async(call, calls))

    def loop() -> None:
        for i in range(calls):
            call(i)

    wall, _ = timed(loop)
    return calls / wall


async def _per_second_async(call: Callable[[int], Awaitable[Any]], calls: int) -> float:
    await call(0)  # untimed: a cache makes its event loop's bridge on the loop's first call
    start = time.perf_counter()
    for i in range(calls):
        await call(i)
    return calls / (time.perf_counter() - start)


def rotated(items: Sequence[T], round_: int) -> list[T]:
    """items in the order of round `round_`: rotated by one each round, so none always runs
    first (for contenders that each need a whole server started, one after another)."""
    if not items:
        return []
    at = round_ % len(items)
    return [*items[at:], *items[:at]]


def interleaved(
    contenders: Mapping[str, Mapping[str, Callable[[int], Any]]],
    rounds: int,
    calls: int,
    measure: Callable[[Callable[[int], Any], int], float] = per_second,
) -> Results:
    """Each round runs every workload of every contender in turn (workload by workload, so
    contenders measured side by side share the host's state); one figure per round each."""
    results: Results = {}
    workloads = list(dict.fromkeys(w for per in contenders.values() for w in per))
    for _ in range(rounds):
        for workload in workloads:
            for who, per in contenders.items():
                if workload in per:
                    results.setdefault((who, workload), []).append(measure(per[workload], calls))
    return results


def median(figures: Sequence[float], digits: int = 2) -> float | None:
    """The median, rounded; None for no figures."""
    return round(statistics.median(figures), digits) if figures else None


def median_of(results: Results, who: str, workload: str) -> float | None:
    figures = results.get((who, workload))
    return statistics.median(figures) if figures else None


def table(
    results: Results,
    reference: str,
    unit: str = "calls/s",
    higher_is_better: bool = True,
    fmt: Callable[[float], str] = lambda v: f"{v:,.0f}",
) -> str:
    """A Markdown table: a row per workload, a column per contender (medians over rounds),
    and each contender's ratio to `reference` (>1: better, whichever way the unit points)."""
    who = list(dict.fromkeys(w for w, _ in results))
    workloads = list(dict.fromkeys(k for _, k in results))
    others = [w for w in who if w != reference]
    head = ["workload", *(f"{w} {unit}" for w in who), *(f"{w} / {reference}" for w in others)]
    rows: list[list[str]] = []
    for workload in workloads:
        medians = {w: median_of(results, w, workload) for w in who}
        cells = [workload]
        for w in who:
            figure = medians[w]
            cells.append("-" if figure is None else fmt(figure))
        base = medians[reference]
        for w in others:
            mine = medians[w]
            if mine is None or base is None or not mine or not base:
                cells.append("-")
            else:
                cells.append(f"{(mine / base if higher_is_better else base / mine):.2f}x")
        rows.append(cells)
    return "\n".join(markdown(head, rows))


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


# -- the host --------------------------------------------------------------------------------


@contextlib.contextmanager
def busy(enabled: bool) -> Iterator[None]:
    """The busy-host regime when enabled: /dev/cpu_dma_latency held at 0, so idle CPUs do not
    sleep deeply (these VMs halt idle CPUs, which slows a lone client's every round trip; see
    benchmarks/README.md). Nothing otherwise."""
    if not enabled:
        yield
        return
    fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    try:
        os.write(fd, struct.pack("i", 0))
        yield
    finally:
        os.close(fd)


def _tree() -> str:
    """The commit of this checkout (redoxide runs from it), and whether python/ or src/ have
    uncommitted changes."""
    if shutil.which("git") is None:  # a chroot (make bench-py314) has no git: say so
        return "unknown (no git)"
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", "python", "src"], capture_output=True, text=True
    )
    return commit.stdout.strip() + (" + uncommitted changes" if dirty.stdout else "")


def environment(packages: Sequence[str], **extra: Any) -> dict[str, Any]:
    """What a result file records of the run's host and software: time, Python, platform,
    CPU, load, the redoxide tree, the installed versions of `packages` (None: not installed),
    and `extra`."""
    versions: dict[str, str | None] = {}
    for package in packages:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "redoxide_tree": _tree(),
        "versions": versions,
        **extra,
    }
