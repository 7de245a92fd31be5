"""Draw the `get` results of the latest benchmark runs as an SVG bar chart (no dependencies).

.venv/bin/python benchmarks/chart.py   # writes benchmarks/results/chart.svg
"""

from __future__ import annotations

import json
import shutil
import subprocess
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


def codec_chart() -> None:
    """Compressors: compress and decompress MB/s side by side, from codec-idle.json."""
    path = RESULTS / "codec-idle.json"
    if not path.exists():
        return
    data = json.loads(path.read_text())["compressors"]
    names = [n for n in data if n != "lzma"]
    top = max(max(r["compress_mb_s"], r["decompress_mb_s"]) for n, r in data.items() if n in names)
    height, base, width = 240.0, 280.0, 90
    parts = [
        text(
            20 + width * len(names) / 2,
            24,
            15,
            "Compressors: MB/s on a 14 KiB payload",
            ' font-weight="bold"',
        )
    ]
    for i, name in enumerate(names):
        r = data[name]
        x = 30 + i * width
        for j, (key, color) in enumerate(
            (("compress_mb_s", "#c0392b"), ("decompress_mb_s", "#2980b9"))
        ):
            h = height * r[key] / top
            parts.append(
                f'<rect x="{x + j * 28}" y="{base - h}" width="24" height="{h}" fill="{color}"/>'
            )
            parts.append(text(x + j * 28 + 12, base - h - 3, 9, f"{r[key]:.0f}"))
        parts.append(text(x + 26, base + 16, 11, name))
        parts.append(text(x + 26, base + 30, 10, f"ratio {r['ratio']:.1f}"))
    parts.append('<rect x="30" y="330" width="12" height="12" fill="#c0392b"/>')
    parts.append('<text x="46" y="340" font-size="11">compress</text>')
    parts.append('<rect x="130" y="330" width="12" height="12" fill="#2980b9"/>')
    parts.append('<text x="146" y="340" font-size="11">decompress</text>')
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{60 + width * len(names)}" height="350" '
        'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
        + "".join(parts)
        + "</svg>\n"
    )
    out = RESULTS / "codec-chart.svg"
    out.write_text(svg)
    print(f"wrote {out}")
    to_png(out)


def to_png(svg: Path) -> None:
    """Also write a PNG when rsvg-convert (Debian's librsvg2-bin) is installed."""
    if shutil.which("rsvg-convert"):
        png = svg.with_suffix(".png")
        subprocess.run(["rsvg-convert", str(svg), "-o", str(png)], check=True)
        print(f"wrote {png}")


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
    to_png(out)
    codec_chart()


if __name__ == "__main__":
    main()
