"""The report of fullstack_soak.py: its JSON, and the summary printed from it."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from typing import Any

from fullstack import SERVERS, _finite


def dumps(data: dict[str, Any]) -> str:
    """Return data as strict JSON, indented, with each list of plain values on one line."""
    text = json.dumps(_finite(data), indent=1, allow_nan=False)
    flat = re.compile(r"\[\n\s*([^\[\]{}\n]*(?:,\n\s*[^\[\]{}\n]*)*)\n\s*\]")
    return flat.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text) + "\n"


def columns(windows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, list[Any]]:
    """Return the windows as one list per key (None where a window lacks it)."""
    return {key: [w.get(key) for w in windows] for key in keys}


def print_minutes(series: dict[str, list[Any]], window: float) -> None:
    """Print the steady series (windows of `window` seconds) a minute per row."""
    print("  minute  req/s  p99 max (ms)   errors  RSS end (MiB)  conns max  opened  app CPU")
    minutes: dict[int, list[int]] = {}
    for i, t in enumerate(series["t"]):
        minutes.setdefault(int((t - 1) // 60), []).append(i)
    for minute, rows in minutes.items():
        col = {k: [series[k][i] for i in rows] for k in series}
        print(
            f"  {minute + 1:6d} {sum(col['requests']) / (len(rows) * window):6.0f}"
            f"  {max(col['p99_ms']):12.1f}  {sum(col['non2xx']) + sum(col['socket_errors']):7.0f}"
            f"  {col['rss_mib'][-1]:13.1f}  {max(col['conns_max']):9.0f}"
            f"  {sum(col['conns_opened']):6.0f}  {statistics.mean(col['app_cpu_cores']):7.2f}"
        )


def verdicts(targets: dict[str, bool]) -> str:
    """Return "name PASS, name FAIL, ..." for the targets."""
    return ", ".join(f"{name} {'PASS' if ok else 'FAIL'}" for name, ok in targets.items())


def print_steady(name: str, judged: dict[str, Any], window: float) -> None:
    """Print a steady run: a row per minute, then the figures and verdicts."""
    f = judged["figures"]
    print(f"\nsteady, {SERVERS[name].label}: {f['windows']} windows of {window:g} s")
    print_minutes(judged["series"], window)
    rss = [f[k] for k in ("rss_first_mib", "rss_after_warmup_mib", "rss_end_mib", "rss_max_mib")]
    rows = [
        ("req/s (median after warm-up)", f"{f['rps_median']:,.0f}"),
        (
            "requests / non-2xx / socket errors",
            f"{f['requests']:,.0f} / {f['non2xx']:.0f} / {f['socket_errors']:.0f}",
        ),
        (
            "RSS first / after warm-up / end / max",
            " / ".join(f"{x:.1f}" for x in rss) + f" MiB ({f['rss_growth_percent']:+.2f}%)",
        ),
        (
            "server connections max (after warm-up) / bound",
            f"{f['conns_max']:.0f} ({f['conns_max_after_warmup']:.0f}) / {f['conns_bound']}",
        ),
        ("connections opened after warm-up", f"{f['conns_opened_after_warmup']:.0f}"),
        (
            "p99 after warm-up -> end / max",
            f"{f['p99_after_warmup_ms']:.1f} -> {f['p99_end_ms']:.1f} ms"
            f" (x{f['p99_drift']:.2f}) / {f['p99_max_ms']:.1f} ms",
        ),
        ("app CPU (median)", f"{f['app_cpu_cores_median']:.2f} cores"),
    ]
    for label, value in rows:
        print(f"  {label:<48} {value}")
    print(f"  targets: {verdicts(judged['targets'])}")


def print_faults(name: str, judged: dict[str, Any]) -> None:
    """Print a fault run: totals, then each kill's error window, recovery and connections."""
    f = judged["figures"]
    print(f"\nfaults (fail-open), {SERVERS[name].label}: {f['seconds']} windows of 1 s")
    print(
        f"  requests {f['requests']:,.0f}, non-2xx {f['non2xx']:.0f}, socket errors"
        f" {f['socket_errors']:.0f}, empty seconds {f['empty_seconds']}, healthy"
        f" {f['healthy_requests_per_s'] or 0:,.0f} req/s"
    )
    print("  kill at   down   error window  first hit after restart  down req/s  down p99  conns")
    for e in judged["events"]:
        recovery = f"{e['recovery_s']:.2f} s" if e["recovery_s"] is not None else "never"
        down_rps = e["down_requests_per_s"]
        down_p99 = e["down_p99_ms"]
        print(
            f"  {e['kill_t']:6.1f}s {e['down_s']:5.1f}s {e['error_window_s']:10.1f} s"
            f"  {recovery:>23}  {down_rps if down_rps is None else round(down_rps):>10}"
            f"  {down_p99 if down_p99 is None else round(down_p99, 1):>8}"
            f"  {e['conns_after_recovery']}"
        )
    print(f"  targets: {verdicts(judged['targets'])}")


def report(data: dict[str, Any]) -> None:
    """Print every run of a soak (as saved) with its verdicts, then the overall one."""
    window = data["config"]["steady_window_s"]
    for name, judged in data["steady"].items():
        if "figures" in judged:
            print_steady(name, judged, window)
        else:
            print(f"\nsteady, {name}: {judged.get('error')}")
    for name, judged in data["faults"].items():
        if "figures" in judged:
            print_faults(name, judged)
        else:
            print(f"\nfaults, {name}: {judged.get('error')}")
    print(f"\noverall: {'PASS' if data['passed'] else 'FAIL'} ({data['seconds_taken']} s)")
