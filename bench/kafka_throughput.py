"""Kafka produce and fetch throughput: the gateway (topics in the `pulsar` and in the
`kafka` entry format) beside tansu and beside pulsar-client writing straight to the
embedded broker, in one run, with ratios.

    python -m bench.kafka_throughput [--records 200000] [--size 100]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.report import bar_chart, write_report
from tests.support.gateway_process import GatewayProcess
from tests.support.tansu_process import TansuProcess

console = Console()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def kafka_produce(bootstrap: str, topic: str, records: int, size: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
        }
    )
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, str(i % 100).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return time.perf_counter() - start


def kafka_consume(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "session.timeout.ms": 6000,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    start = time.perf_counter()
    deadline = start + 300
    while count < records and time.perf_counter() < deadline:
        for msg in consumer.consume(10000, 1):
            if not msg.error():
                count += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if count < records:
        raise RuntimeError(f"consumed only {count} of {records}")
    return elapsed


def pulsar_direct(service_url: str, records: int, size: int) -> tuple[float, float]:
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"persistent://public/default/bench-direct-{time.time_ns()}"
    producer = client.create_producer(
        topic, batching_enabled=True, block_if_queue_full=True, batching_max_publish_delay_ms=5
    )
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(records):
        producer.send_async(payload, None, partition_key=str(i % 100))
    producer.flush()
    produce = time.perf_counter() - start
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=5000)
    start = time.perf_counter()
    seen = 0
    while seen < records:
        reader.read_next(10000)
        seen += 1
    consume = time.perf_counter() - start
    client.close()
    return produce, consume


def create_topic(
    bootstrap: str, partitions: int, name: str = "bench", config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("reports/kafka-throughput"))
    args = parser.parse_args()
    n, size, parts = args.records, args.size, args.partitions
    results: dict[str, Any] = {
        "records": n,
        "size": size,
        "partitions": parts,
        "peers": {},
        "environment": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    with tempfile.TemporaryDirectory() as scratch, Progress(console=console) as progress:
        task = progress.add_task("gateway", total=4)
        gateway = GatewayProcess(Path(scratch) / "gw").start()
        try:
            time.sleep(1)
            idle = rss_mib(gateway.process.pid)
            create_topic(gateway.bootstrap, parts)
            produce = kafka_produce(gateway.bootstrap, "bench", n, size)
            loaded = rss_mib(gateway.process.pid)
            progress.advance(task)
            consume = kafka_consume(gateway.bootstrap, "bench", parts, n)
            peak = max(loaded, rss_mib(gateway.process.pid))
            results["peers"]["gateway"] = {
                "produce_s": produce,
                "consume_s": consume,
                "rss_idle_mib": idle,
                "rss_load_mib": peak,
            }
            progress.advance(task)
            # the same, on a topic in the `kafka` entry format (a message per batch)
            create_topic(gateway.bootstrap, parts, "bench-kf", {"pulsar.entry.format": "kafka"})
            produce = kafka_produce(gateway.bootstrap, "bench-kf", n, size)
            consume = kafka_consume(gateway.bootstrap, "bench-kf", parts, n)
            results["peers"]["gateway, kafka format"] = {
                "produce_s": produce,
                "consume_s": consume,
                "rss_load_mib": max(peak, rss_mib(gateway.process.pid)),
            }
            progress.advance(task)
            direct_p, direct_c = pulsar_direct(f"pulsar://127.0.0.1:{gateway.broker_port}", n, size)
            results["peers"]["pulsar-client direct"] = {
                "produce_s": direct_p,
                "consume_s": direct_c,
            }
            progress.advance(task)
        finally:
            gateway.stop()
        task = progress.add_task("tansu", total=1)
        tansu = TansuProcess().start()
        try:
            bootstrap = tansu.bootstrap
            create_topic(bootstrap, parts)
            produce = kafka_produce(bootstrap, "bench", n, size)
            consume = kafka_consume(bootstrap, "bench", parts, n)
            results["peers"]["tansu"] = {
                "produce_s": produce,
                "consume_s": consume,
                "rss_load_mib": rss_mib(tansu.process.pid),
            }
            progress.advance(task)
        finally:
            tansu.stop()
    table = Table(title=f"{n:,} records x {size} B, {parts} partitions")
    rows = []
    for column in ("peer", "produce rec/s", "produce MB/s", "fetch rec/s", "fetch MB/s"):
        table.add_column(column, justify="right")
    for peer, numbers in results["peers"].items():
        numbers["produce_rps"] = n / numbers["produce_s"]
        numbers["consume_rps"] = n / numbers["consume_s"]
        row = {
            "peer": peer,
            "produce rec/s": f"{numbers['produce_rps']:,.0f}",
            "produce MB/s": f"{numbers['produce_rps'] * size / 1e6:.1f}",
            "fetch rec/s": f"{numbers['consume_rps']:,.0f}",
            "fetch MB/s": f"{numbers['consume_rps'] * size / 1e6:.1f}",
        }
        rows.append(row)
        table.add_row(*row.values())
    console.print(table)
    gw = results["peers"]["gateway"]
    ratios = {
        "gateway/tansu produce": gw["produce_rps"] / results["peers"]["tansu"]["produce_rps"],
        "gateway/tansu fetch": gw["consume_rps"] / results["peers"]["tansu"]["consume_rps"],
        "gateway/direct produce": gw["produce_rps"]
        / results["peers"]["pulsar-client direct"]["produce_rps"],
        "gateway/direct fetch": gw["consume_rps"]
        / results["peers"]["pulsar-client direct"]["consume_rps"],
    }
    kf = results["peers"]["gateway, kafka format"]
    ratios["gateway kafka format/tansu produce"] = (
        kf["produce_rps"] / results["peers"]["tansu"]["produce_rps"]
    )
    ratios["gateway kafka format/tansu fetch"] = (
        kf["consume_rps"] / results["peers"]["tansu"]["consume_rps"]
    )
    results["ratios"] = ratios
    for name, ratio in ratios.items():
        console.print(f"{name}: {ratio:.2f}x")
    console.print(
        f"gateway RSS: idle {gw['rss_idle_mib']:.0f} MiB, under load {gw['rss_load_mib']:.0f} MiB"
    )
    charts = [
        bar_chart(
            "Produce (records/s)",
            [(p, v["produce_rps"]) for p, v in results["peers"].items()],
            "rec/s",
        ),
        bar_chart(
            "Fetch (records/s)",
            [(p, v["consume_rps"]) for p, v in results["peers"].items()],
            "rec/s",
        ),
    ]
    json_path, html_path = write_report(args.out, "Kafka throughput", results, charts, rows)
    console.print(f"report: {json_path} and {html_path}")


if __name__ == "__main__":
    main()
