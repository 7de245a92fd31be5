"""Draw the `get` results of the latest benchmark runs as an SVG bar chart (no dependencies).

.venv/bin/python benchmarks/chart.py   # writes benchmarks/results/chart.svg
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
MODES = [
    ("sync", "sync get"),
    ("async-serial", "async serial aget"),
    ("async-concurrent", "async 50 in flight aget"),
]
TARGETS = [
    ("redoxide", "#c0392b"),
    ("django", "#7f8c8d"),
    ("django-redis", "#2980b9"),
    ("valkey", "#16a085"),
    ("valkey-async", "#8e44ad"),
]
CEILING = {"sync": "c1", "async-serial": "c1", "async-concurrent": "c50"}


def load(regime: str) -> dict[str, Any] | None:
    path = RESULTS / f"latest-{regime}.json"
    return json.loads(path.read_text()) if path.exists() else None


def text(x: float, y: float, size: int, body: str, extra: str = "") -> str:
    return f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="middle"{extra}>{body}</text>'


def panel(data: dict[str, Any], x0: float, title: str) -> list[str]:
    """One regime: a group of bars per mode, each bar a fraction of redis-benchmark."""
    out = [text(x0 + 210, 24, 15, title, ' font-weight="bold"')]
    height, base = 260.0, 300.0
    scale = 2.5  # the axis goes up to 2.5x redis-benchmark
    for tick in (0.5, 1.0, 1.5, 2.0, 2.5):
        y = base - height * tick / scale
        dash = "" if tick == 1.0 else ' stroke-dasharray="3,3"'
        out.append(f'<line x1="{x0 + 30}" x2="{x0 + 420}" y1="{y}" y2="{y}" stroke="#bbb"{dash}/>')
        out.append(
            f'<text x="{x0 + 26}" y="{y + 4}" font-size="10" text-anchor="end">{tick:g}x</text>'
        )
    for i, (mode, label) in enumerate(MODES):
        ceiling = data["ceilings"][CEILING[mode]]["get"]["median_ops_s"]
        gx = x0 + 40 + i * 128
        results = data["results"].get(mode, {})
        for j, (target, color) in enumerate(TARGETS):
            ops = results.get(target, {}).get("get", {}).get("median_ops_s")
            if not ops:
                continue
            frac = min(ops / ceiling, scale)
            h = height * frac / scale
            x = gx + j * 22
            out.append(f'<rect x="{x}" y="{base - h}" width="18" height="{h}" fill="{color}"/>')
            out.append(text(x + 9, base - h - 3, 8, f"{ops / 1000:.0f}k"))
        out.append(text(gx + 52, base + 16, 11, label))
    return out


def main() -> None:
    parts: list[str] = []
    for k, regime in enumerate(("idle", "busy")):
        data = load(regime)
        if data is not None:
            parts += panel(
                data, 10 + k * 440, f"{regime} host: get, as a fraction of redis-benchmark"
            )
    legend = [
        f'<rect x="{20 + i * 120}" y="340" width="12" height="12" fill="{c}"/>'
        f'<text x="{36 + i * 120}" y="350" font-size="11">{t}</text>'
        for i, (t, c) in enumerate(TARGETS)
    ]
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="890" height="370" font-family="sans-serif">'
        '<rect width="100%" height="100%" fill="white"/>' + "".join(parts + legend) + "</svg>\n"
    )
    out = RESULTS / "chart.svg"
    out.write_text(svg)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
