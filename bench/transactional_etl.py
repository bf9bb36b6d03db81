"""A consume-transform-produce ETL through the gateway, exactly once: how fast, whether the
transaction APIs keep answering under it, and whether anything was lost, doubled or reordered.

    python -m bench.transactional_etl [--records 500000] [--members 3] [--partitions 6]

--records records are produced to an input topic; --members worker processes, one consumer
group, each with a transactional producer (confluent-kafka), read a batch, write each record
transformed to the same partition of an output topic, send the batch's offsets to the
transaction and commit it. The gateway's own request timings (`gateway_request_seconds`)
give each transaction API's p50/p99; the workers time init_transactions and
commit_transaction as the client sees them. Afterwards a read_committed consumer reads the
output: every input record exactly once, in input order per partition. The gateway's log is
searched for the warnings and tracebacks of issue 31 (stalled or gapped tailers, unanswered
requests). Writes reports/transactional-etl.{json,html}.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from bench.report import bar_chart, write_report
from harness.gateway_process import GatewayProcess

console = Console()
APIS = ("InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn")
PROBLEMS = (
    "tailer stalled",
    "reader gap",
    "stopped short",
    "Traceback",
    "InvalidStateError",
    "failed; closing its connection",
)


def _produce_input(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for number in range(records):
        partition = number % partitions
        value = b"%d:%d" % (partition, number // partitions)
        while True:
            try:
                producer.produce(topic, value, partition=partition)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("input not produced")


def _worker(
    bootstrap: str,
    index: int,
    topics: tuple[str, str],
    pacing: tuple[int, int],
    done: Any,
    stop: Any,
    timings: Any,
) -> None:
    source, target = topics
    batch_size, reinit_every = pacing
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"etl-{source}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
        }
    )
    inits: list[float] = []

    def new_producer() -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"etl-{source}-{index}",
                "linger.ms": 5,
            }
        )
        started = time.perf_counter()
        producer.init_transactions(60)
        inits.append(time.perf_counter() - started)
        return producer

    producer = new_producer()
    commits: list[float] = []
    aborts = 0
    consumer.subscribe([source])
    while not stop.is_set():
        batch = [m for m in consumer.consume(batch_size, 0.2) if not m.error()]
        if not batch:
            continue
        if reinit_every and commits and len(commits) % reinit_every == 0:
            producer.flush(30)
            producer = new_producer()
        producer.begin_transaction()
        for message in batch:
            producer.produce(target, message.value().upper(), partition=message.partition())
            producer.poll(0)
        try:
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            started = time.perf_counter()
            producer.commit_transaction(60)
            commits.append(time.perf_counter() - started)
        except KafkaException as exc:
            aborts += 1
            if not exc.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(60)
            # back to what the group last committed: the batch is done again
            committed = consumer.committed(consumer.assignment(), 30)
            for partition in committed:
                if partition.offset >= 0:
                    consumer.seek(partition)
            continue
        with done.get_lock():
            done.value += len(batch)
    consumer.close()
    timings.put({"member": index, "init": inits, "commit": commits, "aborts": aborts})


def _read_output(bootstrap: str, topic: str, partitions: int, records: int) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partitions)])
    seen: set[bytes] = set()
    last = dict.fromkeys(range(partitions), -1)
    duplicated = out_of_order = count = 0
    deadline = time.monotonic() + 120
    while count < records and time.monotonic() < deadline:
        for message in consumer.consume(5000, 1):
            if message.error():
                continue
            count += 1
            value = message.value()
            if value in seen:
                duplicated += 1
            seen.add(value)
            sequence = int(value.split(b":")[1])
            if sequence < last[message.partition()]:
                out_of_order += 1
            last[message.partition()] = sequence
    consumer.close()
    return {
        "read": count,
        "distinct": len(seen),
        "missing": records - len(seen),
        "duplicated": duplicated,
        "out_of_order": out_of_order,
    }


def _request_quantiles(metrics_text: str) -> dict[str, dict[str, float]]:
    """p50 and p99 (bucket upper bounds) and counts of the transaction APIs' timings."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "gateway_request_seconds":
            continue
        for sample in family.samples:
            api = sample.labels.get("api")
            if sample.name.endswith("_bucket") and api in APIS:
                buckets.setdefault(api, []).append((float(sample.labels["le"]), sample.value))
    out = {}
    for api, points in buckets.items():
        points.sort()
        total = points[-1][1]
        if not total:
            continue
        quantile = {}
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            quantile[name] = next(le for le, count in points if count >= q * total)
        out[api] = {**quantile, "count": total}
    return out


