"""Self-contained HTML reports (inline SVG bar charts, no network) beside the JSON."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any


def bar_chart(title: str, bars: list[tuple[str, float]], unit: str) -> str:
    width, row, left = 640, 34, 190
    top = max((value for _, value in bars), default=1) or 1
    height = row * len(bars) + 40
    parts = [
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<text x="4" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for index, (label, value) in enumerate(bars):
        y = 30 + index * row
        length = (width - left - 110) * value / top
        parts.append(f'<text x="4" y="{y + 17}" font-size="12">{html.escape(label)}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 4}" width="{length:.1f}" height="20" fill="#3b6ea5"/>'
        )
        parts.append(
            f'<text x="{left + length + 6:.1f}" y="{y + 18}" font-size="12">'
            f"{value:,.0f} {html.escape(unit)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def write_report(
    path_stem: Path,
    title: str,
    results: dict[str, Any],
    charts: list[str],
    table: list[dict[str, Any]],
) -> tuple[Path, Path]:
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    json_path = path_stem.with_suffix(".json")
    json_path.write_text(json.dumps(results, indent=2))
    columns = list(table[0]) if table else []
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(item[c]))}</td>" for c in columns) + "</tr>"
        for item in table
    )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}</style></head><body>
<h1>{html.escape(title)}</h1>
<table><tr>{head}</tr>{rows}</table>
{"".join(f"<div>{chart}</div>" for chart in charts)}
<pre>{html.escape(json.dumps(results.get("environment", {}), indent=2))}</pre>
</body></html>"""
    html_path = path_stem.with_suffix(".html")
    html_path.write_text(page)
    return json_path, html_path
