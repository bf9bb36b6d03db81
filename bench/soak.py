"""Soak (issue 10): mixed Kafka and AMQP load against one real gateway on its embedded
broker while faults arrive at seeded random intervals; then everything is read back.

    python -m bench.soak [--minutes 10] [--seed N] [--no-faults]

Load (loopback only): 2 idempotent and 2 plain confluent-kafka producers (acks=all, keyed,
per-key sequence numbers) on two topics, 3 consumer groups of 2 members; 10 AMQP queues,
each with a confirmed publisher and an acknowledging consumer; and victims (an idempotent
producer, a group member, a pika publisher) in a process of their own, whose sockets get
cut. Faults: the broker SIGKILLed or SIGSTOPped for 5-20 s, half-sent Kafka and AMQP
frames, cut client sockets, an absurd Kafka size prefix, a garbage record batch, a bad AMQP
frame, a flood of idle sockets. Pass/fail and the numbers go to the terminal and to
reports/soak/soak.{json,html}; the exit status is 0 on pass, 1 on fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import soak_results as judge
from bench.amqp_throughput import log_problems, rss_kib
from bench.soak_amqp import AmqpLoad, declare_queues, drain
from bench.soak_amqp import warm_up as amqp_warm_up
from bench.soak_common import ClientRecord, KafkaAck, KafkaFailure, QueueLedger, Timeline
from bench.soak_faults import FaultInjector, probe_health
from bench.soak_kafka import (
    GroupLedger,
    KafkaGroupMember,
    KafkaProducerLoad,
    client_logger,
    create_topics,
)
from bench.soak_kafka import warm_up as kafka_warm_up
from bench.soak_report import print_terminal, write_html, write_json
from bench.soak_verify import Readback, read_back, verify_amqp, verify_kafka
from bench.soak_victims import VictimProcess
from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

console = Console()
if not console.is_terminal:  # a log file: wide enough that the tables do not fold
    console = Console(width=160)
TOPICS = {"soak-a": 3, "soak-b": 2}
VICTIM_TOPIC, VICTIM_QUEUE = "soak-victim", "soak-victim-q"
QUEUES = [f"soak-q{i}" for i in range(10)]
GROUPS = ("soak-g1", "soak-g2", "soak-g3")
# The warm-up is a round of the soak's own mix, so that the RSS the soak must come back to
# is that of a gateway which has served this load (its allocators' working set: see
# docs/architecture.md, "Memory"), not of one that has served nothing; what the check then
# catches is memory that grows with run length and faults. bench/soak_rounds.py shows the
# working set settling after the first round.
WARM_UP_RECORDS = 30_000
WARM_UP_MESSAGES = 1_000
WARM_UP_SETTLE_S = 240.0  # idle partitions close after 60 s, the trim runs once a minute
TRIM_PERIOD_S = 65.0


class Monitor(threading.Thread):
    """Once a second: the gateway's RSS (VmRSS) and /health, onto the timeline."""

    def __init__(self, gateway: GatewayProcess, timeline: Timeline) -> None:
        super().__init__(name="monitor", daemon=True)
        self.gateway = gateway
        self.timeline = timeline
        self.stopping = threading.Event()

    def run(self) -> None:
        assert self.gateway.process is not None
        pid = self.gateway.process.pid
        while not self.stopping.wait(1):
            try:
                rss = rss_kib(pid) / 1024
            except OSError:
                return
            health = probe_health(self.gateway.metrics_port)
            self.timeline.samples.append({"t": self.timeline.now(), "rss": rss, "health": health})

    def recent_rss(self, count: int) -> list[float]:
        return [s["rss"] for s in self.timeline.samples[-count:]]


def baseline_rss(monitor: Monitor, gateway: GatewayProcess) -> float:
    """The pre-soak RSS of a gateway that has served a warm-up round of the soak's load:
    once its idle partitions are closed, a heap trim has had time to run after that (the
    trim runs at most once a minute), and five samples in a row agree within 2%."""
    closed_at: list[float] = []

    def steady() -> float | None:
        if not closed_at:
            if (gateway.health() or {}).get("open_partitions", 1):
                return None
            closed_at.append(time.monotonic())
        recent = monitor.recent_rss(5)
        if time.monotonic() - closed_at[0] < TRIM_PERIOD_S or len(recent) < 5:
            return None
        if max(recent) <= min(recent) * 1.02:
            return sum(recent) / 5
        return None

    try:
        return wait_until(steady, WARM_UP_SETTLE_S, 1, "the RSS to settle after the warm-up")
    except AssertionError:
        return monitor.recent_rss(1)[0]


