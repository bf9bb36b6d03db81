"""Rounds of one-producer-per-partition pipelined produce, each read back and checked: every
record in send order per partition, none missing, none doubled (issue 31's done-when).

    python -m bench.ordering_rounds [--rounds 200] [--records 20000] [--cpu-hogs N]

Each round picks the next combination of client (confluent-kafka, kafka-python, aiokafka,
kcat), acks (1, all), compression and partition count (1 or 3) and writes --records records
to a fresh topic; two more producers write to other partitions of the same topic at the same
time. --cpu-hogs runs busy processes beside the whole run. Writes
reports/ordering-rounds.{json,html}.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from bench.report import bar_chart, write_report
from harness.cpu_hogs import burning_cpus
from harness.gateway_process import GatewayProcess
from harness.send_order import PRODUCERS, create_topic, read_back

console = Console()
CODECS = ("none", "lz4", "zstd", "gzip")


def _beside(bootstrap: str, topic: str, partition: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    while not stop.is_set():
        try:
            for _ in range(200):
                producer.produce(topic, b"beside", partition=partition)
        except BufferError:
            pass  # the client's queue is full: let it drain
        producer.poll(0.01)
    producer.flush(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--cpu-hogs", type=int, default=0)
    parser.add_argument(
        "--clients", default=",".join(PRODUCERS), help="comma-separated, of " + ", ".join(PRODUCERS)
    )
    parser.add_argument("--out", default="reports/ordering-rounds")
    args = parser.parse_args()
    clients = [name for name in args.clients.split(",") if name]
    combos = itertools.cycle(itertools.product(clients, ("all", "1"), CODECS, (1, 3)))
    results = []
    gateway = GatewayProcess(Path(tempfile.mkdtemp(prefix="order-")))
    gateway.start()
    started = time.monotonic()
    try:
        with burning_cpus(args.cpu_hogs):
            for number in range(args.rounds):
                client, acks, codec, partitions = next(combos)
                if client == "kafka-python" and codec == "zstd":
                    codec = "lz4"  # kafka-python's zstd needs a package the suite lacks
                topic = f"rounds-{uuid.uuid4().hex[:10]}"
                create_topic(gateway.bootstrap, topic, partitions + 2)
                stop = threading.Event()
                others = [
                    threading.Thread(target=_beside, args=(gateway.bootstrap, topic, p, stop))
                    for p in (partitions, partitions + 1)
                ]
                for other in others:
                    other.start()
                try:
                    PRODUCERS[client](
                        gateway.bootstrap, topic, args.records, partitions, acks, codec
                    )
                finally:
                    stop.set()
                    for other in others:
                        other.join(60)
                verdict = read_back(gateway.bootstrap, topic, partitions + 2, args.records)
                results.append(
                    {
                        "round": number,
                        "client": client,
                        "acks": acks,
                        "codec": codec,
                        "partitions": partitions,
                        "records": verdict.records,
                        "out_of_order": verdict.out_of_order,
                        "missing": verdict.missing,
                        "duplicated": verdict.duplicated,
                        "first_problem": verdict.first_problem,
                    }
                )
                mark = "ok" if verdict.ok else f"FAIL {verdict.first_problem}"
                console.print(
                    f"round {number:>3} {client:<15} acks={acks:<3} {codec:<5} "
                    f"p={partitions}: {mark}",
                    highlight=False,
                )
    finally:
        gateway.stop()
    failed = [r for r in results if r["out_of_order"] or r["missing"] or r["duplicated"]]
    summary = {
        "rounds": len(results),
        "failed_rounds": len(failed),
        "records_per_round": args.records,
        "cpu_hogs": args.cpu_hogs,
        "cpus": os.cpu_count(),
        "minutes": (time.monotonic() - started) / 60,
        "rounds_detail": results,
    }
    per_client: dict[str, int] = {}
    for r in results:
        per_client[r["client"]] = per_client.get(r["client"], 0) + 1
    charts = [
        bar_chart("rounds per client", list(per_client.items()), "rounds"),
        bar_chart(
            "rounds with records out of order, missing or doubled",
            [("failed", len(failed)), ("passed", len(results) - len(failed))],
            "rounds",
        ),
    ]
    write_report(
        Path(args.out), "One producer's send order, round after round", summary, charts, results
    )
    console.print(f"{len(results)} rounds, {len(failed)} failed")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
