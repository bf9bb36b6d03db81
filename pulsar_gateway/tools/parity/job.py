"""`pulsar-gateway parity`: the PySpark job, its verdict and its report.

The driver gathers per-partition facts (facts.py). Spark then walks each partition's
two logs side by side (in_order.py, one task per partition); the partitions where they
part, and only those, are read again through the Python data sources (sources.py) and
compared record by content (compare.py), which names every problem. Only counts and a
few example offsets come back to the driver. The verdict is written as JSON and as
a self-contained HTML page; the exit status is 0 only on parity.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pulsar_gateway.gateway import tool_reports
from pulsar_gateway.tools import html_report
from pulsar_gateway.tools.gateway_link import GatewayLink
from pulsar_gateway.tools.parity.compare import KINDS, PartitionReport
from pulsar_gateway.tools.parity.facts import Facts, GroupDrift, gather
from pulsar_gateway.tools.parity.in_order import Walk, walk_partition
from pulsar_gateway.tools.parity.samples import RecordSample, read_samples

log = logging.getLogger("gateway.parity")

# (topic, partition, "source" or "target", offset) -> the record there
Samples = dict[tuple[str, int, str, int], RecordSample]

SPARK_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "true",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
    # the JIT's first tier only and one GC thread: the JVM spent 8.9 CPU seconds of a 1M-
    # record parity run starting Spark, 3.9 with these; its CPU in the comparison by
    # content of 1M records was no higher (41 s against 40; docs/tools.md, "How parity
    # compares"). A --conf spark.driver.extraJavaOptions replaces them.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


@dataclass
class ParityPlan:
    source: str
    target: str
    link: GatewayLink
    name: str
    topics: list[str] = field(default_factory=list)
    topic_pattern: str | None = None
    group_pattern: str | None = ".*"
    target_via: str = "pulsar"
    # how the gateway's Pulsar topics are read: "native" (its own wire client, memory flat
    # whatever the topic's size) or "pulsar-client" (sources.py)
    pulsar_client: str = "native"
    master: str = "local[*]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    report: str = "reports/parity"


@dataclass
class Verdict:
    passed: bool
    partitions: list[PartitionReport]
    groups: list[GroupDrift]
    seconds: float
    memory: dict[str, float]
    json_path: Path | None = None
    html_path: Path | None = None
    samples: Samples = field(default_factory=dict)
    # seconds per phase (facts, Spark's start, the in-order walk and its tasks' CPU, the
    # comparison by content): where a run's time goes without a profiler
    phases: dict[str, float] = field(default_factory=dict)

    def sample(self, report: PartitionReport, side: str, offset: int | None) -> RecordSample | None:
        if offset is None:
            return None
        return self.samples.get((report.topic, report.partition, side, offset))

    def partition_json(self, report: PartitionReport) -> dict[str, Any]:
        """The partition's report, each example with the records at its offsets."""
        data = report.to_json()
        for kind, pairs in report.examples.items():
            for entry, (source, target) in zip(data["examples"][kind], pairs, strict=True):
                for side, offset in (("source", source), ("target", target)):
                    found = self.sample(report, side, offset)
                    entry[f"{side}_record"] = found.to_json() if found else None
        return data

    def to_json(self, plan: ParityPlan) -> dict[str, Any]:
        return {
            "verdict": "pass" if self.passed else "fail",
            "source": plan.source,
            "target": plan.target,
            "target_read_via": plan.target_via,
            "pulsar_client": plan.pulsar_client,
            "migration": plan.name,
            "seconds": round(self.seconds, 2),
            "phases_seconds": {name: round(value, 2) for name, value in self.phases.items()},
            "spark": {"master": plan.master, **self.memory},
            "totals": {
                "source_records": sum(p.source_records for p in self.partitions),
                "target_records": sum(p.target_records for p in self.partitions),
                **{k: sum(p.counts[k] for p in self.partitions) for k in KINDS},
            },
            "partitions": [self.partition_json(p) for p in self.partitions],
            "groups": [g.to_json() for g in self.groups],
        }