def settle(monitor: Monitor, limit: float, timeout: float) -> tuple[float, float]:
    """Wait (up to `timeout`) until five samples in a row are at or under `limit`; the RSS
    then (or at the deadline) and how long it took."""
    started = time.monotonic()
    try:
        wait_until(lambda: max(monitor.recent_rss(5)) <= limit, timeout, 1, "RSS to settle")
    except AssertionError:
        pass
    return monitor.recent_rss(1)[0], time.monotonic() - started


def victim_results(
    result: dict[str, Any] | None, timeline: Timeline
) -> tuple[list[KafkaAck], list[KafkaFailure], QueueLedger, list[ClientRecord], str]:
    """The victims' process's final report, as the soak's own records."""
    ledger = QueueLedger(VICTIM_QUEUE, "victim-amqp-pub")
    if result is None:
        return [], [], ledger, [], "the victims' process gave no result"
    data = result["ledger"]
    ledger.published = data["published"]
    for name in ("confirmed", "nacked", "in_doubt"):
        setattr(ledger, name, {int(k): v for k, v in data[name].items()})
    records = []
    for raw in result["records"]:
        record = ClientRecord(raw["name"], raw["protocol"], raw["role"], healthy=False)
        record.ack_times, record.produced = raw["ack_times"], raw["produced"]
        record.errors = [tuple(e) for e in raw["errors"]]
        record.drops = [tuple(d) for d in raw["drops"]]
        records.append(record)
    acks = [KafkaAck(**a) for a in result["acks"]]
    failures = [KafkaFailure(**f) for f in result["failures"]]
    return acks, failures, ledger, records, ""


