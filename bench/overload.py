"""Memory under a 2x overload: clients offer twice what the gateway can store, for a minute.

    python -m bench.overload [--seconds 60] [--factor 2] [--out reports/overload]

First each protocol's capacity is measured on a fresh gateway (Kafka: acks=all produce of
100-byte records to a 3-partition `pulsar`-format topic; AMQP: persistent publishes to one
durable queue, timed until the queue holds them all). Then producer processes offer
`--factor` times that rate on both protocols at once for `--seconds`, and the gateway's RSS
(and its broker's) is sampled twice a second through the run and a settle afterwards.

The gateway must push back instead of buffering: Kafka through its per-connection and total
in-flight request bytes (reading stops, so the clients' own queues fill and their acks
slow down), AMQP through TCP and connection.blocked. What the run reports: the offered and
the achieved rates, how often each client was pushed back, the RSS before, at its peak and
after the settle, and the RSS slope over the second half of the overload (a buffer that
grows without bound shows as a slope that does not flatten). It does not fail: the figures
and the HTML page (memory over time) are the result.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pika
from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from bench.kafka_throughput import create_topic, kafka_produce
from bench.proc import rss_kib
from harness.gateway_process import GatewayProcess
from pulsar_gateway.tools.html_report import bar_chart, line_chart, page, table

console = Console()
PAYLOAD = b"x" * 100
QUEUE = "overload"
TOPIC = "overload"
KAFKA_CALIBRATION = 30_000
AMQP_CALIBRATION = 10_000
SETTLE_SECONDS = 15.0


def amqp_capacity(url: str, messages: int) -> float:
    """Messages per second the gateway stores from one publisher: publish without confirms,
    then time until the queue holds them all (so the socket buffers do not count)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(f"{QUEUE}-calibration", durable=True)
    properties = pika.BasicProperties(delivery_mode=2)
    start = time.perf_counter()
    for _ in range(messages):
        channel.basic_publish("", f"{QUEUE}-calibration", PAYLOAD, properties)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        held = channel.queue_declare(f"{QUEUE}-calibration", passive=True).method.message_count
        if held >= messages:
            break
        connection.sleep(0.05)
    elapsed = time.perf_counter() - start
    channel.queue_delete(f"{QUEUE}-calibration")
    connection.close()
    return messages / elapsed


def offer_kafka(bootstrap: str, rate: float, seconds: float, out: Any) -> None:
    """One producer process: try to produce `rate` records/s for `seconds`; count the acks,
    the failures and how often the client's own queue was full (the gateway pushing back)."""
    counts = {"offered": 0, "acked": 0, "failed": 0, "queue_full": 0}

    def delivered(err: Any, _msg: Any) -> None:
        counts["failed" if err is not None else "acked"] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 100_000,
            "enable.idempotence": False,
        }
    )
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        due = int((now - start) * rate)
        while counts["offered"] < due:
            try:
                producer.produce(TOPIC, PAYLOAD, on_delivery=delivered)
                counts["offered"] += 1
            except BufferError:
                counts["queue_full"] += 1
                break
        producer.poll(0.005)
    producer.flush(120)
    counts["seconds"] = time.perf_counter() - start
    out.put(("kafka", counts))


def offer_amqp(url: str, rate: float, seconds: float, out: Any) -> None:
    """One publisher process: try to publish `rate` persistent messages/s for `seconds`;
    count what went out and every connection.blocked the gateway sent."""
    counts = {"offered": 0, "blocked": 0, "seconds": 0.0}
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.add_on_connection_blocked_callback(
        lambda *_: counts.__setitem__("blocked", counts["blocked"] + 1)
    )
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    properties = pika.BasicProperties(delivery_mode=2)
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        due = int((now - start) * rate)
        while counts["offered"] < due and time.perf_counter() < end:
            channel.basic_publish("", QUEUE, PAYLOAD, properties)
            counts["offered"] += 1
        connection.process_data_events(0.005)
    counts["seconds"] = time.perf_counter() - start
    connection.close()
    out.put(("amqp", counts))


def sample_rss(pids: list[int], timeline: list[list[float]], stop: threading.Event) -> None:
    started = time.monotonic()
    while not stop.wait(0.5):
        timeline.append([time.monotonic() - started, *(rss_kib(pid) / 1024 for pid in pids)])


def slope_mib_per_min(points: list[list[float]]) -> float:
    """Least-squares slope of the gateway's RSS over these samples, in MiB per minute."""
    if len(points) < 2:
        return 0.0
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs) or 1.0
    return 60 * sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def run(seconds: float, factor: float, processes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="overload-") as tmp:
        gateway = GatewayProcess(Path(tmp)).start()
        try:
            return measure(gateway, seconds, factor, processes)
        finally:
            gateway.stop()


