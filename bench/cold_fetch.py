"""Fetch after a restart (every record from Pulsar, through the history readers) beside
pulsar-client readers in the same run, with ratios: the narrow measure behind issue 32's
"fetch after a restart >= 1.5x a pulsar-client reader".

One gateway writes `--records` records of `--size` bytes (keyed, confluent-kafka, acks=all)
to a `--partitions` topic once. Then, `--rounds` times, for each `[pulsar] client` setting:
the gateway is restarted with that setting and a Kafka consumer fetches everything from
offset 0 (nothing is in the tail cache); then, on the same broker, two pulsar-client peers:
a reader of the very topics the gateway stored (the same data), and the bare batched
producer and reader of `kafka_throughput.pulsar_direct` (the peer `make bench` uses). The
gateway's CPU and its broker's are reported per record, and the Kafka consumer's (this
process: on a loaded machine the ratio follows the CPU each side spends a record). The
writer's tail fetch, right after the produce, is measured once. `--format kafka` stores
the topic in the `kafka` entry format: what serving stored batches costs, for scale.
`--headers` gives every record two headers (as `make bench`'s headered produce does): a
headered record is stored with its headers as a JSON property, which fetch parses back.
`--idempotent` produces with `enable.idempotence=true` (Java clients' default since 3.0):
every stored record then carries the producer's stamp (storage/kafka/producer_state.py).
`--profile` records py-spy under each fetch and prints the functions holding the most
samples (collapsed stacks beside `--out`). `--out` gets the run as JSON and as one
self-contained HTML page with charts.

    python -m bench.cold_fetch [--records 100000] [--rounds 2] [--headers] [--idempotent]
        [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.kafka_throughput import (
    cpu_seconds,
    create_topic,
    kafka_consume,
    kafka_produce,
    measured,
    pulsar_direct,
)
from bench.native_produce import CHOICES, print_numbers, profiled, summarise
from harness.gateway_process import GatewayProcess
from pulsar_gateway.storage.kafka.whole_entry import HOT_MODULES
from pulsar_gateway.tools.html_report import grouped_bar_chart, page, table

# the topic's configs for each `--format`
FORMATS: dict[str, dict[str, str]] = {
    "pulsar": {},
    "kafka": {"pulsar.entry.format": "kafka"},
}


def partition_ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def read_stored(service_url: str, topic: str, ends: list[int]) -> tuple[float, float]:
    """pulsar-client readers of the gateway's own partition topics, one after another, each
    to its record count: (seconds, this process's CPU seconds)."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    cpu = time.process_time()
    start = time.perf_counter()
    for partition, end in enumerate(ends):
        reader = client.create_reader(
            f"persistent://public/default/{topic}-partition-{partition}",
            pulsar.MessageId.earliest,
            receiver_queue_size=5000,
        )
        for _ in range(end):
            reader.read_next(10000)
        reader.close()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    client.close()
    return seconds, cpu


def tail_fetch(writer: GatewayProcess, partitions: int, n: int) -> dict[str, float]:
    """The fetch right after the produce, from the writer's tail cache (as a consumer keeping
    up reads), for "tail fetch no slower than today"."""
    assert writer.process is not None
    cpu: dict[str, float] = {}
    load = os.getloadavg()[0]
    with measured([writer.process.pid], cpu, "gateway"):
        consumer_cpu = time.process_time()
        seconds = kafka_consume(writer.bootstrap, "bench", partitions, n)
        consumer_cpu = time.process_time() - consumer_cpu
    return {
        "load_average": load,
        "tail_fetch_rps": n / seconds,
        "gateway_cpu_us_per_record": cpu["gateway"] * 1e6 / n,
        "consumer_cpu_us_per_record": consumer_cpu * 1e6 / n,
    }


def one_round(
    choice: str, data: Path, args: argparse.Namespace, ends: list[int], tag: str
) -> dict[str, Any]:
    n = sum(ends)
    gateway = GatewayProcess(data, extra=["--pulsar-client", choice]).start()
    try:
        time.sleep(1)
        assert gateway.process is not None
        gw_pid, broker_pid = gateway.process.pid, gateway.broker_pid()
        cpu: dict[str, float] = {}
        collapsed = args.out.with_name(f"{args.out.name}-{tag}.txt") if args.profile else None
        load = os.getloadavg()[0]
        with (
            profiled(gw_pid, collapsed),
            measured([gw_pid], cpu, "gateway"),
            measured([broker_pid], cpu, "broker"),
        ):
            consumer_cpu = time.process_time()
            seconds = kafka_consume(gateway.bootstrap, "bench", args.partitions, n)
            consumer_cpu = time.process_time() - consumer_cpu
        result: dict[str, Any] = {
            "load_average": load,
            "cold_fetch_rps": n / seconds,
            "gateway_cpu_us_per_record": cpu["gateway"] * 1e6 / n,
            "broker_cpu_us_per_record": cpu["broker"] * 1e6 / n,
            # the Kafka consumer (this process: librdkafka's threads and the Python loop)
            "consumer_cpu_us_per_record": consumer_cpu * 1e6 / n,
        }
        service_url = f"pulsar://127.0.0.1:{gateway.broker_port}"
        if args.format == "pulsar":  # a `kafka`-format entry is a batch, not a record
            before = cpu_seconds([broker_pid])
            try:
                stored_s, stored_cpu = read_stored(service_url, "bench", ends)
            except Exception as exc:  # noqa: BLE001 - a pulsar-client read that stalls
                result["stored_reader_failed"] = repr(exc)
            else:
                result["stored_reader_rps"] = n / stored_s
                result["stored_reader_cpu_us_per_record"] = stored_cpu * 1e6 / n
                result["stored_reader_broker_cpu_us_per_record"] = (
                    (cpu_seconds([broker_pid]) - before) * 1e6 / n
                )
                result["vs_stored_reader"] = result["cold_fetch_rps"] / result["stored_reader_rps"]
        try:
            _produce, direct_read = pulsar_direct(service_url, n, args.size)
        except Exception as exc:  # noqa: BLE001 - a pulsar-client read that stalls
            result["direct_reader_failed"] = repr(exc)
        else:
            result["direct_read_rps"] = n / direct_read
            result["vs_direct_reader"] = result["cold_fetch_rps"] / result["direct_read_rps"]
        if collapsed is not None and collapsed.exists():
            result["profile"] = summarise(collapsed, top=20)
        return result
    finally:
        gateway.stop()


def report(results: dict[str, Any]) -> str:
    """The run as one self-contained page: each round's rates beside its peers' (same
    broker, same run), the ratios, and CPU per record of every process."""
    rounds = [
        (f"round {number}, {choice}", numbers)
        for number, round_results in enumerate(results["rounds"])
        for choice, numbers in round_results.items()
    ]
    labels = [label for label, _ in rounds]
    rates = {
        "gateway (Kafka consumer)": [n["cold_fetch_rps"] for _, n in rounds],
        "pulsar-client reader, same topics": [n.get("stored_reader_rps", 0) for _, n in rounds],
        "pulsar-client reader, bare": [n.get("direct_read_rps", 0) for _, n in rounds],
    }
    cpu = {
        "gateway": [n["gateway_cpu_us_per_record"] for _, n in rounds],
        "broker": [n["broker_cpu_us_per_record"] for _, n in rounds],
        "Kafka consumer": [n["consumer_cpu_us_per_record"] for _, n in rounds],
        "pulsar-client reader": [n.get("stored_reader_cpu_us_per_record", 0) for _, n in rounds],
    }
    rows = [
        {
            "round": label,
            "fetch rec/s": round(n["cold_fetch_rps"]),
            "vs bare reader": round(n.get("vs_direct_reader", 0), 2),
            "vs reader of the same topics": round(n.get("vs_stored_reader", 0), 2),
            "load": round(n["load_average"], 2),
        }
        for label, n in rounds
    ]
    tail = results["tail"]
    title = (
        f"Fetch after a restart: {results['records']:,} records of {results['size']} B"
        + (", two headers each" if results["headers"] else "")
        + (", idempotent producer" if results["idempotent"] else "")
    )
    return page(
        title,
        [
            table(rows),
            grouped_bar_chart("records/s", labels, rates, "rec/s"),
            grouped_bar_chart("CPU per record", labels, cpu, "µs"),
            f"<p>The gateway's hot modules: {results.get('hot_modules', 'not recorded')}.</p>",
            f"<p>Tail fetch (the writer, right after the produce): "
            f"{tail['tail_fetch_rps']:,.0f} records/s, gateway "
            f"{tail['gateway_cpu_us_per_record']:.2f} µs a record.</p>",
        ],
        results,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=CHOICES, help="one setting only")
    parser.add_argument(
        "--format",
        choices=tuple(FORMATS),
        default="pulsar",
        help="the topic's entry format (`kafka`: what fetching stored batches as they are costs)",
    )
    parser.add_argument("--headers", action="store_true", help="two headers on every record")
    parser.add_argument(
        "--idempotent", action="store_true", help="produce with enable.idempotence=true"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy under each fetch")
    parser.add_argument("--out", type=Path, default=Path("reports/cold-fetch"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    choices = [args.only] if args.only else list(CHOICES)
    results: dict[str, Any] = {
        "records": args.records,
        "size": args.size,
        "headers": args.headers,
        "idempotent": args.idempotent,
        # the gateways run this tree: with its compiled twins or without (docs/compiled.md)
        "hot_modules": HOT_MODULES,
        "rounds": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "gw"
        writer = GatewayProcess(data, extra=["--pulsar-client", "native"]).start()
        try:
            create_topic(writer.bootstrap, args.partitions, config=FORMATS[args.format])
            kafka_produce(
                writer.bootstrap,
                "bench",
                args.records,
                args.size,
                headers=args.headers,
                idempotent=args.idempotent,
            )
            ends = partition_ends(writer.bootstrap, "bench", args.partitions)
            results["tail"] = tail_fetch(writer, args.partitions, sum(ends))
        finally:
            writer.stop()
        for number in range(args.rounds):
            round_results = {}
            for choice in choices:
                tag = f"{choice}-{number}"
                round_results[choice] = one_round(choice, data, args, ends, tag)
            results["rounds"].append(round_results)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    args.out.with_suffix(".html").write_text(report(results))
    print(f"the gateway's hot modules: {HOT_MODULES}")
    print_numbers("tail fetch (the writer, right after the produce):", results["tail"], 40)
    for number, round_results in enumerate(results["rounds"]):
        for choice, numbers in round_results.items():
            print_numbers(f"round {number}, {choice}:", numbers, 40)


if __name__ == "__main__":
    main()
