"""Self-contained HTML reports (inline SVG bar charts, no network) beside the JSON.

Charts come from gateway/html_report.py, which the parity report uses too.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from pulsar_gateway.tools.html_report import bar_chart

__all__ = ["bar_chart", "write_report"]


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