def measure(
    gateway: GatewayProcess, seconds: float, factor: float, processes: int
) -> dict[str, Any]:
    assert gateway.process is not None
    pids = [gateway.process.pid, gateway.broker_pid()]
    create_topic(gateway.bootstrap, 3, TOPIC)
    console.print("calibrating: Kafka produce and AMQP publish capacity")
    kafka_rate = KAFKA_CALIBRATION / kafka_produce(
        gateway.bootstrap, TOPIC, KAFKA_CALIBRATION, len(PAYLOAD)
    )
    amqp_rate = amqp_capacity(gateway.amqp_url, AMQP_CALIBRATION)
    console.print(f"capacity: Kafka {kafka_rate:,.0f} rec/s, AMQP {amqp_rate:,.0f} msg/s")
    time.sleep(2)  # let the calibration's buffers drain before the baseline is read
    baseline = [rss_kib(pid) / 1024 for pid in pids]
    timeline: list[list[float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(pids, timeline, stop), daemon=True)
    sampler.start()
    results_queue: Any = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(
            target=offer_kafka,
            args=(gateway.bootstrap, factor * kafka_rate / processes, seconds, results_queue),
        )
        for _ in range(processes)
    ] + [
        multiprocessing.Process(
            target=offer_amqp,
            args=(gateway.amqp_url, factor * amqp_rate / processes, seconds, results_queue),
        )
        for _ in range(processes)
    ]
    console.print(f"offering {factor}x for {seconds:.0f} s ({len(workers)} client processes)")
    for worker in workers:
        worker.start()
    outcomes: dict[str, list[dict[str, Any]]] = {"kafka": [], "amqp": []}
    for _ in workers:
        kind, counts = results_queue.get(timeout=seconds + 300)
        outcomes[kind].append(counts)
    for worker in workers:
        worker.join(30)
    load_end = timeline[-1][0] if timeline else seconds
    settle_end = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < settle_end:
        time.sleep(0.5)
    stop.set()
    sampler.join(5)
    stored = queue_count(gateway.amqp_url)
    second_half = [p for p in timeline if load_end / 2 <= p[0] <= load_end]
    peak = max((p[1] for p in timeline), default=0.0)
    return {
        "seconds": seconds,
        "factor": factor,
        "client_processes_per_protocol": processes,
        "kafka": summary(outcomes["kafka"], kafka_rate, factor, "acked"),
        "amqp": {**summary(outcomes["amqp"], amqp_rate, factor, "offered"), "stored": stored},
        "gateway_rss_mib": {
            "before": round(baseline[0], 1),
            "peak": round(peak, 1),
            "end_of_load": round(second_half[-1][1], 1) if second_half else None,
            "after_settle": round(timeline[-1][1], 1) if timeline else None,
            "slope_second_half_mib_per_min": round(slope_mib_per_min(second_half), 2),
        },
        "broker_rss_mib": {
            "before": round(baseline[1], 1),
            "peak": round(max((p[2] for p in timeline if len(p) > 2), default=0.0), 1),
        },
        "rss_timeline_mib": [[round(v, 2) for v in p] for p in timeline],
        "load_end_seconds": round(load_end, 1),
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": os.getloadavg(),
        },
    }


def summary(
    outcomes: list[dict[str, Any]], capacity: float, factor: float, done_key: str
) -> dict[str, Any]:
    """Offered versus achieved, over all of one protocol's client processes."""
    seconds = max((o["seconds"] for o in outcomes), default=1.0)
    totals = {key: sum(o.get(key, 0) for o in outcomes) for key in outcomes[0] if key != "seconds"}
    return {
        "capacity_per_s": round(capacity),
        "target_per_s": round(factor * capacity),
        "achieved_per_s": round(totals[done_key] / seconds),
        **totals,
    }


def queue_count(url: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    count = connection.channel().queue_declare(QUEUE, passive=True).method.message_count
    connection.close()
    return int(count)


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Offered against accepted, per protocol."""
    return [
        {
            "protocol": name,
            "capacity/s": results[name]["capacity_per_s"],
            "offered target/s": results[name]["target_per_s"],
            "accepted/s": results[name]["achieved_per_s"],
            "pushed back": results[name].get("queue_full", results[name].get("blocked", 0)),
        }
        for name in ("kafka", "amqp")
    ]


def sections(results: dict[str, Any]) -> list[str]:
    """The HTML of one run: its own page, and its part of `make bench`'s."""
    rss = results["gateway_rss_mib"]
    timeline = results["rss_timeline_mib"]
    return [
        f"<p>{results['factor']}x each protocol's measured capacity offered for "
        f"{results['seconds']:.0f} s. Kafka is pushed back when its client's queue is full "
        "(the gateway stopped reading); AMQP by TCP and connection.blocked. A bounded gateway "
        "shows a flat RSS in the second half of the load (slope: "
        f"{rss['slope_second_half_mib_per_min']} MiB/min).</p>",
        table(rows(results)),
        line_chart(
            "RSS over the run (MiB; the load, with the clients' flush, ends at "
            f"{results['load_end_seconds']} s, then a {SETTLE_SECONDS:.0f} s settle)",
            {
                "gateway": [(p[0], p[1]) for p in timeline],
                "pulsar-lite": [(p[0], p[2]) for p in timeline if len(p) > 2],
            },
            "MiB",
        ),
        bar_chart(
            "Gateway RSS (MiB)",
            [("before", rss["before"]), ("peak", rss["peak"]), ("after", rss["after_settle"])],
            "MiB",
        ),
    ]


def report(results: dict[str, Any], out: Path) -> None:
    rss = results["gateway_rss_mib"]
    found = rows(results)
    console_table = Table(title=f"{results['factor']}x overload for {results['seconds']:.0f} s")
    for column in found[0]:
        console_table.add_column(column)
    for row in found:
        console_table.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in row.values()))
    console.print(console_table)
    console.print(
        f"gateway RSS: before {rss['before']} MiB, peak {rss['peak']} MiB, after the settle "
        f"{rss['after_settle']} MiB; slope over the second half "
        f"{rss['slope_second_half_mib_per_min']} MiB/min"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    out.with_suffix(".html").write_text(page("Memory under overload", sections(results), results))
    console.print(f"report: {out.with_suffix('.html')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=2, help="client processes per protocol")
    parser.add_argument("--out", type=Path, default=Path("reports/overload"))
    args = parser.parse_args()
    report(run(args.seconds, args.factor, args.processes), args.out)


if __name__ == "__main__":
    main()
