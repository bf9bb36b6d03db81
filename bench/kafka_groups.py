"""Kafka consumer groups: the gateway beside tansu, same confluent-kafka settings, with ratios.

    python -m bench.kafka_groups [--rounds 3] [--members 3] [--partitions 6] [--seconds 5]
        [--quick]

Join: --members consumers (threads, a Consumer each) subscribe together to a fresh group on a
--partitions topic; the time from subscribe until every member owns partitions and every
partition is owned by exactly one member, --rounds times. Commits: one subscribed consumer
commits offsets of all partitions for --seconds, synchronously (one commit at a time), then
asynchronously (at most --window outstanding, then a flush of all outstanding), and reads the
last commit back. Every consumer uses session.timeout.ms=6000 and heartbeat.interval.ms=1000
(tansu needs the 6000 ms session timeout to join quickly; docs/tools.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.flame import Flame, flame_graph
from bench.proc import cpu_seconds
from bench.report import bar_chart, write_report
from harness.gateway_process import GatewayProcess
from harness.tansu_process import TansuProcess

console = Console()
TOPIC = "bench-groups"
RECORDS_PER_PARTITION = 100


def consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }


def prepare_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(TOPIC, f"record {i}".encode(), partition=partition)
    if producer.flush(30) != 0:
        raise RuntimeError("could not produce the records")


def log_problems(gateway: GatewayProcess, keep: int = 20) -> list[str]:
    """The gateway log's last warnings, errors and tracebacks, with how many there were."""
    markers = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")
    text = gateway.log_path.read_text(errors="replace")
    lines = [line for line in text.splitlines() if any(m in line for m in markers)]
    return (
        [f"({len(lines)} in all, the last {keep} follow)"] if len(lines) > keep else []
    ) + lines[-keep:]


# --- join ---------------------------------------------------------------------------------


class JoinRound:
    """Members in threads; records when the assignment first settles."""

    def __init__(self, bootstrap: str, group: str, members: int, partitions: int) -> None:
        self.bootstrap, self.group = bootstrap, group
        self.partitions = set(range(partitions))
        self.owned: dict[int, set[int]] = {m: set() for m in range(members)}
        self.lock = threading.Lock()
        self.changes = 0
        self.started = 0.0
        self.settled_at: float | None = None
        self.settled = threading.Event()
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.barrier = threading.Barrier(members + 1)

    def _update(self, member: int, partitions: set[int]) -> None:
        with self.lock:
            self.owned[member] = partitions
            self.changes += 1
            sets = list(self.owned.values())
            owners = sum(len(s) for s in sets)
            union = set().union(*sets)
            done = all(sets) and owners == len(self.partitions) and union == self.partitions
            if done and self.settled_at is None:
                self.settled_at = time.perf_counter()
                self.settled.set()

    def member(self, index: int) -> None:
        consumer = Consumer(consumer_config(self.bootstrap, self.group))

        def assigned(_: Consumer, tps: list[TopicPartition]) -> None:
            self._update(index, {tp.partition for tp in tps})

        def revoked(_: Consumer, tps: list[TopicPartition]) -> None:
            self._update(index, set())

        self.barrier.wait()
        consumer.subscribe([TOPIC], on_assign=assigned, on_revoke=revoked)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.05)
                if message is not None and message.error():
                    with self.lock:
                        self.errors.append(str(message.error()))
        finally:
            consumer.close()

    def run(self, timeout: float, settle_check: float) -> dict[str, Any]:
        threads = [threading.Thread(target=self.member, args=(m,), daemon=True) for m in self.owned]
        for thread in threads:
            thread.start()
        self.barrier.wait()
        self.started = time.perf_counter()
        ok = self.settled.wait(timeout)
        with self.lock:
            changes_at_settle = self.changes
        if ok:
            time.sleep(settle_check)
        with self.lock:
            changes_after = self.changes  # before the members close and revoke
        self.stopping.set()
        for thread in threads:
            thread.join(30)
        with self.lock:
            return {
                "seconds": (self.settled_at - self.started) if self.settled_at else None,
                "assignment_changes": changes_at_settle,
                "changed_after_settle": (changes_after - changes_at_settle) if ok else None,
                "errors": self.errors[:5],
            }