def spark_session(master: str, conf: dict[str, str]) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("pulsar-gateway parity")
    for key, value in {**SPARK_DEFAULTS, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def register_sources(spark: Any) -> None:
    """The Python data sources, registered when the comparison by content first needs them:
    registering sets up the session's SQL state in the JVM, 2.7-3.1 s of Spark's 6-8 s
    start at load 9-10, which a run whose every partition passes the walk never uses
    (docs/tools.md, "How parity compares")."""
    if getattr(spark, "_parity_sources", False):
        return
    from pulsar_gateway.tools.parity.sources import KafkaRangeSource, PulsarPartitionSource

    spark.dataSource.register(KafkaRangeSource)
    spark.dataSource.register(PulsarPartitionSource)
    spark._parity_sources = True


def frames(spark: Any, plan: ParityPlan, facts: Facts) -> tuple[Any, Any]:
    register_sources(spark)
    source = _kafka_frame(spark, plan.source, facts.source_ranges)
    if plan.target_via == "kafka":
        target = _kafka_frame(spark, plan.target, facts.target_ranges)
    else:
        target = (
            spark.read.format("parity_pulsar")
            .option("service_url", plan.link.service_url)
            .option("pulsar_client", plan.pulsar_client)
            .option("ranges", json.dumps(facts.pulsar_specs))
            .load()
        )
    return source, target


def _kafka_frame(spark: Any, bootstrap: str, ranges: dict[tuple[str, int], tuple[int, int]]) -> Any:
    """A Kafka-protocol cluster read by offset range, one Spark partition per Kafka one."""
    specs = [
        {"topic": t, "partition": p, "start": s, "end": e}
        for (t, p), (s, e) in sorted(ranges.items())
    ]
    return (
        spark.read.format("parity_kafka")
        .option("bootstrap", bootstrap)
        .option("ranges", json.dumps(specs))
        .load()
    )


def walk_jobs(plan: ParityPlan, facts: Facts) -> list[dict[str, Any]]:
    """One in-order walk per partition either side has, the largest first (Spark runs
    tasks in order, so the long ones start early)."""
    specs = {(s["topic"], s["partition"]): s for s in facts.pulsar_specs}
    aligns = {(t, p): (s, g) for t, p, s, g in facts.aligns()}
    jobs = []
    for key in sorted(facts.source_ranges.keys() | facts.target_ranges.keys()):
        translation = facts.translations.get(key)
        jobs.append(
            {
                "topic": key[0],
                "partition": key[1],
                "source": plan.source,
                "source_range": facts.source_ranges.get(key, (0, 0)),
                "target": plan.target,
                "target_range": facts.target_ranges.get(key),
                "pulsar": specs.get(key) if plan.target_via == "pulsar" else None,
                "service_url": plan.link.service_url,
                "pulsar_client": plan.pulsar_client,
                "runs": translation.runs if translation is not None else [],
                "align": aligns.get(key),
            }
        )
    return sorted(jobs, key=lambda j: j["source_range"][1] - j["source_range"][0], reverse=True)


def in_order_pass(spark: Any, plan: ParityPlan, facts: Facts) -> list[Walk]:
    jobs = walk_jobs(plan, facts)
    if not jobs:
        return []
    return spark.sparkContext.parallelize(jobs, len(jobs)).map(walk_partition).collect()


class MemoryWatch:
    """Peak RSS of the Spark driver JVM and of the Python workers it starts (in local
    mode the executors live in the driver JVM), sampled twice a second."""

    def __init__(self, spark: Any) -> None:
        self.jvm_pid = _jvm_pid(spark)
        self.peak_workers = 0.0
        self.peak_jvm = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            if self.jvm_pid is None:
                return
            self.peak_jvm = max(self.peak_jvm, _rss_mib(self.jvm_pid, "VmHWM"))
            workers = sum(_rss_mib(pid) for pid in _descendants(self.jvm_pid))
            self.peak_workers = max(self.peak_workers, workers)

    def result(self) -> dict[str, float]:
        return {
            "driver_jvm_peak_rss_mib": round(self.peak_jvm, 1),
            "python_workers_peak_rss_mib": round(self.peak_workers, 1),
            "driver_python_peak_rss_mib": round(_rss_mib(os.getpid(), "VmHWM"), 1),
        }


def _jvm_pid(spark: Any) -> int | None:
    process = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(process, "pid", None)


def _rss_mib(pid: int, field_name: str = "VmRSS") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`. A process's children are listed per thread that forked
    them, and the JVM starts Python workers from threads other than its main one."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for children_file in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                children = children_file.read_text().split()
            except OSError:
                continue
            for child in children:
                found.append(int(child))
                todo.append(int(child))
    return found


def run_parity(
    plan: ParityPlan, console: Console | None = None, spark: Any | None = None
) -> Verdict:
    """Gather, compare, report. A given Spark session is used and left running."""
    from pulsar_gateway.tools.parity.compare import compare

    console = console or Console(stderr=True)
    started = time.monotonic()
    phases: dict[str, float] = {}
    with console.status("reading offsets, checkpoints and translations"):
        facts = asyncio.run(
            gather(
                plan.source,
                plan.target,
                plan.link,
                plan.name,
                plan.topics,
                plan.topic_pattern,
                plan.group_pattern,
            )
        )
    phases["facts"] = time.monotonic() - started
    total = sum(e - s for s, e in facts.source_ranges.values())
    console.print(
        f"comparing {len(facts.source_ranges)} partitions of {len(facts.topics)} topics "
        f"(~{total:,} source records) on Spark {plan.master}"
    )
    own = spark is None
    mark = time.monotonic()
    if spark is None:
        spark = spark_session(plan.master, plan.spark_conf)
    phases["spark_start"] = time.monotonic() - mark
    try:
        with MemoryWatch(spark) as watch:
            mark = time.monotonic()
            with console.status("walking both sides of every partition in order"):
                walks = in_order_pass(spark, plan, facts)
            phases["in_order"] = time.monotonic() - mark
            phases["in_order_tasks_cpu"] = sum(w.cpu_seconds for w in walks)
            reports = [
                PartitionReport(w.topic, w.partition, w.records, w.records, method="in order")
                for w in walks
                if w.identical
            ]
            differing = {(w.topic, w.partition) for w in walks if not w.identical}
            if differing:
                console.print(
                    f"{len(differing)} partition(s) differ: comparing their records by content"
                )
                mark = time.monotonic()
                narrowed = facts.only(differing)
                source, target = frames(spark, plan, narrowed)
                reports += compare(spark, source, target, narrowed.runs(), narrowed.aligns())
                phases["by_content"] = time.monotonic() - mark
            reports.sort(key=lambda r: (r.topic, r.partition))
        memory = watch.result()
    finally:
        if own:
            spark.stop()
    passed = all(r.ok for r in reports) and all(g.drift == 0 for g in facts.groups)
    verdict = Verdict(passed, reports, facts.groups, time.monotonic() - started, memory)
    verdict.phases = phases
    if not all(r.ok for r in reports):
        mark = time.monotonic()
        with console.status("reading the offending records"):
            verdict.samples = offending_records(plan, reports)
        phases["samples"] = time.monotonic() - mark
    write_report(plan, verdict)
    print_verdict(verdict, console)
    return verdict


def offending_records(plan: ParityPlan, reports: list[PartitionReport]) -> Samples:
    """The records at every example offset of every failing partition, from the source
    cluster and from the gateway (both read over the Kafka protocol)."""
    samples: Samples = {}
    for report in reports:
        if report.ok:
            continue
        for side, bootstrap, index in (("source", plan.source, 0), ("target", plan.target, 1)):
            offsets = {
                pair[index]
                for pairs in report.examples.values()
                for pair in pairs
                if pair[index] is not None
            }
            found = read_samples(bootstrap, report.topic, report.partition, offsets)  # type: ignore[arg-type]
            for offset, record in found.items():
                samples[(report.topic, report.partition, side, offset)] = record
    return samples


def _sample_rows(verdict: Verdict) -> list[dict[str, Any]]:
    rows = []
    for report in verdict.partitions:
        for kind, pairs in sorted(report.examples.items()):
            for pair in pairs:
                for side, offset in zip(("source", "target"), pair, strict=True):
                    found = verdict.sample(report, side, offset)
                    if found is None:
                        continue
                    rows.append(
                        {
                            "partition": f"{report.topic}-{report.partition}",
                            "problem": kind.replace("_", " "),
                            "side": side,
                            "offset": offset,
                            "key": found.key,
                            "value": found.value,
                            "headers": ", ".join(f"{n}={v}" for n, v in found.headers),
                            "timestamp": found.timestamp,
                        }
                    )
    return rows


def write_report(plan: ParityPlan, verdict: Verdict) -> None:
    stem = Path(plan.report)
    stem.parent.mkdir(parents=True, exist_ok=True)
    data = verdict.to_json(plan)
    verdict.json_path = stem.with_suffix(".json")
    verdict.json_path.write_text(json.dumps(data, indent=2))
    labels = [f"{p.topic}-{p.partition}" for p in verdict.partitions]
    problems = [sum(p.counts.values()) for p in verdict.partitions]
    rows = []
    for p in verdict.partitions:
        row: dict[str, Any] = {
            "partition": f"{p.topic}-{p.partition}",
            "verdict": "ok" if p.ok else "FAIL",
            "compared": p.method,
            "source": p.source_records,
            "target": p.target_records,
        }
        row.update({kind.replace("_", " "): p.counts[kind] for kind in KINDS})
        row["first offsets (source/target)"] = "; ".join(
            f"{kind}: " + ", ".join(f"{s}/{t}" for s, t in pairs)
            for kind, pairs in sorted(p.examples.items())
        )
        rows.append(row)
    group_rows = [g.to_json() for g in verdict.groups]
    verdict_line = (
        f'<p class="verdict {"good" if verdict.passed else "bad"}">'
        f"{'PARITY' if verdict.passed else 'NO PARITY'}</p>"
        f"<p>source {html_report.esc(plan.source)} &rarr; gateway "
        f"{html_report.esc(plan.target)} (target read through {plan.target_via}); "
        f"{verdict.seconds:.1f} s</p>"
    )
    sections = [
        verdict_line,
        html_report.grouped_bar_chart(
            "records per partition",
            labels,
            {
                "source": [p.source_records for p in verdict.partitions],
                "target": [p.target_records for p in verdict.partitions],
            },
            "records",
        ),
        html_report.grouped_bar_chart(
            "problems per partition", labels, {"problems": problems}, "records"
        ),
        "<h2>partitions</h2>",
        html_report.table(rows, ["" if p.ok else "bad" for p in verdict.partitions]),
        "<h2>offending records (the first examples of each problem)</h2>",
        html_report.table(_sample_rows(verdict)),
        "<h2>consumer groups (committed offsets after translation)</h2>",
        html_report.table(group_rows, ["" if g.drift == 0 else "bad" for g in verdict.groups]),
    ]
    verdict.html_path = stem.with_suffix(".html")
    page = html_report.page("Migration parity", sections, data)
    verdict.html_path.write_text(page)
    publish_report(plan, data, page)


def publish_report(plan: ParityPlan, data: dict[str, Any], page: str) -> None:
    """A copy of the report in the gateway's data directory, for its console
    (gateway/tool_reports.py); nothing when the directory is not known or not writable."""
    if not plan.link.data_dir:
        return
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%f")[:-3] + "Z"
    stem = tool_reports.parity_stem(Path(plan.link.data_dir), stamp, plan.name)
    try:
        stem.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        (stem.parent / f"{stem.name}.html").write_text(page)  # first: the JSON lists it
        tool_reports.write_json(stem.parent, stem.name + ".json", data)
        tool_reports.keep_newest(stem.parent)
    except OSError as exc:
        log.warning("parity report not published to %s: %s", stem.parent, exc)


def print_verdict(verdict: Verdict, console: Console) -> None:
    table = Table(title="parity")
    for column in ("partition", "source", "target", "problems"):
        table.add_column(column, justify="left" if column in ("partition", "problems") else "right")
    for p in verdict.partitions:
        found = ", ".join(
            f"{kind} {p.counts[kind]} (first at {_first(p, kind)})"
            for kind in KINDS
            if p.counts[kind]
        )
        table.add_row(
            f"{p.topic}-{p.partition}",
            f"{p.source_records:,}",
            f"{p.target_records:,}",
            found or "[green]none[/]",
        )
    console.print(table)
    for p in verdict.partitions:
        for kind, pairs in sorted(p.examples.items()):
            source, target = pairs[0]
            for side, offset in (("source", source), ("target", target)):
                sample = verdict.sample(p, side, offset)
                if sample is not None:
                    console.print(f"{p.topic}-{p.partition} {kind} {side} {sample.line()}")
    for g in verdict.groups:
        if g.drift != 0:
            console.print(
                f"[red]group {g.group}[/] {g.topic}-{g.partition}: committed {g.target} on the "
                f"gateway, expected {g.expected} (source {g.source})"
            )
    word = "[green]PARITY[/]" if verdict.passed else "[red]NO PARITY[/]"
    console.print(f"{word} in {verdict.seconds:.1f} s; report {verdict.html_path}")


def _first(report: PartitionReport, kind: str) -> str:
    pairs = report.examples.get(kind) or []
    if not pairs:
        return "?"
    source, target = pairs[0]
    parts = []
    if source is not None:
        parts.append(f"source offset {source}")
    if target is not None:
        parts.append(f"target offset {target}")
    return ", ".join(parts)
