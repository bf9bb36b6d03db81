"""Does the gateway's memory settle, or grow with how long it has served? Rounds of the
same mixed load against one gateway; after each the clients leave, and the RSS is
sampled while the gateway closes its idle partitions and trims its heap (issue 10).

    python -m bench.soak_rounds [--rounds 4] [--records 60000] [--messages 3000]

One gateway per Python allocator, side by side in the same run (pymalloc, Python's own and
the default, and glibc's, with PYTHONMALLOC=malloc), so the two see the same machine at
the same moment: per round the peak RSS, the RSS settled after the idle period, and
the gateway's CPU per message. Memory that settles gives a settled RSS that stops moving
after the first rounds; a leak keeps adding about the same amount every round. Results
go to the terminal and to reports/soak-rounds/rounds.{json,html}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from bench.amqp_throughput import rss_kib
from bench.soak_kafka import consume_all
from bench.soak_report import line_chart
from harness.gateway_process import GatewayProcess
from pulsar_gateway.tools.html_report import PALETTE, esc, page, table

console = Console()
TOPICS = {"rounds-a": 3, "rounds-b": 2}
QUEUES = [f"rounds-q{i}" for i in range(5)]
GROUPS = ("rounds-g1", "rounds-g2")
IDLE_CLOSE_SECONDS = 20  # partitions close, then the idle trim runs twice in the idle time
GROWTH_TOLERANCE = 0.10  # settled RSS of the last round over the second's: "flat" within


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Side:
    """One gateway and what its rounds measured."""

    def __init__(self, name: str, allocator: str, scratch: Path) -> None:
        self.name = name
        self.allocator = allocator
        settings = ["--set", f"kafka.idle_close_seconds={IDLE_CLOSE_SECONDS}"]
        self.gateway = GatewayProcess(scratch / name, extra=settings)
        self.samples: list[tuple[float, float]] = []  # (seconds, RSS MiB)
        self.rounds: list[dict[str, Any]] = []
        self.start_rss = 0.0

    @property
    def pid(self) -> int:
        assert self.gateway.process is not None
        return self.gateway.process.pid

    def rss(self) -> float:
        return rss_kib(self.pid) / 1024


def create_topics(bootstrap: str) -> None:
    """The rounds' topics; the admin client is gone when this returns, since a client
    still connected would keep the gateway from ever being idle (and trimming)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n) for t, n in TOPICS.items()])
    for future in futures.values():
        future.result(30)