def measure_join(
    progress: Progress, label: str, bootstrap: str, rounds: int, members: int, partitions: int
) -> dict[str, Any]:
    task = progress.add_task(f"{label}: {members} members join", total=rounds)
    results = []
    for r in range(rounds):
        group = f"bench-join-{time.time_ns()}-{r}"
        outcome = JoinRound(bootstrap, group, members, partitions).run(60, 1.0)
        results.append(outcome)
        progress.advance(task)
        if outcome["seconds"] is None:
            progress.console.print(f"[red]{label}: round {r} did not settle within 60 s")
    times = [o["seconds"] for o in results if o["seconds"] is not None]
    return {
        "rounds": results,
        "median_s": statistics.median(times) if times else None,
        "max_s": max(times) if len(times) == len(results) else None,
    }


# --- commits ------------------------------------------------------------------------------


def subscribed_consumer(bootstrap: str, partitions: int) -> Consumer:
    consumer = Consumer(consumer_config(bootstrap, f"bench-commit-{time.time_ns()}"))
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    while len(consumer.assignment()) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError("the commit consumer got no assignment within 60 s")
        consumer.poll(0.1)
    consumer.pause(consumer.assignment())  # no fetching: only commits on the wire
    return consumer


def offsets(i: int, partitions: int) -> list[TopicPartition]:
    return [TopicPartition(TOPIC, p, i % RECORDS_PER_PARTITION + 1) for p in range(partitions)]


def read_back(consumer: Consumer, expected: list[TopicPartition]) -> bool:
    committed = consumer.committed([TopicPartition(TOPIC, tp.partition) for tp in expected], 30)
    return [tp.offset for tp in committed] == [tp.offset for tp in expected]


def measure_sync_commits(
    progress: Progress, label: str, bootstrap: str, partitions: int, seconds: float
) -> dict[str, Any]:
    consumer = subscribed_consumer(bootstrap, partitions)
    task = progress.add_task(f"{label}: sync commits", total=seconds)
    count, errors = 0, 0
    last: list[TopicPartition] = []
    took: list[float] = []
    try:
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            last = offsets(count, partitions)
            before = time.perf_counter()
            result = consumer.commit(offsets=last, asynchronous=False)
            took.append(time.perf_counter() - before)
            errors += sum(1 for tp in result or [] if tp.error is not None)
            count += 1
            if count % 50 == 0:
                progress.update(task, completed=elapsed)
        elapsed = time.perf_counter() - start
        progress.update(task, completed=seconds)
        verified = read_back(consumer, last)
    finally:
        consumer.close()
    return {
        "commits": count,
        "seconds": elapsed,
        "per_s": count / elapsed,
        "partition_errors": errors,
        "read_back_ok": verified,
        "latency_ms": percentiles_ms(took),
    }


def percentiles_ms(seconds: list[float]) -> dict[str, float]:
    """p50, p90, p99 and max of these durations, in milliseconds."""
    if not seconds:
        return {}
    ordered = sorted(seconds)
    pick = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "max": 1.0}
    return {name: ordered[int(q * (len(ordered) - 1))] * 1000 for name, q in pick.items()}


def measure_async_commits(
    progress: Progress, label: str, bootstrap: str, partitions: int, seconds: float, window: int
) -> dict[str, Any]:
    done = {"ok": 0, "failed": 0, "last": 0.0}
    first_error: list[str] = []

    def committed(error: KafkaError | None, tps: list[TopicPartition]) -> None:
        failed = error is not None or any(tp.error is not None for tp in tps)
        done["failed" if failed else "ok"] += 1
        done["last"] = time.perf_counter()
        if failed and not first_error:
            first_error.append(str(error or [tp.error for tp in tps if tp.error]))

    config = consumer_config(bootstrap, f"bench-async-{time.time_ns()}")
    consumer = Consumer({**config, "on_commit": committed})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    while len(consumer.assignment()) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError("the commit consumer got no assignment within 60 s")
        consumer.poll(0.1)
    consumer.pause(consumer.assignment())
    task = progress.add_task(f"{label}: async commits", total=seconds)
    issued = 0
    last: list[TopicPartition] = []
    try:
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            if issued - done["ok"] - done["failed"] >= window:
                consumer.poll(0.001)
                continue
            last = offsets(issued, partitions)
            consumer.commit(offsets=last, asynchronous=True)
            issued += 1
            if issued % 200 == 0:
                consumer.poll(0)
                progress.update(task, completed=elapsed)
        issuing = time.perf_counter() - start
        flush_deadline = time.monotonic() + 60
        while done["ok"] + done["failed"] < issued and time.monotonic() < flush_deadline:
            consumer.poll(0.01)
        progress.update(task, completed=seconds)
        completed = done["ok"] + done["failed"]
        total = (done["last"] or time.perf_counter()) - start
        verified = completed == issued and read_back(consumer, last)
    finally:
        consumer.close()
    return {
        "issued": issued,
        "completed": completed,
        "failed": done["failed"],
        "first_error": first_error[0] if first_error else None,
        "issuing_s": issuing,
        "seconds": total,
        "per_s": done["ok"] / total,
        "window": window,
        "read_back_ok": verified,
    }


