"""The soak's report: rich tables in the terminal, JSON, and one self-contained HTML page
(inline SVG, no scripts) with throughput and RSS over time marked with every fault, and a
histogram of the gaps healthy producers saw between acknowledgements.

A failing soak must say what failed without a second run, so the page leads with the
checks, then the evidence: examples of each lost/duplicated/reordered message with the
fault that preceded it, the longest stalls with theirs, every dropped healthy connection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pulsar_gateway.tools.html_report import PALETTE, esc, page, table

FAULT_COLOURS = {
    "broker_kill": "#c0392b",
    "broker_stop": "#e67e22",
    "half_frame_kafka": "#2980b9",
    "half_frame_amqp": "#9b59b6",
    "client_cut": "#16a085",
    "kafka_size_bomb": "#2c3e50",
    "garbage_produce": "#7f8c8d",
    "amqp_bad_frame": "#d35400",
    "idle_flood": "#27ae60",
}
STALL_BUCKETS = (
    (0.0, 0.1, "< 0.1 s"),
    (0.1, 0.5, "0.1-0.5 s"),
    (0.5, 1.0, "0.5-1 s"),
    (1.0, 2.0, "1-2 s"),
    (2.0, 5.0, "2-5 s"),
    (5.0, 10.0, "5-10 s"),
    (10.0, 20.0, "10-20 s"),
    (20.0, 30.0, "20-30 s"),
    (30.0, float("inf"), ">= 30 s"),
)
EXTRA_STYLE = """.page{max-width:1280px}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.pass{color:#1e7b34}.fail{color:#b02a37}ul.examples li{font-family:monospace;font-size:12px}
td.text{text-align:left;max-width:640px}.note{color:#555;font-size:13px}"""


def stall_histogram(gaps: Sequence[float]) -> list[dict[str, Any]]:
    return [
        {"gap": label, "count": sum(1 for g in gaps if low <= g < high)}
        for low, high, label in STALL_BUCKETS
    ]


def _nice(value: float) -> float:
    """A round axis maximum at or above `value`."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10.0 * magnitude


def line_chart(
    title: str,
    series: dict[str, Sequence[tuple[float, float]]],
    unit: str,
    faults: Sequence[dict[str, Any]],
    phases: dict[str, float],
    x_max: float,
    levels: Sequence[tuple[str, float, str]] = (),
) -> str:
    """Lines over seconds, with a band per broker freeze, a red line per broker kill, a
    tick per other fault (hover for what it was and what the gateway did), dashed phase
    lines, and dashed `levels` (label, value, colour)."""
    width, height, left, right, top, plot_h = 1200, 330, 64, 16, 34, 230
    plot_w = width - left - right
    values = sorted(v for points in series.values() for _, v in points)
    peak = max(values + [lv for _, lv, _ in levels] + [1])
    # a catch-up burst after a stall can be ten times the steady rate: clip it rather than
    # flatten every other line against the axis
    typical = values[int(0.98 * (len(values) - 1))] * 1.6 if values else peak
    y_top = _nice(min(peak, max(typical, *(lv for _, lv, _ in levels), 1)) * 1.05)
    x_max = max(x_max, 1.0)

    def x(t: float) -> float:
        return left + plot_w * min(max(t, 0.0), x_max) / x_max

    def y(v: float) -> float:
        return top + plot_h * (1 - min(v, y_top) / y_top)

    parts = [
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{esc(title)}" font-family="sans-serif">',
        f'<text x="4" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
    ]
    for i in range(6):
        value = y_top * i / 5
        parts.append(
            f'<line x1="{left}" y1="{y(value):.1f}" x2="{width - right}" y2="{y(value):.1f}" '
            f'stroke="#eee"/><text x="{left - 6}" y="{y(value) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{value:,.0f}</text>'
        )
    step = next(s for s in (10, 30, 60, 120, 300, 600, 1200) if x_max / s <= 12)
    for tick in range(0, int(x_max) + 1, step):
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top + plot_h}" x2="{x(tick):.1f}" '
            f'y2="{top + plot_h + 4}" stroke="#999"/><text x="{x(tick):.1f}" '
            f'y="{top + plot_h + 16}" font-size="11" text-anchor="middle">{tick}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{top + plot_h + 32}" font-size="11" '
        f'text-anchor="middle">seconds since the soak started ({esc(unit)})</text>'
    )
    for fault in faults:
        colour = FAULT_COLOURS.get(fault["kind"], "#555")
        tip = f"<title>{esc(fault['describe'])}: {esc(fault['outcome'])}</title>"
        start, end = fault["start"], fault["end"] if fault["end"] is not None else fault["start"]
        if fault["kind"] == "broker_stop":
            parts.append(
                f'<rect x="{x(start):.1f}" y="{top}" width="{max(1.0, x(end) - x(start)):.1f}" '
                f'height="{plot_h}" fill="{colour}" opacity="0.18">{tip}</rect>'
            )
        elif fault["kind"] == "broker_kill":
            parts.append(
                f'<line x1="{x(start):.1f}" y1="{top}" x2="{x(start):.1f}" y2="{top + plot_h}" '
                f'stroke="{colour}" stroke-width="2">{tip}</line>'
            )
        else:
            parts.append(
                f'<rect x="{x(start) - 2:.1f}" y="{top - 8}" width="4" height="10" '
                f'fill="{colour}">{tip}</rect>'
            )
    if peak > y_top:
        parts.append(
            f'<text x="{width - right}" y="{top - 12}" font-size="11" text-anchor="end" '
            f'fill="#555">clipped at {y_top:,.0f}: peaks up to {peak:,.0f}</text>'
        )
    for index, (name, at) in enumerate(phases.items()):
        parts.append(
            f'<line x1="{x(at):.1f}" y1="{top}" x2="{x(at):.1f}" y2="{top + plot_h}" '
            f'stroke="#555" stroke-dasharray="4 3"/><text x="{x(at) + 3:.1f}" '
            f'y="{top + 12 + 12 * (index % 3)}" font-size="10" fill="#555">{esc(name)}</text>'
        )
    lowest = min((value for _, value, _ in levels), default=0)
    for label, value, colour in levels:
        # the lowest level's label goes under its line, the others above theirs: levels close
        # together (before and limit) would otherwise print over each other
        label_y = y(value) + 13 if value == lowest and len(levels) > 1 else y(value) - 4
        parts.append(
            f'<line x1="{left}" y1="{y(value):.1f}" x2="{width - right}" y2="{y(value):.1f}" '
            f'stroke="{colour}" stroke-dasharray="6 4"/><text x="{width - right - 4}" '
            f'y="{label_y:.1f}" font-size="11" text-anchor="end" fill="{colour}">'
            f"{esc(label)} {value:,.0f}</text>"
        )
    for index, points in enumerate(series.values()):
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        colour = PALETTE[index % len(PALETTE)]
        name = list(series)[index]
        dash = ' stroke-dasharray="5 3"' if "consumed" in name else ""
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.4"{dash}/>'
        )
    items = [(name, PALETTE[i % len(PALETTE)], "series") for i, name in enumerate(series)]
    items += [
        (k, FAULT_COLOURS.get(k, "#555"), "fault") for k in sorted({f["kind"] for f in faults})
    ]
    cursor, row_y = float(left), top + plot_h + 52
    for name, colour, kind in items:
        size = 26 + 6.6 * len(name)
        if cursor + size > width - right:
            cursor, row_y = float(left), row_y + 18
        if kind == "series":
            dash = ' stroke-dasharray="5 3"' if "consumed" in name else ""
            parts.append(
                f'<line x1="{cursor}" y1="{row_y - 4}" x2="{cursor + 16}" y2="{row_y - 4}" '
                f'stroke="{colour}" stroke-width="2"{dash}/>'
            )
        else:
            opacity = 0.4 if name == "broker_stop" else 1
            parts.append(
                f'<rect x="{cursor + 4}" y="{row_y - 10}" width="8" height="10" '
                f'fill="{colour}" opacity="{opacity}"/>'
            )
        parts.append(f'<text x="{cursor + 20}" y="{row_y}" font-size="11">{esc(name)}</text>')
        cursor += size
    parts[0] = parts[0].replace(f'height="{height}"', f'height="{row_y + 10}"', 1)
    parts.append("</svg>")
    return "\n".join(parts)


def histogram_chart(title: str, rows: Sequence[dict[str, Any]], note: str) -> str:
    """Vertical bars on a log scale (thousands of short gaps beside a few long ones), with
    each bucket's count written on it."""
    import math

    width, plot_h, left, top = 720, 200, 50, 56
    bar = (width - left - 20) / max(1, len(rows))
    peak = max((r["count"] for r in rows), default=1) or 1
    scale = math.log10(peak + 1) or 1
    parts = [
        f'<svg width="{width}" height="{plot_h + 90}" xmlns="http://www.w3.org/2000/svg" '
        f'role="img" aria-label="{esc(title)}" font-family="sans-serif">',
        f'<text x="4" y="18" font-size="14" font-weight="bold">{esc(title)}</text>',
        f'<text x="4" y="32" font-size="11" fill="#555">{esc(note)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 20}" y2="{top + plot_h}" '
        'stroke="#999"/>',
    ]
    for index, row in enumerate(rows):
        h = plot_h * math.log10(row["count"] + 1) / scale
        x0 = left + index * bar
        colour = PALETTE[3] if index >= 4 and row["count"] else PALETTE[0]
        parts.append(
            f'<rect x="{x0 + 4:.1f}" y="{top + plot_h - h:.1f}" width="{bar - 8:.1f}" '
            f'height="{h:.1f}" fill="{colour}"/><text x="{x0 + bar / 2:.1f}" '
            f'y="{top + plot_h - h - 4:.1f}" font-size="11" text-anchor="middle">'
            f'{row["count"]:,}</text><text x="{x0 + bar / 2:.1f}" y="{top + plot_h + 16}" '
            f'font-size="11" text-anchor="middle">{esc(row["gap"])}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _examples(examples: dict[str, list[str]]) -> str:
    if not examples:
        return "<p>Problems found: none.</p>"
    out = []
    for kind, items in examples.items():
        out.append(f"<h4>{esc(kind)} (first {len(items)})</h4><ul class='examples'>")
        out.extend(f"<li>{esc(item)}</li>" for item in items)
        out.append("</ul>")
    return "".join(out)


def _clients_section(clients: Sequence[dict[str, Any]]) -> str:
    """Who had errors or lost a connection (healthy first); the rest in one line."""
    troubled = [c for c in clients if c["errors"] or c["drops"]]
    troubled.sort(key=lambda c: (c["healthy"] != "yes", -c["drops"], -c["errors"]))
    healthy = [c for c in clients if c["healthy"] == "yes"]
    quiet = len(healthy) - sum(1 for c in troubled if c["healthy"] == "yes")
    line = (
        f"<p>{len(healthy)} healthy clients, {quiet} of them without a single error or "
        f"dropped connection; {len(clients) - len(healthy)} victims (their drops are the "
        "faults'). Clients with errors or drops:</p>"
    )
    return line + table(
        troubled, ["bad" if c["healthy"] == "yes" and c["drops"] else "" for c in troubled]
    )


def write_html(path: Path, results: dict[str, Any]) -> None:
    timeline = results["timeline"]
    x_max = timeline["end"]
    faults = results["faults"]
    verdict = results["verdict"]
    checks = results["checks"]
    classes = ["good" if c["result"] == "pass" else "bad" for c in checks]
    throughput = line_chart(
        "Throughput (messages per second)",
        {name: [tuple(p) for p in points] for name, points in timeline["series"].items()},
        "msg/s",
        faults,
        timeline["phases"],
        x_max,
    )
    rss = results["rss"]
    rss_chart = line_chart(
        "Gateway RSS (MiB), sampled every second",
        {"gateway RSS": [tuple(p) for p in timeline["rss"]]},
        "MiB",
        faults,
        timeline["phases"],
        x_max,
        [
            ("after warm-up", rss["before_mib"], "#1e7b34"),
            ("limit", rss["limit_mib"], "#b02a37"),
        ],
    )
    stalls = results["stalls"]
    histogram = histogram_chart(
        "Gaps between successive acknowledgements, healthy producers",
        stalls["histogram"],
        "log scale; each bar is labelled with its count",
    )
    settings = results["settings"]
    held = rss.get("at_settle", {})
    sections = [
        f'<div class="page"><p class="verdict {"pass" if verdict == "PASS" else "fail"}">'
        f"{esc(verdict)}</p>",
        f"<p>{esc(settings['minutes'])} min of load, seed {esc(settings['seed'])} "
        f"(<code>{esc(settings['reproduce'])}</code>), started {esc(results['started'])}; "
        f"{len(faults)} faults injected. Longest stall seen by a healthy producer: "
        f"{stalls['longest_s']:.2f} s ({esc(stalls['longest_producer'] or '-')}, from "
        f"{stalls['longest_from_s']:.1f} s). Peak gateway RSS {rss['peak_mib']:.0f} MiB.</p>",
        "<h2>Checks</h2>",
        table(checks, classes),
        "<h2>Messages</h2>",
        table(results["summary"]),
        '<p class="note">Ghosts: a delivery the client was told failed (or nacked) that is '
        "stored all the same. Failed/nacked includes AMQP messages left in doubt by a "
        "dropped connection. Misplaced: stored once, but not at the offset acknowledged.</p>",
        "<h2>Over time</h2>",
        '<p class="note">Bands: broker frozen (SIGSTOP to SIGCONT). Red lines: broker '
        "SIGKILLed. Ticks above the plot: other faults. Hover any marker for what it was "
        "and what the gateway did. Dashed lines: phases of the soak.</p>",
        throughput,
        rss_chart,
        table(
            [
                {
                    "RSS cold (MiB)": f"{rss.get('cold_mib', 0):.0f}",
                    "after warm-up (MiB)": f"{rss['before_mib']:.0f}",
                    "peak (MiB)": f"{rss['peak_mib']:.0f}",
                    "after settle (MiB)": f"{rss['after_mib']:.0f}",
                    "limit (MiB)": f"{rss['limit_mib']:.0f}",
                    "settle waited (s)": f"{rss['settle_s']:.0f}",
                    "then: open partitions": held.get("open_partitions", ""),
                    "open connections": held.get("connections", ""),
                }
            ]
        ),
        "<h2>Rates per window of the load</h2>",
        '<p class="note">Messages a second of the healthy clients in each window, with the '
        "share of the rate the load generators aim at (Kafka: every producer's rate; AMQP: "
        "every queue's): a protocol stalled for part of the run shows here even when its "
        "total looks plausible.</p>",
        table(
            results["rates"],
            ["bad" if r["under half the target"] else "" for r in results["rates"]],
        ),
        "<h2>Stalls</h2>",
        histogram,
        "<h3>Gaps of 0.5 s or more (healthy producers), by the faults around them</h3>",
        table(stalls["top"]),
        "<h3>Longest gap per healthy producer</h3>",
        table(stalls["per_producer"]),
        "<h2>Faults</h2>",
        table([{"kind": k, "count": n} for k, n in results["faults_by_kind"].items()]),
        table(
            [
                {
                    "#": f["number"],
                    "kind": f["kind"],
                    "at (s)": f"{f['start']:.1f}",
                    "took (s)": f"{(f['end'] or f['start']) - f['start']:.1f}",
                    "detail": f["detail"],
                    "outcome": f["outcome"],
                }
                for f in faults
            ]
        ),
        "<h2>Kafka</h2>",
        table(results["kafka"]["clients"]),
        "<h3>Consumer groups</h3>",
        table(results["kafka"]["groups"]),
        _examples(results["kafka"]["examples"]),
        "<h2>AMQP</h2>",
        table(results["amqp"]["queues"]),
        _examples(results["amqp"]["examples"]),
        "<h2>Clients: errors and dropped connections</h2>",
        _clients_section(results["clients"]),
        "<h2>Gateway log: warnings and errors</h2>",
        f"<pre>{esc(chr(10).join(results['gateway_log']) or 'none')}</pre>",
        "</div>",
    ]
    html = page("Soak (issue 10)", sections, results)
    html = html.replace("</style>", EXTRA_STYLE + "</style>", 1)
    path.write_text(html)


def print_terminal(console: Console, results: dict[str, Any]) -> None:
    checks = Table(title=f"Soak: {results['verdict']} (seed {results['settings']['seed']})")
    for column in ("check", "result", "detail"):
        checks.add_column(column, overflow="fold")
    for check in results["checks"]:
        style = "green" if check["result"] == "pass" else "bold red"
        checks.add_row(check["check"], f"[{style}]{check['result']}[/]", check["detail"])
    console.print(checks)
    _rows(console, "Messages", results["summary"])
    _rows(console, "Kafka producers", results["kafka"]["clients"])
    _rows(console, "Kafka consumer groups", results["kafka"]["groups"])
    queues = results["amqp"]["queues"]
    bad = [q for q in queues if q["lost"] or q["duplicated"] or q["reordered"]]
    console.print(
        f"AMQP: {len(queues)} queues, {len(bad)} with lost, duplicated or reordered messages"
    )
    _rows(console, "AMQP queues with problems", bad)
    kinds = ", ".join(f"{k} {n}" for k, n in results["faults_by_kind"].items())
    console.print(f"faults: {len(results['faults'])} ({kinds})")
    rss = results["rss"]
    console.print(
        f"gateway RSS: cold {rss.get('cold_mib', 0):.0f} MiB, after the warm-up "
        f"{rss['before_mib']:.0f} MiB, peak {rss['peak_mib']:.0f} MiB, "
        f"after {rss['after_mib']:.0f} MiB (limit {rss['limit_mib']:.0f} MiB); then open "
        f"partitions {rss.get('at_settle', {}).get('open_partitions', '?')}, connections "
        f"{rss.get('at_settle', {}).get('connections', '?')}"
    )
    _rows(console, "Rates per window of the load (share of the target rate)", results["rates"])
    stalls = results["stalls"]
    console.print(
        f"longest stall of a healthy producer: {stalls['longest_s']:.2f} s "
        f"({stalls['longest_producer'] or '-'}, from {stalls['longest_from_s']:.1f} s)"
    )
    _rows(console, "Gaps of 0.5 s or more, by the faults around them", stalls["top"][:8])
    troubled = [
        c for c in results["clients"] if c["healthy"] == "yes" and (c["drops"] or c["errors"])
    ]
    _rows(
        console,
        "Healthy clients with errors or dropped connections",
        [
            {k: c[k] for k in ("client", "errors", "error kinds", "drops", "first drop")}
            for c in troubled
        ],
    )
    for protocol in ("kafka", "amqp"):
        for kind, items in results[protocol]["examples"].items():
            console.print(f"[bold]{protocol} {kind}[/] (first {min(5, len(items))}):")
            for item in items[:5]:
                console.print(f"  {item}")


def _rows(console: Console, title: str, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    grid = Table(title=title)
    for column in rows[0]:
        grid.add_column(str(column), overflow="fold")
    for row in rows:
        grid.add_row(*(str(v) for v in row.values()))
    console.print(grid)


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.write_text(json.dumps(results, indent=1, default=str))
