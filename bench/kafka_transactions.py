"""Kafka transactions: what they cost through the gateway, beside tansu, in one run.

Per server (the gateway with a `pulsar`-format topic and with a `kafka`-format one; tansu,
the Kafka-compatible reference broker): an idempotent producer's records/s, a transactional
producer's (a commit every `--per-txn` records), and a consumer reading them back with
read_uncommitted and with read_committed; server CPU per record (user+sys from /proc: the
gateway and its broker, and the gateway alone; tansu) for each. Ratios are gateway / tansu.
tansu 0.6 returns aborted records to read_committed consumers (it does not filter them),
so its read_committed figure is a lower bound of the work, not a like-for-like peer.
`--profile` records py-spy flame graphs of the gateway under the transactional produce.

    python -m bench.kafka_transactions [--records 20000] [--per-txn 500] [--profile]
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from bench.flame import flame_graph
from bench.kafka_throughput import cpu_seconds, kafka_consume
from bench.report import bar_chart, write_report
from harness.gateway_process import GatewayProcess
from harness.tansu_process import TansuProcess

console = Console()
VALUE = b"x" * 100


def _create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(60)


def _produce(bootstrap: str, topic: str, records: int, per_txn: int, tag: str) -> float:
    """Seconds to store `records` (transactional when per_txn > 0)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "enable.idempotence": True,
    }
    if per_txn:
        config["transactional.id"] = f"bench-{tag}-{topic}"
    producer = Producer(config)
    if per_txn:
        producer.init_transactions(60)
    start = time.perf_counter()
    for n in range(records):
        if per_txn and n % per_txn == 0:
            producer.begin_transaction()
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
        if per_txn and (n + 1) % per_txn == 0:
            producer.commit_transaction(60)
    if per_txn and records % per_txn:
        producer.commit_transaction(60)
    producer.flush(120)
    return time.perf_counter() - start


def _measure(
    name: str, bootstrap: str, pids: list[int], configs: dict[str, str], args: Any
) -> dict[str, float]:
    results: dict[str, float] = {}
    phases = [
        ("idempotent produce", lambda t: _produce(bootstrap, t, args.records, 0, name)),
        (
            "transactional produce",
            lambda t: _produce(bootstrap, t, args.records, args.per_txn, name),
        ),
        (
            "read_uncommitted",
            lambda t: kafka_consume(bootstrap, t, 1, args.records, "read_uncommitted"),
        ),
        (
            "read_committed",
            lambda t: kafka_consume(bootstrap, t, 1, args.records, "read_committed"),
        ),
    ]
    label = name.replace(" ", "-")
    plain, transactional = f"plain-{label}", f"txn-{label}"
    _create(bootstrap, plain, configs)
    _create(bootstrap, transactional, configs)
    for phase, run in phases:
        topic = plain if phase == "idempotent produce" else transactional
        before = [cpu_seconds([pid]) for pid in pids]
        profile = args.profile and len(pids) > 1 and phase == "transactional produce"
        if profile:
            svg = args.out.parent / f"kafka-transactions-produce-{label}.svg"
            with flame_graph(pids[0], svg) as flame:
                seconds = run(topic)
            results["flame"] = str(flame.path or flame.error)  # type: ignore[assignment]
        else:
            seconds = run(topic)
        spent = [cpu_seconds([pid]) - was for pid, was in zip(pids, before, strict=True)]
        cpu = sum(spent)
        results[f"{phase} rec/s"] = round(args.records / seconds)
        results[f"{phase} cpu us/rec"] = round(cpu / args.records * 1e6, 1)
        if len(pids) > 1:  # the gateway's own share, its broker's being the rest
            results[f"{phase} gateway-only cpu us/rec"] = round(spent[0] / args.records * 1e6, 1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--per-txn", type=int, default=500)
    parser.add_argument("--profile", action="store_true", help="py-spy flame graph")
    parser.add_argument("--out", type=Path, default=Path("reports/kafka-transactions"))
    args = parser.parse_args()
    results: dict[str, Any] = {
        "environment": {
            "records": args.records,
            "per_txn": args.per_txn,
            "value_bytes": len(VALUE),
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        },
        "servers": {},
    }
    with tempfile.TemporaryDirectory() as data:
        gateway = GatewayProcess(Path(data) / "gw").start()
        tansu = TansuProcess().start()
        try:
            assert gateway.process is not None and tansu.process is not None
            gateway_pids = [gateway.process.pid, gateway.broker_pid()]
            servers = results["servers"]
            for form in ("pulsar", "kafka"):
                name = f"gateway {form}"
                console.print(f"[bold]{name}")
                configs = {"pulsar.entry.format": form}
                servers[name] = _measure(name, gateway.bootstrap, gateway_pids, configs, args)
            console.print("[bold]tansu")
            servers["tansu"] = _measure("tansu", tansu.bootstrap, [tansu.process.pid], {}, args)
        finally:
            tansu.stop()
            gateway.stop()
    results["environment"]["load_average_at_end"] = os.getloadavg()
    servers = results["servers"]
    peer = servers["tansu"]
    rows = []
    table = Table(title="Kafka transactions (gateway / tansu)")
    for column in ("measure", *servers, "pulsar / tansu", "kafka / tansu"):
        table.add_column(column)
    for key in servers["gateway pulsar"]:
        if key == "flame":
            continue
        row: dict[str, Any] = {"measure": key, **{s: v.get(key, "-") for s, v in servers.items()}}
        for form in ("pulsar", "kafka"):
            ratio = servers[f"gateway {form}"][key] / peer[key] if peer.get(key) else "-"
            row[f"{form} / tansu"] = ratio if ratio == "-" else round(ratio, 2)
        rows.append(row)
        table.add_row(*(str(value) for value in row.values()))
    console.print(table)
    charts = [
        bar_chart(
            f"{phase} (records/s)",
            [(server, values[f"{phase} rec/s"]) for server, values in servers.items()],
            "rec/s",
        )
        for phase in ("idempotent produce", "transactional produce", "read_committed")
    ]
    for name, values in servers.items():
        flame = values.get("flame")
        if flame and str(flame).endswith(".svg"):
            svg = base64.b64encode(Path(flame).read_bytes()).decode()
            charts.append(
                f"<h2>{name} under the transactional produce (py-spy)</h2>"
                f'<img src="data:image/svg+xml;base64,{svg}" style="max-width:100%">'
            )
    json_path, html_path = write_report(args.out, "Kafka transactions", results, charts, rows)
    console.print(f"wrote {json_path} and {html_path}")


if __name__ == "__main__":
    main()