def run(args: argparse.Namespace, gateway: GatewayProcess, timeline: Timeline) -> dict[str, Any]:
    out: Path = args.out
    rng = random.Random(args.seed)
    log_path = out / "clients.log"
    client_logger(log_path)
    console.print("creating topics and queues, warming up")
    create_topics(gateway.bootstrap, {**TOPICS, VICTIM_TOPIC: 2, "soak-warmup": 1})
    asyncio.run(declare_queues(gateway.amqp_url, [*QUEUES, VICTIM_QUEUE]))
    monitor = Monitor(gateway, timeline)
    monitor.start()
    timeline.phase("warm-up")
    assert gateway.process is not None
    cold = rss_kib(gateway.process.pid) / 1024
    kafka_warm_up(gateway.bootstrap, "soak-warmup", WARM_UP_RECORDS)
    asyncio.run(amqp_warm_up(gateway.amqp_url, "soak-warmup-q", WARM_UP_MESSAGES))
    console.print("warm-up done: waiting for the gateway to close idle partitions and trim")
    before = baseline_rss(monitor, gateway)
    console.print(f"gateway RSS: {cold:.0f} MiB cold, {before:.0f} MiB after the warm-up")

    groups = [GroupLedger(g) for g in GROUPS]
    members = [
        KafkaGroupMember(f"{g.group}-m{i}", gateway.bootstrap, list(TOPICS), g, timeline, log_path)
        for g in groups
        for i in (1, 2)
    ]
    producers = [
        KafkaProducerLoad(
            f"kafka-{'idem' if idem else 'plain'}-{i}",
            gateway.bootstrap,
            list(TOPICS),
            12,
            args.kafka_rate,
            idem,
            timeline,
            log_path,
        )
        for idem in (True, False)
        for i in (1, 2)
    ]
    victims = VictimProcess(
        [
            *("--bootstrap", gateway.bootstrap, "--amqp-url", gateway.amqp_url),
            *("--topic", VICTIM_TOPIC, "--queue", VICTIM_QUEUE, "--log", str(log_path)),
            *("--kafka-port", str(gateway.kafka_port), "--amqp-port", str(gateway.amqp_port)),
            *("--t0", repr(timeline.t0)),
        ],
        out / "victims.log",
    )
    injector: FaultInjector | None = None
    amqp = AmqpLoad(gateway.amqp_url, QUEUES, args.amqp_rate, timeline)
    try:
        for thread in (*members, *producers):
            thread.start()
        amqp.start()
        if victims.wait_for("ready", 60) is None:
            raise RuntimeError(f"the victims' process did not start: see {out / 'victims.log'}")
        timeline.phase("load")
        load_end = timeline.now() + args.minutes * 60
        gaps = (3.0, 9.0) if args.minutes < 3 else (6.0, 18.0)
        if not args.no_faults:
            injector = FaultInjector(
                gateway, timeline, rng, victims, load_end, gaps, list(TOPICS)[0]
            )
            injector.start()
        exited = watch_load(gateway, timeline, load_end, producers, amqp)
        timeline.phase("stop")
        if injector is not None:
            injector.stop()
        console.print("load stopped: waiting for the last acknowledgements")
        if exited is None:
            wait_until(lambda: probe_health(gateway.metrics_port) == "ok", 90, 0.5, "health")
        for producer in producers:
            producer.stopping.set()
        amqp.stop_publishers()
        victim_result = victims.command("stop", "result", 300)
        for producer in producers:
            producer.join(180)
        v_acks, v_failures, v_ledger, v_records, v_problem = victim_results(victim_result, timeline)
        acks = [a for p in producers for a in p.acks] + v_acks
        failures = [f for p in producers for f in p.failures] + v_failures
        acked = {(a.client, a.key, a.seq) for a in acks if a.client != "victim-kafka-idem"}
        console.print("letting the consumer groups catch up")
        try:
            wait_until(lambda: all(g.missing(acked) == 0 for g in groups), 120, 1, "groups")
        except AssertionError:
            pass
        for member in members:
            member.stopping.set()
        for member in members:
            member.join(60)
        amqp.stop_consumers()
        records = [*(p.record for p in producers), *(m.record for m in members), *amqp.records]
        records += v_records
        timeline.phase("verify")
        console.print("reading everything back")
        try:
            readback = read_back(gateway.bootstrap, {**TOPICS, VICTIM_TOPIC: 2})
        except Exception as error:  # noqa: BLE001 - a dead gateway: reported as such
            readback = Readback(problems=[f"read-back failed: {type(error).__name__}: {error}"])
        roles = {p.name: "healthy" for p in producers} | {"victim-kafka-idem": "victim"}
        kafka = verify_kafka(readback, acks, failures, timeline, roles)
        if v_problem:
            kafka["problems"].append(v_problem)
        ledgers = [*amqp.ledgers.values(), v_ledger]
        try:
            drain_problems = asyncio.run(
                drain(gateway.amqp_url, {lg.queue: lg for lg in ledgers}, timeline)
            )
        except Exception as error:  # noqa: BLE001 - a dead gateway: reported as such
            drain_problems = {"all": f"drain failed: {type(error).__name__}: {error}"}
        amqp_result = verify_amqp(ledgers, timeline)
        timeline.phase("settle")
        console.print(f"waiting up to {args.settle:g} s for the RSS to settle")
        limit = before * judge.RSS_TOLERANCE
        after, settled = settle(monitor, limit, args.settle) if exited is None else (0.0, 0.0)
        end = timeline.now()
    finally:
        if injector is not None:
            injector.stop(5)
        victims.kill()
        amqp.close()
        monitor.stopping.set()
    rss = {
        "at_settle": held_at_settle(gateway) if exited is None else {},
        "cold_mib": cold,
        "before_mib": before,
        "peak_mib": max(s["rss"] for s in timeline.samples),
        "after_mib": after,
        "limit_mib": limit,
        "settle_s": settled,
    }
    kafka["groups"] = judge.groups_table(groups, acked)
    healthy_producers = [p.record for p in producers] + list(amqp.publishers.values())
    produced = sum(r.produced for r in records if r.protocol == "kafka" and r.role == "producer")
    faults = judge.faults_json(timeline.faults)
    results = {
        "verdict": "",
        "checks": judge.checks(
            kafka, amqp_result, kafka["groups"], rss, records, drain_problems, exited
        ),
        "summary": judge.summary(kafka, amqp_result, produced),
        "settings": {
            "minutes": args.minutes,
            "seed": args.seed,
            "reproduce": f"python -m bench.soak --minutes {args.minutes:g} --seed {args.seed}"
            + (" --no-faults" if args.no_faults else ""),
            "kafka_rate_per_producer": args.kafka_rate,
            "amqp_rate_per_queue": args.amqp_rate,
            "faults": not args.no_faults,
        },
        "kafka": kafka,
        "amqp": amqp_result,
        "faults": faults,
        "faults_by_kind": dict(sorted(_count(f["kind"] for f in faults).items())),
        "rss": rss,
        "stalls": judge.stalls(healthy_producers, timeline, timeline.phases["stop"]),
        "rates": judge.rate_windows(
            timeline,
            timeline.phases["load"],
            timeline.phases["stop"],
            {
                "kafka acknowledged": args.kafka_rate * len(producers),
                "amqp confirmed": args.amqp_rate * len(QUEUES),
                "amqp consumed": args.amqp_rate * len(QUEUES),
            },
            amqp.loop_lag_ms,
        ),
        "clients": judge.clients_table(records),
        "timeline": {
            "end": end,
            "phases": timeline.phases,
            "series": judge.series_json(timeline, end),
            "rss": [[round(s["t"], 1), round(s["rss"], 1)] for s in timeline.samples],
            "health": [[round(s["t"], 1), s["health"]] for s in timeline.samples],
        },
        "gateway_log": log_problems(gateway, 40),
        "environment": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    results["verdict"] = "PASS" if all(c["result"] == "pass" for c in results["checks"]) else "FAIL"
    return results


def held_at_settle(gateway: GatewayProcess) -> dict[str, Any]:
    """What the gateway still holds once the soak is over, beside its RSS: open partitions
    (each with a tail cache) and connections (none of the soak's should be left)."""
    try:
        connections = {
            p: int(gateway.metric("gateway_open_connections", protocol=p))
            for p in ("kafka", "amqp")
        }
    except OSError:
        connections = {}
    return {
        "open_partitions": (gateway.health() or {}).get("open_partitions", "?"),
        "connections": ", ".join(f"{p} {n}" for p, n in connections.items()),
    }


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def watch_load(
    gateway: GatewayProcess,
    timeline: Timeline,
    until: float,
    producers: list[KafkaProducerLoad],
    amqp: AmqpLoad,
) -> int | None:
    """Print progress every 15 s until `until`; the gateway's exit status if it died."""
    next_line = 0.0
    while timeline.now() < until:
        assert gateway.process is not None
        if gateway.process.poll() is not None:
            console.print(f"[bold red]the gateway exited with {gateway.process.returncode}")
            return gateway.process.returncode
        if timeline.now() >= next_line:
            kafka = sum(len(p.acks) for p in producers)
            confirmed = sum(len(lg.confirmed) for lg in amqp.ledgers.values())
            last = timeline.faults[-1].describe() if timeline.faults else "none yet"
            console.print(
                f"{timeline.now():6.0f} s: kafka acked {kafka:,}, amqp confirmed {confirmed:,}, "
                f"faults {len(timeline.faults)} (last: {last})"
            )
            next_line += 15
        time.sleep(0.5)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-faults", action="store_true", help="the same load, no faults")
    parser.add_argument("--kafka-rate", type=float, default=100, help="records/s per producer")
    parser.add_argument("--amqp-rate", type=float, default=20, help="messages/s per queue")
    parser.add_argument("--settle", type=float, default=180, help="RSS settle deadline, s")
    parser.add_argument("--out", type=Path, default=Path("reports/soak"))
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    console.print(f"[bold]soak: {args.minutes:g} min, seed {args.seed}[/]")
    args.out.mkdir(parents=True, exist_ok=True)
    timeline = Timeline()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        gateway = GatewayProcess(Path(scratch) / "gateway").start()
        try:
            results = run(args, gateway, timeline)
        finally:
            gateway.stop()
            shutil.copy(gateway.log_path, args.out / "gateway.log")
    results["started"] = started
    write_json(args.out / "soak.json", results)
    write_html(args.out / "soak.html", results)
    print_terminal(console, results)
    console.print(f"report: {args.out / 'soak.html'} and {args.out / 'soak.json'}")
    sys.exit(0 if results["verdict"] == "PASS" else 1)


if __name__ == "__main__":
    main()
