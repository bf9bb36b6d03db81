"""Migration and parity at scale: tansu as the old cluster, a real gateway, the real
commands, for several record counts in one run.

    python -m bench.migration_parity [--records 1000000,10000000] [--partitions 6]

For each count: fill tansu, `pulsar-gateway migrate` into a gateway whose topics use the
default `pulsar` entry format and into a second one with `--entry-format kafka`, then
`pulsar-gateway parity` on the first; prints records/s for each copy beside the first
gateway's own Produce rate (confluent-kafka, acks=all, the same record shape, measured in
the same run), parity runtime and the Spark processes' peak memory, and how both grow
with the record count (they should grow linearly: the job streams). Writes
reports/migration-parity.{json,html}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from bench.kafka_throughput import create_topic, kafka_produce
from harness.gateway_process import REPO, GatewayProcess
from harness.tansu_process import TansuProcess
from pulsar_gateway.tools import html_report

console = Console()
KAFKA_FORMAT = ("--entry-format", "kafka")
# records the gateway's own Produce rate is measured with (its ratio's denominator)
PRODUCE_REFERENCE = 300_000


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            "compression.type": "lz4",
        }
    )
    payload = b"v" * size
    started = time.perf_counter()
    with Progress(
        TextColumn("filling tansu"), BarColumn(), MofNCompleteColumn(), console=console
    ) as progress:
        task = progress.add_task("fill", total=records)
        for i in range(records):
            while True:
                try:
                    producer.produce(
                        topic, payload, str(i % 1000).encode(), headers=[("n", str(i).encode())]
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 20000 == 0:
                producer.poll(0)
                progress.update(task, completed=i)
        assert producer.flush(600) == 0
        progress.update(task, completed=records)
    return time.perf_counter() - started


def run_command(args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pulsar_gateway.cli", *args], cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {done.returncode}")
    return time.perf_counter() - started


def one_size(records: int, partitions: int, size: int, scratch: Path) -> dict[str, Any]:
    tansu = TansuProcess().start()
    gateway = GatewayProcess(scratch / f"gw-{records}").start()
    kafka_format = GatewayProcess(scratch / f"gw-kafka-{records}").start()
    topic = "migrated"
    try:
        console.rule(f"{records:,} records")
        fill(tansu.bootstrap, topic, partitions, records, size)
        common = _link(tansu, gateway, topic)
        migrate_s = run_command(["migrate", *common])
        kafka_s = run_command(["migrate", *_link(tansu, kafka_format, topic), *KAFKA_FORMAT])
        kafka_format.stop()
        reference = min(records, PRODUCE_REFERENCE)
        create_topic(gateway.bootstrap, partitions, "produce-reference")
        produce_s = kafka_produce(gateway.bootstrap, "produce-reference", reference, size)
        report = scratch / f"parity-{records}"
        parity_s = run_command(["parity", *common, "--report", str(report)])
        verdict = json.loads(report.with_suffix(".json").read_text())
        migrate_rps = records / migrate_s
        return {
            "records": records,
            "migrate_seconds": round(migrate_s, 1),
            "migrate_records_per_s": round(migrate_rps),
            "gateway_produce_records_per_s": round(reference / produce_s),
            "migrate_vs_produce": round(migrate_rps * produce_s / reference, 2),
            "migrate_kafka_format_records_per_s": round(records / kafka_s),
            "parity_seconds": round(parity_s, 1),
            "parity_verdict": verdict["verdict"],
            **verdict["spark"],
            "gateway_rss_mib": round(_rss(gateway.process.pid), 1),
        }
    finally:
        gateway.stop()
        kafka_format.stop()
        tansu.stop()


def _link(tansu: TansuProcess, gateway: GatewayProcess, topic: str) -> list[str]:
    """The arguments that point migrate and parity at the source and at this gateway."""
    health = f"http://127.0.0.1:{gateway.metrics_port}"
    return [
        *("--source", tansu.bootstrap, "--target", gateway.bootstrap),
        *("--topics", topic, "--gateway-health", health),
    ]


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", default="1000000,10000000")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("reports/migration-parity"))
    args = parser.parse_args()
    counts = [int(n) for n in args.records.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for count in counts:
            rows.append(one_size(count, args.partitions, args.size, Path(scratch)))
    base = rows[0]
    for row in rows:
        scale = row["records"] / base["records"]
        row["migrate_time_growth"] = round(row["migrate_seconds"] / base["migrate_seconds"], 2)
        row["parity_time_growth"] = round(row["parity_seconds"] / base["parity_seconds"], 2)
        row["record_growth"] = scale
    table = Table(title="migration and parity (one column per record count)")
    table.add_column("metric")
    for row in rows:
        table.add_column(f"{row['records']:,}", justify="right")
    for metric in rows[0]:
        values = [row[metric] for row in rows]
        table.add_row(
            metric.replace("_", " "), *(f"{v:,}" if isinstance(v, int) else str(v) for v in values)
        )
    console.print(table)
    results = {
        "rows": rows,
        "partitions": args.partitions,
        "size": args.size,
        "environment": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    labels = [f"{r['records']:,}" for r in rows]
    sections = [
        html_report.grouped_bar_chart(
            "seconds by record count",
            labels,
            {
                "migrate": [r["migrate_seconds"] for r in rows],
                "parity": [r["parity_seconds"] for r in rows],
            },
            "s",
        ),
        html_report.grouped_bar_chart(
            "records/s",
            labels,
            {
                "migrate (pulsar format)": [r["migrate_records_per_s"] for r in rows],
                "gateway produce (pulsar format)": [
                    r["gateway_produce_records_per_s"] for r in rows
                ],
                "migrate (kafka format)": [r["migrate_kafka_format_records_per_s"] for r in rows],
            },
            "rec/s",
        ),
        html_report.grouped_bar_chart(
            "peak memory (MiB)",
            labels,
            {
                "Spark driver JVM": [r["driver_jvm_peak_rss_mib"] for r in rows],
                "Python workers": [r["python_workers_peak_rss_mib"] for r in rows],
            },
            "MiB",
        ),
        html_report.table(rows),
    ]
    args.out.with_suffix(".html").write_text(
        html_report.page("Migration and parity at scale", sections, results)
    )
    console.print(f"wrote {args.out}.json and {args.out}.html")


if __name__ == "__main__":
    main()
