"""Migration and parity at scale: tansu as the old cluster, a real gateway, the real
commands, for several record counts in one run.

    python -m bench.migration_parity [--records 1000000,10000000] [--partitions 6]
        [--parity-clients native,pulsar-client] [--no-kafka-format] [--no-parity]

For each count: fill tansu, `pulsar-gateway migrate` into a gateway whose topics use the
default `pulsar` entry format and into a second one with `--entry-format kafka`, then
`pulsar-gateway parity` on the first, once per Pulsar client parity reads it through
(`--pulsar-client`: the gateway's own wire client, and pulsar-client); prints records/s
for each copy beside the first gateway's own Produce rate (confluent-kafka, acks=all, the
same record shape) and beside pulsar-client writing the same records straight to the same
broker (issue 32's peer: one batching Python producer, key, property and event time per
record), all measured in the same run, parity's runtime, records/s and the Spark
processes' peak memory per client, and how they grow with the record count (time
linearly, memory not at all: the job streams). The machine's load average is recorded
beside each size. Memory over time too: each command's process tree (Spark's driver and
workers for parity) and the gateway sampled once a second while it runs, with the last
third's peak over the middle third's (about 1: flat while the records go through).
`--no-parity` measures the copies only (parity's runtime is another measurement, and at
scale it takes longer than the copy). Writes reports/migration-parity.{json,html}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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

from bench.kafka_throughput import cpu_seconds, create_topic, kafka_produce
from harness.gateway_process import REPO, GatewayProcess
from harness.tansu_process import TansuProcess
from pulsar_gateway.tools import html_report
from pulsar_gateway.tools.gateway_link import discover

console = Console()
KAFKA_FORMAT = ("--entry-format", "kafka")
# records the gateway's own Produce rate is measured with (its ratio's denominator)
PRODUCE_REFERENCE = 300_000
RSS_EVERY = 1.0  # seconds between two samples of a command's memory
CPU_EVERY = 0.25  # ... and of its processes' CPU (a process's last moments are not seen)


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


def pulsar_direct_produce(service_url: str, records: int, size: int) -> float:
    """Seconds pulsar-client takes to write `records` records of the migrated shape (key,
    one property for the header, event time, `size`-byte value) to one topic of the
    gateway's broker: a batching producer, no callback, flushed at the end."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"persistent://public/default/bench-direct-{time.time_ns()}"
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        block_if_queue_full=True,
        batching_max_publish_delay_ms=5,
        batching_max_messages=10000,
        batching_max_allowed_size_in_bytes=1024 * 1024,
        max_pending_messages=100000,
    )
    payload = b"v" * size
    stamp = int(time.time() * 1000)
    started = time.perf_counter()
    for i in range(records):
        producer.send_async(
            payload,
            None,
            properties={"n": str(i)},
            partition_key=str(i % 1000),
            event_timestamp=stamp,
        )
    producer.flush()
    seconds = time.perf_counter() - started
    client.close()
    return seconds


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_command(
    args: list[str],
    timeline: list[tuple[float, float, float]] | None = None,
    gateway: int = 0,
    cpu: dict[int, float] | None = None,
) -> float:
    """Seconds the command ran. With `timeline`, every RSS_EVERY seconds one more (seconds
    since start, MiB of the command and every process below it, MiB of `gateway`): whether
    memory stays flat while the records go through, not only its peak. With `cpu`, each
    process of the tree's CPU seconds as last seen, every CPU_EVERY seconds (Spark's JVM
    is not waited for by its driver, so RUSAGE_CHILDREN misses it and its workers)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "pulsar_gateway.cli", *args], cwd=REPO)
    last = 0.0
    while True:
        try:
            returncode = process.wait(CPU_EVERY if cpu is not None else RSS_EVERY)
            break
        except subprocess.TimeoutExpired:
            tree = [process.pid, *_descendants(process.pid)]
            if cpu is not None:
                for pid in tree:
                    try:
                        cpu[pid] = cpu_seconds([pid])
                    except (OSError, IndexError):
                        pass  # gone since it was listed
            at = time.perf_counter() - started
            if timeline is not None and at - last >= RSS_EVERY - CPU_EVERY / 2:
                last = at
                tree_rss = sum(_rss(pid) for pid in tree)
                timeline.append(
                    (round(at, 1), round(tree_rss, 1), round(_rss(gateway), 1) if gateway else 0)
                )
    if returncode != 0:
        raise RuntimeError(f"{args[0]} exited {returncode}")
    return time.perf_counter() - started


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                pids = [int(child) for child in children.read_text().split()]
            except OSError:
                continue
            found += pids
            todo += pids
    return found


def flatness(timeline: list[tuple[float, float, float]], column: int) -> float | None:
    """The last third's highest RSS over the middle third's: about 1 when memory is flat
    while the records go through (the first third holds start-up)."""
    values = [sample[column] for sample in timeline]
    if len(values) < 6:
        return None
    third = len(values) // 3
    middle = max(values[third : 2 * third])
    return round(max(values[2 * third :]) / middle, 2) if middle else None


def main_thread(pid: int) -> tuple[float, float]:
    """Seconds the process's main thread (the gateway's event loop) has run so far, and
    has been ready to run but waited for a core (/proc/<pid>/task/<pid>/schedstat)."""
    ran, waited, _slices = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(ran) / 1e9, int(waited) / 1e9


def children_cpu() -> float:
    """CPU seconds this process's finished children have used (a command run to its end)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def own_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def one_size(
    records: int,
    partitions: int,
    size: int,
    scratch: Path,
    parity_clients: list[str],
    kafka_format_too: bool,
) -> dict[str, Any]:
    tansu = TansuProcess().start()
    gateway = GatewayProcess(scratch / f"gw-{records}").start()
    kafka_format = GatewayProcess(scratch / f"gw-kafka-{records}") if kafka_format_too else None
    topic = "migrated"
    try:
        console.rule(f"{records:,} records")
        row: dict[str, Any] = {"records": records, "load_before": load_average()}
        fill(tansu.bootstrap, topic, partitions, records, size)
        common = _link(tansu, gateway, topic)
        # CPU per record beside the rates: on a machine shared with other work the rates
        # swing with the load; the CPU each side spends a record much less
        servers = [gateway.process.pid, gateway.broker_pid()]
        before = cpu_seconds(servers[:1]), cpu_seconds(servers[1:]), children_cpu()
        main_before = main_thread(gateway.process.pid)
        migrate_rss: list[tuple[float, float, float]] = []
        migrate_s = run_command(["migrate", *common], migrate_rss, gateway.process.pid)
        main_after = main_thread(gateway.process.pid)
        ran, waited = main_after[0] - main_before[0], main_after[1] - main_before[1]
        gateway_cpu = cpu_seconds(servers[:1]) - before[0]
        broker_cpu = cpu_seconds(servers[1:]) - before[1]
        migrate_rps = records / migrate_s
        row["load_after_migrate"] = load_average()
        service_url = discover(f"http://127.0.0.1:{gateway.metrics_port}").service_url
        broker_before, direct_before = cpu_seconds(servers[1:]), own_cpu()
        direct_s = pulsar_direct_produce(service_url, records, size)
        direct_cpu = own_cpu() - direct_before
        direct_broker = cpu_seconds(servers[1:]) - broker_before
        per = 1e6 / records
        row.update(
            {
                "migrate_rss_timeline": migrate_rss,  # (s, migrate MiB, gateway MiB)
                "migrate_tool_rss_late_over_middle": flatness(migrate_rss, 1),
                "migrate_gateway_rss_late_over_middle": flatness(migrate_rss, 2),
                "migrate_seconds": round(migrate_s, 1),
                "migrate_records_per_s": round(migrate_rps),
                "pulsar_client_direct_records_per_s": round(records / direct_s),
                "migrate_vs_pulsar_client_direct": round(migrate_rps * direct_s / records, 2),
                # the migrate command itself, the gateway, its broker
                "migrate_tool_cpu_us_per_record": round((children_cpu() - before[2]) * per, 1),
                "migrate_gateway_cpu_us_per_record": round(gateway_cpu * per, 1),
                "migrate_broker_cpu_us_per_record": round(broker_cpu * per, 1),
                # the share of the migrate command's run the gateway's event loop ran, and
                # was ready to run but waited for a core (the rest it had nothing to do)
                "migrate_gateway_loop_running": round(ran / migrate_s, 2),
                "migrate_gateway_loop_waiting_for_a_core": round(waited / migrate_s, 2),
                "pulsar_client_direct_cpu_us_per_record": round(direct_cpu * per, 1),
                "pulsar_client_direct_broker_cpu_us_per_record": round(direct_broker * per, 1),
            }
        )
        if kafka_format is not None:
            kafka_format.start()
            kafka_s = run_command(["migrate", *_link(tansu, kafka_format, topic), *KAFKA_FORMAT])
            kafka_format.stop()
            row["migrate_kafka_format_records_per_s"] = round(records / kafka_s)
        reference = min(records, PRODUCE_REFERENCE)
        create_topic(gateway.bootstrap, partitions, "produce-reference")
        produce_s = kafka_produce(gateway.bootstrap, "produce-reference", reference, size)
        row["gateway_produce_records_per_s"] = round(reference / produce_s)
        row["migrate_vs_produce"] = round(migrate_rps * produce_s / reference, 2)
        for client in parity_clients:
            report = scratch / f"parity-{records}-{client}"
            parity_rss: list[tuple[float, float, float]] = []
            parity_cpu: dict[int, float] = {}
            servers_before = cpu_seconds(servers)
            parity_s = run_command(
                ["parity", *common, "--pulsar-client", client, "--report", str(report)],
                parity_rss,
                cpu=parity_cpu,
            )
            verdict = json.loads(report.with_suffix(".json").read_text())
            name = client.replace("-", "_")
            # parity's processes (driver, Spark's JVM, its Python workers), then the
            # gateway and pulsar-lite it reads; the verdict's own seconds per phase
            row[f"parity_{name}_cpu_us_per_record"] = round(sum(parity_cpu.values()) * per, 1)
            servers_cpu = cpu_seconds(servers) - servers_before
            row[f"parity_{name}_gateway_and_broker_cpu_us_per_record"] = round(servers_cpu * per, 2)
            row[f"parity_{name}_phases_seconds"] = verdict.get("phases_seconds")
            row[f"parity_{name}_seconds"] = round(parity_s, 1)
            row[f"parity_{name}_records_per_s"] = round(records / parity_s)
            row[f"parity_{name}_verdict"] = verdict["verdict"]
            for key, value in verdict["spark"].items():
                if key != "master":
                    row[f"parity_{name}_{key}"] = value
            row[f"load_after_parity_{name}"] = load_average()
            row[f"parity_{name}_rss_late_over_middle"] = flatness(parity_rss, 1)
            row[f"parity_{name}_rss_timeline"] = parity_rss
        row["gateway_rss_mib"] = round(_rss(gateway.process.pid), 1)
        return row
    finally:
        gateway.stop()
        if kafka_format is not None:
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
    parser.add_argument(
        "--parity-clients",
        default="native,pulsar-client",
        help="the Pulsar clients parity reads the gateway through, one run each",
    )
    parser.add_argument(
        "--no-kafka-format", action="store_true", help="skip the migration into the kafka format"
    )
    parser.add_argument("--no-parity", action="store_true", help="measure the copies only")
    args = parser.parse_args()
    counts = [int(n) for n in args.records.split(",")]
    clients = [c.strip() for c in args.parity_clients.split(",") if c.strip()]
    if args.no_parity:
        clients = []
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for count in counts:
            rows.append(
                one_size(
                    count,
                    args.partitions,
                    args.size,
                    Path(scratch),
                    clients,
                    not args.no_kafka_format,
                )
            )
            # each size as it ends: a long run stopped early still leaves what it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            partial = args.out.parent / f"{args.out.name}.partial.json"
            partial.write_text(json.dumps(rows, indent=2))
            console.print(rows[-1])
    base = rows[0]
    for row in rows:
        scale = row["records"] / base["records"]
        row["migrate_time_growth"] = round(row["migrate_seconds"] / base["migrate_seconds"], 2)
        for client in clients:
            name = f"parity_{client.replace('-', '_')}"
            growth = row[f"{name}_seconds"] / base[f"{name}_seconds"]
            row[f"{name}_time_growth"] = round(growth, 2)
        row["record_growth"] = scale
    table = Table(title="migration and parity (one column per record count)")
    table.add_column("metric")
    for row in rows:
        table.add_column(f"{row['records']:,}", justify="right")
    for metric in rows[0]:
        if metric.endswith("_timeline"):
            continue  # in the JSON and the chart
        values = [row.get(metric, "") for row in rows]
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
                **{
                    f"parity ({c})": [r[f"parity_{c.replace('-', '_')}_seconds"] for r in rows]
                    for c in clients
                },
            },
            "s",
        ),
        html_report.grouped_bar_chart(
            "records/s",
            labels,
            {
                "migrate (pulsar format)": [r["migrate_records_per_s"] for r in rows],
                "pulsar-client direct, same broker": [
                    r["pulsar_client_direct_records_per_s"] for r in rows
                ],
                "gateway produce (pulsar format)": [
                    r["gateway_produce_records_per_s"] for r in rows
                ],
                **(
                    {}
                    if args.no_kafka_format
                    else {
                        "migrate (kafka format)": [
                            r["migrate_kafka_format_records_per_s"] for r in rows
                        ]
                    }
                ),
                **{
                    f"parity ({c})": [
                        r[f"parity_{c.replace('-', '_')}_records_per_s"] for r in rows
                    ]
                    for c in clients
                },
            },
            "rec/s",
        ),
        html_report.table(
            [{k: v for k, v in row.items() if not k.endswith("_timeline")} for row in rows]
        ),
    ]
    for process, key in (("Python workers", "python_workers"), ("Spark driver JVM", "driver_jvm")):
        if clients:
            peaks = {
                c: [r[f"parity_{c.replace('-', '_')}_{key}_peak_rss_mib"] for r in rows]
                for c in clients
            }
            chart = html_report.grouped_bar_chart(
                f"peak memory of parity's {process} (MiB)", labels, peaks, "MiB"
            )
            sections.insert(-1, chart)
    args.out.with_suffix(".html").write_text(
        html_report.page("Migration and parity at scale", sections, results)
    )
    console.print(f"wrote {args.out}.json and {args.out}.html")


if __name__ == "__main__":
    main()