def _problems(log: Path) -> dict[str, int]:
    text = log.read_text(errors="replace")
    return {marker: text.count(marker) for marker in PROBLEMS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--batch", type=int, default=500, help="records per transaction at most")
    parser.add_argument(
        "--reinit-every",
        type=int,
        default=50,
        help="each member replaces its producer (a new InitProducerId) after this many "
        "transactions, as a restarted worker does (0: never)",
    )
    parser.add_argument("--out", default="reports/transactional-etl")
    args = parser.parse_args()
    gateway = GatewayProcess(Path(tempfile.mkdtemp(prefix="etl-")))
    gateway.start()
    source, target = f"etl-in-{uuid.uuid4().hex[:6]}", f"etl-out-{uuid.uuid4().hex[:6]}"
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        for topic in (source, target):
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
        console.print(f"producing {args.records} input records")
        _produce_input(gateway.bootstrap, source, args.records, args.partitions)
        context = multiprocessing.get_context("spawn")
        done, stop, timings = context.Value("q", 0), context.Event(), context.Queue()
        workers = [
            context.Process(
                target=_worker,
                args=(
                    gateway.bootstrap,
                    index,
                    (source, target),
                    (args.batch, args.reinit_every),
                    done,
                    stop,
                    timings,
                ),
            )
            for index in range(args.members)
        ]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        while done.value < args.records:
            time.sleep(1)
            console.print(f"  {done.value:>9} of {args.records} committed", highlight=False)
            if not any(worker.is_alive() for worker in workers):
                raise RuntimeError("every worker died")
        seconds = time.perf_counter() - started
        stop.set()
        members = [timings.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(60)
        verdict = _read_output(gateway.bootstrap, target, args.partitions, args.records)
        quantiles = _request_quantiles(gateway.metrics())
        problems = _problems(gateway.log_path)
    finally:
        gateway.stop()
    commits = sorted(t for member in members for t in member["commit"])
    inits = sorted(t for member in members for t in member["init"])
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "records": args.records,
        "members": args.members,
        "partitions": args.partitions,
        "seconds": seconds,
        "records_per_second": args.records / seconds,
        "transactions": len(commits),
        "aborts": sum(member["aborts"] for member in members),
        "client_commit_p50_s": statistics.median(commits) if commits else None,
        "client_commit_p99_s": commits[int(len(commits) * 0.99)] if commits else None,
        "client_init_max_s": max(inits) if inits else None,
        "server": quantiles,
        "output": verdict,
        "log_problems": problems,
    }
    # printed under the charts: what was read back and what the log held
    result["environment"] = {
        "machine": result["machine"],
        "records/s": round(result["records_per_second"]),
        "transactions": result["transactions"],
        "output (read_committed)": verdict,
        "gateway log": problems,
    }
    table = Table(title="transactional ETL through the gateway")
    for column in ("API", "count", "p50 (s)", "p99 (s)"):
        table.add_column(column)
    for api, q in quantiles.items():
        table.add_row(api, f"{q['count']:.0f}", f"{q['p50']:g}", f"{q['p99']:g}")
    console.print(table)
    console.print(result)
    charts = [
        bar_chart(
            "p99 of each transaction API at the gateway (bucket bound)",
            [(api, q["p99"] * 1000) for api, q in quantiles.items()],
            "ms",
        ),
        bar_chart(
            "the client's view",
            [
                ("commit_transaction p50", (result["client_commit_p50_s"] or 0) * 1000),
                ("commit_transaction p99", (result["client_commit_p99_s"] or 0) * 1000),
                ("init_transactions max", (result["client_init_max_s"] or 0) * 1000),
            ],
            "ms",
        ),
    ]
    rows = [
        {"API": api, "count": int(q["count"]), "p50 s": q["p50"], "p99 s": q["p99"]}
        for api, q in quantiles.items()
    ]
    write_report(Path(args.out), "Transactional ETL through the gateway", result, charts, rows)


if __name__ == "__main__":
    main()
