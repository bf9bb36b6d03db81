"""Self-contained HTML reports: inline SVG charts and tables, no scripts, no network.

Used by parity (and the benchmarks), so a verdict can be attached to a change request
and opened anywhere.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

PALETTE = ("#3b6ea5", "#e07b39", "#5a9e4b", "#b04a5a", "#7a5aa5", "#8c8c8c")
STYLE = """body{font-family:sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}
td{text-align:right}td:first-child,td.text{text-align:left}.bad{background:#fbe3e3}
.good{background:#e3f4e3}.verdict{font-size:1.6em;font-weight:bold}svg{margin:1em 0}"""


def esc(value: Any) -> str:
    return html.escape(str(value))


def bar_value(value: float) -> str:
    """A bar's label: whole numbers from 10 up, two significant digits below (CPU per record
    is a fraction of a microsecond, which a whole number showed as 0)."""
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.2g}"


def bar_chart(title: str, bars: Sequence[tuple[str, float]], unit: str) -> str:
    """Horizontal bars, one per label; the bars start after the longest label (12 px text,
    about 7 px a character)."""
    row = 30
    left = max(220, 12 + 7 * max((len(label) for label, _ in bars), default=0))
    width = left + 500
    top = max((value for _, value in bars), default=1) or 1
    height = row * len(bars) + 40
    parts = [
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{esc(title)}">',
        f'<text x="4" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
    ]
    for index, (label, value) in enumerate(bars):
        y = 30 + index * row
        length = (width - left - 120) * value / top
        parts.append(f'<text x="4" y="{y + 15}" font-size="12">{esc(label)}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 2}" width="{length:.1f}" height="18" fill="{PALETTE[0]}"/>'
        )
        parts.append(
            f'<text x="{left + length + 6:.1f}" y="{y + 15}" font-size="12">'
            f"{bar_value(value)} {esc(unit)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def grouped_bar_chart(
    title: str, labels: Sequence[str], series: dict[str, Sequence[float]], unit: str
) -> str:
    """Vertical bars: one group per label, one bar per series, with a legend."""
    names = list(series)
    groups = max(1, len(labels))
    bar = max(4, min(24, 640 // (groups * max(1, len(names)) + groups)))
    group_width = bar * len(names) + 10
    legend_x = _legend_positions(names)
    # wide enough for the bars, the legend and the title
    width = max(420, 70 + groups * group_width, legend_x[-1] + 10, 20 + 8 * len(title))
    plot = 200
    top = max((v for values in series.values() for v in values), default=1) or 1
    height = plot + 110
    parts = [
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{esc(title)}">',
        f'<text x="4" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
        f'<text x="4" y="34" font-size="11">max {top:,.0f} {esc(unit)}</text>',
        f'<line x1="60" y1="{40 + plot}" x2="{width - 10}" y2="{40 + plot}" stroke="#999"/>',
    ]
    for g, label in enumerate(labels):
        x0 = 62 + g * group_width
        for s, name in enumerate(names):
            value = series[name][g]
            h = plot * value / top
            parts.append(
                f'<rect x="{x0 + s * bar}" y="{40 + plot - h:.1f}" width="{bar - 1}" '
                f'height="{h:.1f}" fill="{PALETTE[s % len(PALETTE)]}">'
                f"<title>{esc(label)} {esc(name)}: {value:,.0f}</title></rect>"
            )
        parts.append(
            f'<text x="{x0}" y="{54 + plot}" font-size="10" '
            f'transform="rotate(35 {x0} {54 + plot})">{esc(label)}</text>'
        )
    for s, name in enumerate(names):
        x = legend_x[s]
        parts.append(
            f'<rect x="{x}" y="{height - 16}" width="10" height="10" '
            f'fill="{PALETTE[s % len(PALETTE)]}"/>'
        )
        parts.append(f'<text x="{x + 14}" y="{height - 7}" font-size="11">{esc(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _legend_positions(names: Sequence[str]) -> list[int]:
    """Where each legend entry starts, and after the last where the legend ends: an entry
    takes its swatch and about 7 px a character of its 11 px name (150 px at least)."""
    positions = [70]
    for name in names:
        positions.append(positions[-1] + max(150, 30 + 7 * len(name)))
    return positions


def line_chart(title: str, series: dict[str, Sequence[tuple[float, float]]], unit: str) -> str:
    """Lines over seconds, one per series, with a legend."""
    width, height, left, top, plot_w, plot_h = 900, 280, 60, 30, 800, 200
    points = [p for values in series.values() for p in values]
    x_max = max((x for x, _ in points), default=1) or 1
    y_max = max((y for _, y in points), default=1) * 1.1 or 1
    parts = [
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{esc(title)}">',
        f'<text x="4" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#999"/>',
        f'<text x="{left - 4}" y="{top + 8}" font-size="11" text-anchor="end">{y_max:,.0f}</text>',
        f'<text x="{left - 4}" y="{top + plot_h}" font-size="11" text-anchor="end">0</text>',
        f'<text x="{left + plot_w}" y="{top + plot_h + 16}" font-size="11" text-anchor="end">'
        f"{x_max:,.0f} s</text>",
    ]
    for index, (name, values) in enumerate(series.items()):
        colour = PALETTE[index % len(PALETTE)]
        path = " ".join(
            f"{left + plot_w * x / x_max:.1f},{top + plot_h * (1 - y / y_max):.1f}"
            for x, y in values
        )
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        parts.append(
            f'<rect x="{left + 10 + index * 160}" y="{height - 22}" width="10" height="10" '
            f'fill="{colour}"/><text x="{left + 24 + index * 160}" y="{height - 13}" '
            f'font-size="11">{esc(name)} ({esc(unit)})</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _numeric(value: Any) -> bool:
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and value.replace(",", "").replace(".", "", 1).isdigit()


def table(rows: Sequence[dict[str, Any]], classes: Sequence[str] | None = None) -> str:
    """A table whose numbers are right-aligned and whose text is left-aligned; `classes`
    marks rows (e.g. "bad")."""
    if not rows:
        return "<p>(none)</p>"
    columns = list(rows[0])
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for index, row in enumerate(rows):
        css = f' class="{classes[index]}"' if classes and classes[index] else ""
        cells = "".join(
            f"<td>{esc(row[c])}</td>"
            if _numeric(row[c])
            else f'<td class="text">{esc(row[c])}</td>'
            for c in columns
        )
        body.append(f"<tr{css}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def page(title: str, sections: Sequence[str], data: dict[str, Any] | None = None) -> str:
    raw = ""
    if data is not None:
        dumped = esc(json.dumps(data, indent=2))
        raw = f"<details><summary>JSON</summary><pre>{dumped}</pre></details>"
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1>"
        + "\n".join(sections)
        + raw
        + "</body></html>"
    )
