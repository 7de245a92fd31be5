"""What the direct-loop benchmarks share: Django set up once, timing (sync and async),
contenders run interleaved round by round, and medians with ratios to a reference printed as
a Markdown table. A benchmark is then its workloads and contenders, as data:

    results = interleaved({"redoxide": {"get": ...}, "django-redis": {"get": ...}}, rounds, calls)
    print(table(results, reference="django-redis"))

Servers come from servers.py (tests/support's throwaway redis-server processes); results
that are kept go through result_files.py.
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["Results", "interleaved", "median_of", "per_second", "setup_django", "table"]

#: (contender, workload) -> one figure per round.
Results = dict[tuple[str, str], list[float]]


def setup_django(**settings: Any) -> None:
    """Configure Django for a script (once), with no caches unless given."""
    import django
    from django.conf import settings as django_settings

    if not django_settings.configured:
        django_settings.configure(**{"CACHES": {}, "INSTALLED_APPS": [], **settings})
        django.setup()


def per_second(call: Callable[[int], Any], calls: int) -> float:
    """Calls per second of `call(i)` for i in range(calls), blocking; a coroutine function
    is awaited call by call on one event loop (so its rate includes the awaits)."""
    if inspect.iscoroutinefunction(call):
        return asyncio.run(_per_second_async(call, calls))
    start = time.perf_counter()
    for i in range(calls):
        call(i)
    return calls / (time.perf_counter() - start)


async def _per_second_async(call: Callable[[int], Awaitable[Any]], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        await call(i)
    return calls / (time.perf_counter() - start)


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
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
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
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
