"""Figures of fullstack.py: the run's data, medians, ratios, the tables and the chart.

Cells are keyed "condition|server|view|backend"; every figure is the median over rounds, and
cache CPU per request is a backend's app CPU per request minus the no-cache view's in the
same condition and server mode. Ratios are redoxide / REFERENCE from the same run.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import harness
from fullstack_tools import CONNECTIONS, WRK_THREADS

BASELINE_NAME = "(no cache)"
REFERENCE = "django-vcache"  # ratios are redoxide / this
RATIO_FIGURES = ("rps", "app_cpu_us", "cache_cpu_us", "redis_cpu_us", "stack_cpu_us", "p99_ms")


@dataclass
class Config:
    rounds: int
    seconds: float
    warmup: float
    servers: tuple[str, ...]
    views: tuple[str, ...]
    backends: tuple[str, ...]
    conditions: tuple[str, ...]
    delay_ms: float
    quick: bool
    no_save: bool = False
    redraw: str | None = None
    summary: bool = False


@dataclass
class Run:
    """Everything the run collects: cells per (condition, server, view, backend)."""

    config: Config
    cells: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    proxy_rtt_ms: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def key(condition: str, server: str, view: str, backend: str) -> str:
        return f"{condition}|{server}|{view}|{backend}"


def medians(run: Run) -> dict[str, dict[str, float]]:
    """Return the median of each figure over rounds, plus cache CPU per request."""
    out: dict[str, dict[str, float]] = {}
    for key, cells in run.cells.items():
        out[key] = {m: statistics.median(c[m] for c in cells) for m in cells[0]}
        out[key]["rounds"] = float(len(cells))
        # On a small host the app and Redis share the cores: their sum sets the capacity.
        if "app_cpu_us" in cells[0] and "redis_cpu_us" in cells[0]:
            stack = (c["app_cpu_us"] + c["redis_cpu_us"] for c in cells)
            out[key]["stack_cpu_us"] = statistics.median(stack)
    for key, figures in out.items():
        condition, server, view, _ = key.split("|")
        base = out.get(Run.key(condition, server, "base", BASELINE_NAME))
        if base is not None and view != "base":
            figures["cache_cpu_us"] = figures["app_cpu_us"] - base["app_cpu_us"]
    return out


def ratios(med: dict[str, dict[str, float]], run: Run) -> dict[str, dict[str, float]]:
    """Return redoxide / REFERENCE per (condition, server, view) for the headline figures."""
    out: dict[str, dict[str, float]] = {}
    for condition in run.config.conditions:
        for server in run.config.servers:
            for view in run.config.views:
                ours = med.get(Run.key(condition, server, view, "redoxide"))
                ref = med.get(Run.key(condition, server, view, REFERENCE))
                if view == "base" or ours is None or ref is None:
                    continue
                figures = {
                    m: ours[m] / ref[m]
                    for m in RATIO_FIGURES
                    if m in ours and m in ref and ref[m] > 0
                }
                # The spread of the req/s ratio over rounds (rounds are interleaved, so round
                # i of each backend ran in the same minutes), and the ceiling: the no-cache
                # view's req/s over the reference's, the ratio a backend that cost nothing
                # would reach.
                per_round = [
                    a["rps"] / b["rps"]
                    for a, b in zip(
                        run.cells.get(Run.key(condition, server, view, "redoxide"), []),
                        run.cells.get(Run.key(condition, server, view, REFERENCE), []),
                        strict=False,
                    )
                    if b.get("rps")
                ]
                if per_round:
                    figures["rps_low"], figures["rps_high"] = min(per_round), max(per_round)
                base = med.get(Run.key(condition, server, "base", BASELINE_NAME))
                if base is not None and ref.get("rps"):
                    figures["ceiling"] = base["rps"] / ref["rps"]
                out[f"{condition}|{server}|{view}"] = figures
    return out


def fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None or x != x else f"{x:,.{digits}f}"


table = harness.markdown


COLUMNS = (
    ("req/s", "rps", 0),
    ("p50 ms", "p50_ms", 1),
    ("p99 ms", "p99_ms", 1),
    ("non-2xx", "non2xx", 0),
    ("app CPU us/req", "app_cpu_us", 0),
    ("cache CPU us/req", "cache_cpu_us", 0),
    ("redis CPU us/req", "redis_cpu_us", 1),
    ("app + redis CPU us/req", "stack_cpu_us", 0),
    ("redis reads/req", "redis_reads", 1),
    ("redis commands us/req", "redis_cmd_us", 1),
    ("redis user us/req", "redis_user_us", 0),
    ("redis sys us/req", "redis_sys_us", 0),
    ("redis sleeps/req", "redis_sleeps", 2),
    ("RSS MiB", "rss_mib", 0),
    ("conns (+opened)", "conns_max", 0),
)


def report(
    run: Run,
    med: dict[str, dict[str, float]],
    rat: dict[str, dict[str, float]],
    labels: Mapping[str, str],
) -> str:
    config = run.config
    lines = [
        f"{config.rounds} round(s), {config.seconds} s cells after {config.warmup} s warm-up,"
        f" wrk -t{WRK_THREADS} -c{CONNECTIONS}; medians over rounds. Servers: "
        + "; ".join(f"{name} = {labels[name]}" for name in config.servers)
        + ". conns: most redis-server clients seen during the cell (+ connections opened in it)."
    ]
    names = [BASELINE_NAME, *config.backends]
    for condition in config.conditions:
        extra = f", +{config.delay_ms:g} ms each way" if condition == "delay" else ""
        rtt = run.proxy_rtt_ms.get(condition)
        lines += ["", f"## {condition}{extra} (PING round trip {fmt(rtt, 3)} ms)"]
        for view in config.views:
            rows = []
            for server in config.servers:
                for backend in names:
                    figures = med.get(Run.key(condition, server, view, backend))
                    if figures is not None:
                        cols = [fmt(figures.get(m), d) for _, m, d in COLUMNS]
                        if opened := figures.get("conns_opened"):
                            cols[-1] += f" (+{opened:,.0f})"
                        rows.append([server, backend, *cols])
            if rows:
                lines += ["", f"### view `{view}`", ""]
                lines += table(["server", "backend", *(c for c, _, _ in COLUMNS)], rows)
        rows = []
        for server in config.servers:
            for view in config.views:
                figures = rat.get(f"{condition}|{server}|{view}")
                if figures:
                    spread = "-"
                    if "rps_low" in figures:
                        spread = f"{figures['rps_low']:.2f}-{figures['rps_high']:.2f}"
                    rps, *rest = (fmt(figures.get(m), 2) for m in RATIO_FIGURES)
                    rows.append([server, view, rps, spread, fmt(figures.get("ceiling"), 2), *rest])
        if rows:
            lines += ["", f"### redoxide / {REFERENCE}", ""]
            lines += [
                "req/s by round: the lowest and highest of the per-round ratios. Ceiling: the "
                "no-cache view's req/s over the reference's (what a cache costing nothing "
                "would reach).",
                "",
            ]
            header = ["server", "view", "req/s", "req/s by round", "ceiling", "app CPU"]
            header += ["cache CPU", "redis CPU", "app + redis CPU", "p99"]
            lines += table(header, rows)
        lines += floor_table(run, med, condition)
    if run.notes:
        lines += ["", "Notes:"] + [f"- {tag}: {note}" for tag, note in run.notes.items()]
    return "\n".join(lines)


#: The in-process floor of the views' cache work (fullstack.py's LocMemCache backend).
FLOOR = "locmem"


def cache_cost(figures: Mapping[str, float]) -> float | None:
    """Cache cost per request: app CPU above the no-cache view's, plus redis-server CPU."""
    if "cache_cpu_us" not in figures:
        return None
    return figures["cache_cpu_us"] + figures.get("redis_cpu_us", 0.0)