# --- one server ---------------------------------------------------------------------------


def guarded(progress: Progress, label: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return run()
    except Exception as error:  # noqa: BLE001 - reported, the run goes on
        progress.console.print(f"[red]{label}: {error}")
        return {"error": str(error)}


def measured(
    pids: list[int], path: Path | None, run: Callable[[], dict[str, Any]]
) -> Callable[[], dict[str, Any]]:
    """`run`, with the server's CPU per commit (all of `pids`: the gateway and its broker,
    or tansu) and, given a `path`, pids[0] profiled into it (py-spy)."""

    def go() -> dict[str, Any]:
        profile = flame_graph(pids[0], path) if path else contextlib.nullcontext(Flame())
        before = cpu_seconds(pids)
        with profile as flame:
            numbers = run()
        spent = cpu_seconds(pids) - before
        commits = numbers.get("commits", numbers.get("completed", 0))
        numbers["server_cpu_s"] = spent
        if commits:
            numbers["server_cpu_us_per_commit"] = spent / commits * 1e6
        if flame.path is not None:
            numbers["flame_graph"] = str(flame.path)
        elif flame.error is not None:
            numbers["flame_graph_error"] = flame.error
        return numbers

    return go


def measure(
    progress: Progress,
    label: str,
    bootstrap: str,
    args: argparse.Namespace,
    pids: list[int],
    profile: bool = False,
) -> dict[str, Any]:
    """Join, then sync and async commits, with the CPU time of the server's `pids`; with
    `profile` and --flame-graphs, pids[0] is profiled during the commit phases."""
    flames = (
        args.out.with_name(f"{args.out.name}-{label}") if args.flame_graphs and profile else None
    )
    try:
        prepare_topic(bootstrap, args.partitions)
    except Exception as error:  # noqa: BLE001 - reported, the run goes on
        progress.console.print(f"[red]{label}: topic {TOPIC}: {error}")
        return {"error": f"topic {TOPIC}: {error}"}
    return {
        "join": guarded(
            progress,
            f"{label} join",
            lambda: measure_join(
                progress, label, bootstrap, args.rounds, args.members, args.partitions
            ),
        ),
        "sync_commit": guarded(
            progress,
            f"{label} sync commits",
            measured(
                pids,
                flames and flames.with_name(f"{flames.name}-sync-commits.svg"),
                lambda: measure_sync_commits(
                    progress, label, bootstrap, args.partitions, args.seconds
                ),
            ),
        ),
        "async_commit": guarded(
            progress,
            f"{label} async commits",
            measured(
                pids,
                flames and flames.with_name(f"{flames.name}-async-commits.svg"),
                lambda: measure_async_commits(
                    progress, label, bootstrap, args.partitions, args.seconds, args.window
                ),
            ),
        ),
    }


def measure_gateway(progress: Progress, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    gateway = GatewayProcess(scratch / "gw").start()
    try:
        assert gateway.process is not None
        pids = [gateway.process.pid, gateway.broker_pid()]
        numbers = measure(progress, "gateway", gateway.bootstrap, args, pids, profile=True)
        numbers["log_problems"] = log_problems(gateway)
        return numbers
    finally:
        gateway.stop()


def measure_tansu(progress: Progress, _: Path, args: argparse.Namespace) -> dict[str, Any]:
    tansu = TansuProcess().start()
    try:
        assert tansu.process is not None
        return measure(progress, "tansu", tansu.bootstrap, args, [tansu.process.pid])
    finally:
        tansu.stop()


def number(numbers: dict[str, Any], *path: str) -> float | None:
    item: Any = numbers
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return None
        item = item[key]
    return float(item)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0, help="per commit measurement")
    parser.add_argument("--window", type=int, default=1000, help="async commits outstanding")
    parser.add_argument("--quick", action="store_true", help="1 round, 1 s of commits")
    parser.add_argument("--out", type=Path, default=Path("reports/kafka-groups"))
    parser.add_argument(
        "--flame-graphs", action="store_true", help="profile the gateway's commits (py-spy)"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 1.0
    results: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "peers": {},
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "client": "confluent-kafka (librdkafka), session.timeout.ms=6000, "
            "heartbeat.interval.ms=1000",
            "loadavg_at_start": os.getloadavg(),
        },
    }
    with tempfile.TemporaryDirectory() as scratch, Progress(console=console) as progress:
        for peer, run in (("gateway", measure_gateway), ("tansu", measure_tansu)):
            try:
                results["peers"][peer] = run(progress, Path(scratch), args)
            except Exception as error:  # noqa: BLE001 - reported, the run goes on
                progress.console.print(f"[red]{peer}: {error}")
                results["peers"][peer] = {"error": str(error)}
    results["environment"]["loadavg_at_end"] = os.getloadavg()
    report(results, args)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    peers: dict[str, dict[str, Any]] = results["peers"]
    metrics = {
        "join median s": ("join", "median_s"),
        "join max s": ("join", "max_s"),
        "sync commits/s": ("sync_commit", "per_s"),
        "sync commit p50 ms": ("sync_commit", "latency_ms", "p50"),
        "sync commit p99 ms": ("sync_commit", "latency_ms", "p99"),
        "async commits/s": ("async_commit", "per_s"),
        "server CPU us/sync commit": ("sync_commit", "server_cpu_us_per_commit"),
        "server CPU us/async commit": ("async_commit", "server_cpu_us_per_commit"),
    }
    table = Table(
        title=f"{args.members} members, {args.partitions} partitions, {args.rounds} rounds; "
        f"commits of {args.partitions} partitions for {args.seconds:g} s"
    )
    for column in ("metric", *peers, "gateway/tansu"):
        table.add_column(column, justify="right")
    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}
    for metric, path in metrics.items():
        row: dict[str, Any] = {"metric": metric}
        for peer, numbers in peers.items():
            value = number(numbers, *path)
            if value is None:
                row[peer] = "failed"
            else:
                row[peer] = f"{value:,.3f}" if metric.endswith((" s", " ms")) else f"{value:,.0f}"
        gw, ta = number(peers["gateway"], *path), number(peers["tansu"], *path)
        if gw is not None and ta:
            ratios[metric] = gw / ta
            row["gateway/tansu"] = f"{gw / ta:.2f}x"
        else:
            row["gateway/tansu"] = "-"
        rows.append(row)
        table.add_row(*(str(v) for v in row.values()))
    results["ratios"] = ratios
    console.print(table)
    console.print("join, commit latency and CPU: lower is better; commits/s: higher is better")
    for peer, numbers in peers.items():
        if "error" in numbers:
            console.print(f"[red]{peer}: {numbers['error']}")
        for part in ("join", "sync_commit", "async_commit"):
            item = numbers.get(part, {})
            if "error" in item:
                console.print(f"[red]{peer} {part}: {item['error']}")
            if item.get("read_back_ok") is False:
                console.print(f"[red]{peer} {part}: the last commit did not read back")
            if item.get("failed"):
                console.print(f"[red]{peer} {part}: {item['failed']} failed: {item['first_error']}")
        for r, outcome in enumerate(numbers.get("join", {}).get("rounds", [])):
            if outcome["changed_after_settle"] or outcome["errors"]:
                console.print(f"[yellow]{peer} join round {r}: {outcome}")
        for line in numbers.get("log_problems", []):
            console.print(f"[yellow]{peer} log: {line}")
    charts = []
    for metric, unit, scale in (
        ("join median s", "ms", 1000.0),
        ("sync commits/s", "commits/s", 1.0),
        ("async commits/s", "commits/s", 1.0),
    ):
        path = metrics[metric]
        bars = [(p, number(n, *path)) for p, n in peers.items()]
        title = "Join to settled assignment, median (ms)" if unit == "ms" else metric
        charts.append(bar_chart(title, [(p, v * scale) for p, v in bars if v is not None], unit))
    json_path, html_path = write_report(args.out, "Kafka consumer groups", results, charts, rows)
    console.print(f"report: {json_path} and {html_path}")


if __name__ == "__main__":
    main()