def _produce_and_consume(bootstrap: str, records: int, round_no: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    value = b"r" * 100
    topics = list(TOPICS)
    for i in range(records):
        while True:
            try:
                producer.produce(topics[i % 2], value, f"k{i % 12}".encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(180):
        raise RuntimeError("records not delivered in 180 s")
    for group in GROUPS:
        config = {"bootstrap.servers": bootstrap, "group.id": group}
        consume_all(config, topics, records, 180, f"round {round_no}: {group}")


def _publish_and_consume(url: str, messages: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    for queue in QUEUES:
        channel.queue_declare(queue, durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    for i in range(messages):
        channel.basic_publish("", QUEUES[i % len(QUEUES)], b"m" * 100, persistent)
    seen = 0
    channel.basic_qos(prefetch_count=200)
    for queue in QUEUES:
        for method, _, _ in channel.consume(queue, inactivity_timeout=5):
            if method is None:
                break
            channel.basic_ack(method.delivery_tag)
            seen += 1
        channel.cancel()
    connection.close()
    if seen < messages:
        raise RuntimeError(f"AMQP: consumed {seen} of {messages}")


def run_side(side: Side, args: argparse.Namespace, t0: float) -> None:
    """The rounds against one gateway, RSS sampled every second throughout."""
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1):
            side.samples.append((time.monotonic() - t0, side.rss()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for number in range(1, args.rounds + 1):
            cpu_before, began = cpu_seconds(side.pid), time.monotonic() - t0
            _produce_and_consume(side.gateway.bootstrap, args.records, number)
            _publish_and_consume(side.gateway.amqp_url, args.messages)
            cpu = cpu_seconds(side.pid) - cpu_before
            ended = time.monotonic() - t0
            time.sleep(args.idle)
            during = [rss for t, rss in side.samples if began <= t]
            side.rounds.append(
                {
                    "round": number,
                    "peak_mib": round(max(during), 1),
                    "settled_mib": round(side.rss(), 1),
                    "load_s": round(ended - began, 1),
                    # each Kafka record is produced once and fetched by two groups
                    "cpu_us_per_message": round(cpu * 1e6 / (args.records + args.messages), 1),
                }
            )
            console.print(f"{side.name}: {side.rounds[-1]}")
    finally:
        stop.set()


def verdict(side: Side) -> str:
    """ "flat" when the last round settled within GROWTH_TOLERANCE of the second (the
    first includes start-up's one-time growth), else the growth per round."""
    settled = [r["settled_mib"] for r in side.rounds]
    if len(settled) < 3:
        return "too few rounds"
    growth = (settled[-1] - settled[1]) / settled[1]
    per_round = (settled[-1] - settled[1]) / (len(settled) - 2)
    if growth <= GROWTH_TOLERANCE:
        return f"flat: {growth:+.0%} from round 2 to {len(settled)}"
    return f"grows {per_round:+.1f} MiB a round ({growth:+.0%} from round 2)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records", type=int, default=60_000, help="Kafka records a round")
    parser.add_argument("--messages", type=int, default=3_000, help="AMQP messages a round")
    parser.add_argument("--idle", type=float, default=100, help="seconds idle after a round")
    parser.add_argument("--out", type=Path, default=Path("reports/soak-rounds"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="rounds-") as scratch:
        sides = [
            Side("pymalloc (default)", "pymalloc", Path(scratch)),
            Side("glibc (PYTHONMALLOC=malloc)", "malloc", Path(scratch)),
        ]
        for side in sides:
            saved = os.environ.get("PYTHONMALLOC")
            if side.allocator:
                os.environ["PYTHONMALLOC"] = side.allocator
            try:
                side.gateway.start()
            finally:
                if saved is None:
                    os.environ.pop("PYTHONMALLOC", None)
                else:
                    os.environ["PYTHONMALLOC"] = saved
            create_topics(side.gateway.bootstrap)
        time.sleep(5)
        for side in sides:
            side.start_rss = side.rss()
        t0 = time.monotonic()
        threads = [threading.Thread(target=run_side, args=(s, args, t0)) for s in sides]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for side in sides:
                side.gateway.stop()
    results = {
        "started": started,
        "settings": vars(args) | {"out": str(args.out)},
        "environment": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "sides": [
            {
                "name": s.name,
                "start_mib": round(s.start_rss, 1),
                "rounds": s.rounds,
                "verdict": verdict(s),
            }
            for s in sides
        ],
    }
    (args.out / "rounds.json").write_text(json.dumps(results, indent=1))
    write_html(args.out / "rounds.html", results, sides)
    for side in results["sides"]:
        console.print(f"{side['name']}: start {side['start_mib']} MiB; {side['verdict']}")
    console.print(f"report: {args.out / 'rounds.html'}")


def write_html(path: Path, results: dict[str, Any], sides: list[Side]) -> None:
    x_max = max((t for s in sides for t, _ in s.samples), default=1.0)
    chart = line_chart(
        "Gateway RSS (MiB) over the rounds, sampled every second",
        {s.name: s.samples for s in sides},
        "MiB",
        [],
        {},
        x_max,
        [(f"start, {s.name}", s.start_rss, PALETTE[i]) for i, s in enumerate(sides)],
    )
    rows = [
        {"gateway": side["name"], "start (MiB)": side["start_mib"]}
        | {f"round {r['round']} settled (MiB)": r["settled_mib"] for r in side["rounds"]}
        | {"verdict": side["verdict"]}
        for side in results["sides"]
    ]
    labels = {
        "round": "round",
        "peak_mib": "peak (MiB)",
        "settled_mib": "settled (MiB)",
        "load_s": "load (s)",
        "cpu_us_per_message": "gateway CPU per message (us)",
    }
    detail = [
        {"gateway": side["name"]} | {labels[k]: v for k, v in r.items()}
        for side in results["sides"]
        for r in side["rounds"]
    ]
    settings = results["settings"]
    sections = [
        f"<p>Started {esc(results['started'])}; {settings['rounds']} rounds of "
        f"{settings['records']:,} Kafka records (produced idempotently, read by 2 groups) "
        f"and {settings['messages']:,} AMQP messages (confirmed, consumed), each followed "
        f"by {settings['idle']:g} s without clients; {results['environment']['cpus']} CPUs. "
        "Both gateways ran at the same time on the same machine.</p>",
        chart,
        "<h2>Settled RSS per round</h2>",
        table(rows),
        '<p class="note">Flat: the last round settled within '
        f"{GROWTH_TOLERANCE:.0%} of the second (the first round holds start-up's one-time "
        "growth: code paths, caches and the allocator's working set).</p>",
        "<h2>Each round</h2>",
        table(detail),
    ]
    path.write_text(page("Soak rounds: does memory settle? (issue 10)", sections, results))


if __name__ == "__main__":
    main()