def floor_table(run: Run, med: dict[str, dict[str, float]], condition: str) -> list[str]:
    """Each backend's cache cost per request beside LocMemCache's, when the floor was run."""
    rows = []
    for server in run.config.servers:
        for view in run.config.views:
            floor = med.get(Run.key(condition, server, view, FLOOR))
            low = None if floor is None else cache_cost(floor)
            if low is None:
                continue
            for backend in run.config.backends:
                figures = med.get(Run.key(condition, server, view, backend))
                cost = None if figures is None else cache_cost(figures)
                if cost is None or backend == FLOOR:
                    continue
                ratio = fmt(cost / low, 2) if low > 0 else "-"
                rows.append([server, view, backend, fmt(cost), fmt(low), fmt(cost - low), ratio])
    if not rows:
        return []
    return [
        "",
        f"### cache cost per request beside the in-process floor ({FLOOR})",
        "",
        "Cache cost: app CPU per request above the no-cache view's, plus redis-server CPU per "
        f"request (us). {FLOOR}: Django's LocMemCache, each worker its own (no network, no "
        "Redis): what the view's cache calls cost at the least.",
        "",
        *table(["server", "view", "backend", "cost", FLOOR, "above it", "x floor"], rows),
    ]


def chart(run: Run, med: dict[str, dict[str, float]], path: Path) -> str:
    """Draw req/s and cache CPU per request (log scale) of the cache views; return a note."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return "chart skipped: matplotlib is not installed in this venv"
    config = run.config
    panels = [(c, v) for c in config.conditions for v in ("six", "read") if v in config.views]
    if not panels:
        return "chart skipped: no cache view measured"
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6.4), squeeze=False)
    width = 0.8 / len(config.backends)
    for col, (condition, view) in enumerate(panels):
        for row, (metric, label) in enumerate(
            (("rps", "req/s"), ("cache_cpu_us", "cache CPU us/req"))
        ):
            ax = axes[row][col]
            for i, backend in enumerate(config.backends):
                values = [
                    med.get(Run.key(condition, s, view, backend), {}).get(metric, 0.0)
                    for s in config.servers
                ]
                if row == 1:  # from ~0.2 to ~10 ms: only a log scale shows both ends
                    values = [max(v, 1.0) for v in values]
                xs = [j + (i - (len(config.backends) - 1) / 2) * width for j in range(len(values))]
                ax.bar(xs, values, width, label=backend)
            ax.set_xticks(range(len(config.servers)), config.servers, rotation=20, fontsize=7)
            ax.set_title(f"{condition}, view {view}: {label}", fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
            if row == 1:
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    axes[0][0].legend(fontsize=7)
    title = f"redoxide full stack, {config.rounds} round(s) of {config.seconds:g} s cells"
    fig.suptitle(title + (" (--quick)" if config.quick else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return f"chart: {path}"


def summary(
    run: Run, med: dict[str, dict[str, float]], rat: dict[str, dict[str, float]], view: str
) -> str:
    """One table per server mode for the READMEs: every backend of `view` under every
    condition, with its costs, its distance to the in-process floor, and redoxide's ratios to
    REFERENCE beside their spread over rounds and the ceiling."""
    out: list[str] = []
    for server in run.config.servers:
        rows = []
        for condition in run.config.conditions:
            base = med.get(Run.key(condition, server, "base", BASELINE_NAME))
            floor = med.get(Run.key(condition, server, view, FLOOR))
            low = None if floor is None else cache_cost(floor)
            if base is not None:
                rows.append(
                    [
                        condition,
                        "(no cache view)",
                        fmt(base["rps"]),
                        fmt(base["p99_ms"], 1),
                        fmt(base["app_cpu_us"]),
                        "",
                        "",
                        "",
                        "",
                    ]
                )
            for backend in run.config.backends:
                figures = med.get(Run.key(condition, server, view, backend))
                if figures is None:
                    continue
                cost = cache_cost(figures)
                above = "" if cost is None or not low else fmt(cost / low, 1)
                rows.append([
                    condition, backend, fmt(figures["rps"]), fmt(figures["p99_ms"], 1),
                    fmt(figures["app_cpu_us"]), fmt(figures.get("cache_cpu_us")),
                    fmt(figures.get("redis_cpu_us"), 1), fmt(cost), above,
                ])  # fmt: skip
        if not rows:
            continue
        out += ["", f"**{server}**", ""]
        out += table(
            ["network", "backend", "req/s", "p99 ms", "app CPU", "cache CPU", "redis CPU",
             "cache cost", "x floor"],
            rows,
        )  # fmt: skip
        ratio_rows = []
        for condition in run.config.conditions:
            r = rat.get(f"{condition}|{server}|{view}")
            if r is None:
                continue
            ours = med.get(Run.key(condition, server, view, "redoxide"), {})
            ref = med.get(Run.key(condition, server, view, REFERENCE), {})
            costs = cache_cost(ours), cache_cost(ref)
            cost = costs[0] / costs[1] if costs[0] is not None and costs[1] else None
            ratio_rows.append([
                condition, f"{fmt(r.get('rps'), 2)} ({fmt(r.get('rps_low'), 2)}-"
                f"{fmt(r.get('rps_high'), 2)})", fmt(r.get("ceiling"), 2), fmt(cost, 2),
                fmt(r.get("stack_cpu_us"), 2), fmt(r.get("redis_cpu_us"), 2),
                fmt(r.get("p99_ms"), 2),
            ])  # fmt: skip
        if ratio_rows:
            out += ["", f"redoxide / {REFERENCE}:", ""]
            out += table(
                [
                    "network",
                    "req/s (by round)",
                    "ceiling",
                    "cache cost",
                    "app + redis CPU",
                    "redis CPU",
                    "p99",
                ],
                ratio_rows,
            )
    return "\n".join(out)
