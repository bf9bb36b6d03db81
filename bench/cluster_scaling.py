"""Workers on one host (issue 12): Kafka throughput and CPU per record with 1, 2 and `auto`
workers beside the single gateway process, and kill -9 of a worker to the first stored
produce on one of its partitions, over several kills.

    python -m bench.cluster_scaling [--records 100000] [--kills 10] [--quick]

Every configuration runs in the same run, one after the other (`--repeat` rounds, forward
then backward; each configuration's best round is reported, every round is in the JSON), on
its own embedded broker and data directory: the single process (`pulsar-gateway run`, no
cluster) is the peer, and each worker configuration is reported as a ratio to it. The load
is one confluent-kafka producer (acks=all, 100-byte values, keyed) over a 12-partition
topic, so its batches go to each partition's leader, then one consumer reading everything
back (the same load functions as bench/kafka_throughput.py). CPU is user plus system time
from /proc of every worker (and, apart, of the broker) over the produce phase, divided by
the records: the per-record cost a capacity model multiplies (docs/cluster.md). A py-spy
profile of the busiest worker is taken under a further load, apart from the timed phase.

Failover: `--workers 3`; each round kills (SIGKILL) the worker leading some partition and
then, as a client would, asks a surviving worker's Metadata for the partition's leader and
sends it a one-record acks=all Produce every 20 ms until one is stored. Two series: "moved"
pauses the supervisor (SIGSTOP) for the round, so the partition must move to a survivor
(the time the issue asks for); "restarted" lets the supervisor start the victim again at
once, and whichever comes first, the survivors' takeover or the victim's rejoin, stores it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from bench.cluster_failover import leaders, produce_once
from bench.kafka_throughput import kafka_consume, kafka_produce
from bench.proc import cpu_seconds
from bench.report import bar_chart, write_report
from bench.suite import machine
from harness.gateway_process import GatewayProcess
from harness.workers_process import WorkersProcess
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol import KafkaDecodeError
from pulsar_gateway.supervisor import resolve_workers

console = Console()
PARTITIONS = 12
VALUE_SIZE = 100
PROFILE_SECONDS = 8
CLUSTER_OF_ONE = ["--set", "cluster.enabled=true"]
# protocol errors met while polling for the first stored produce (a gateway bug when any)
ANOMALIES: list[str] = []


class Target:
    """One configuration under test: its bootstrap, gateway pids and broker pid."""

    def __init__(self, name: str, server: GatewayProcess | WorkersProcess) -> None:
        self.name = name
        self.server = server

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    def gateway_pids(self) -> list[int]:
        if isinstance(self.server, GatewayProcess):
            assert self.server.process is not None
            return [self.server.process.pid]
        return [self.server.worker_pid(i) for i in range(self.server.count)]

    def broker_pid(self) -> int:
        if isinstance(self.server, GatewayProcess):
            return self.server.broker_pid()
        assert self.server.process is not None
        out = subprocess.run(
            ["pgrep", "-P", str(self.server.process.pid), "-f", "pulsar-lite"],
            capture_output=True,
            text=True,
        )
        return int(out.stdout.split()[0])

    def stop(self) -> None:
        self.server.stop()


def _profile(pid: int, seconds: float, out: Path) -> list[tuple[str, float]]:
    """py-spy samples of one worker under load: the functions with the most own samples,
    as shares of all samples. Empty without py-spy."""
    from bench.flame import py_spy

    binary = py_spy()
    if binary is None:
        return []
    raw = out.with_suffix(".txt")
    command = [binary, "record", "--pid", str(pid), "--rate", "100", "--duration"]
    command += [str(int(seconds)), "--format", "raw", "--output", str(raw), "--nonblocking"]
    subprocess.run(command, capture_output=True, timeout=seconds + 60)
    if not raw.exists():
        return []
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frame = stack.rsplit(";", 1)[-1]
        own[frame.split(" (", 1)[0] + " " + frame.rsplit("/", 1)[-1].rstrip(")")] += int(count)
        total += int(count)
    return [(name, n / total) for name, n in own.most_common(8)] if total else []


def measure(target: Target, records: int, scratch: Path) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    topic = "scaling"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    if isinstance(target.server, WorkersProcess):
        target.server.wait_topic(topic, PARTITIONS)
    # warm-up: partitions open, producers set up
    kafka_produce(target.bootstrap, topic, 2000, VALUE_SIZE)
    pids, broker = target.gateway_pids(), target.broker_pid()
    per_worker_before = [cpu_seconds([pid]) for pid in pids]
    broker_before = cpu_seconds([broker])
    seconds = kafka_produce(target.bootstrap, topic, records, VALUE_SIZE)
    per_worker = [cpu_seconds([pid]) - b for pid, b in zip(pids, per_worker_before, strict=True)]
    broker_cpu = cpu_seconds([broker]) - broker_before
    fetch_before = cpu_seconds(pids)
    fetch_seconds = kafka_consume(target.bootstrap, topic, PARTITIONS, records + 2000)
    fetch_cpu = cpu_seconds(pids) - fetch_before
    # a profile of the busiest worker under a second produce load, apart from the timing
    busiest = pids[max(range(len(pids)), key=lambda i: per_worker[i])]
    profile: list[tuple[str, float]] = []
    if os.environ.get("BENCH_PROFILE", "1") == "1":
        import threading

        found: list[list[tuple[str, float]]] = []
        thread = threading.Thread(
            target=lambda: found.append(
                _profile(busiest, PROFILE_SECONDS, scratch / f"profile-{target.name}")
            )
        )
        thread.start()
        kafka_produce(target.bootstrap, topic, records // 2, VALUE_SIZE)
        thread.join()
        profile = found[0] if found else []
    return {
        "workers": len(pids),
        "records": records,
        "produce_seconds": seconds,
        "produce_records_per_second": records / seconds,
        "fetch_records_per_second": (records + 2000) / fetch_seconds,
        "gateway_cpu_seconds": sum(per_worker),
        "cpu_per_worker_seconds": per_worker,
        "gateway_cpu_us_per_record": sum(per_worker) / records * 1e6,
        "broker_cpu_us_per_record": broker_cpu / records * 1e6,
        "fetch_cpu_us_per_record": fetch_cpu / (records + 2000) * 1e6,
        "profile_top_own_time": profile,
    }


def failover(kills: int, scratch: Path) -> dict[str, Any]:
    """Two series on one `--workers 3`: "moved" kills a worker while the supervisor is
    paused (SIGSTOP), so the partition must move to a survivor; "restarted" lets the
    supervisor start the worker again at once, as in production, where whichever comes
    first (the survivors' takeover or the victim's rejoin) serves it."""
    workers = WorkersProcess(scratch / "failover", 3).start()
    ports = {i: workers.kafka_base + i for i in range(workers.count)}
    topic = "failover"
    series: dict[str, dict[str, list[Any]]] = {
        mode: {"seconds": [], "stored_by": []} for mode in ("moved", "restarted")
    }
    assert workers.process is not None
    supervisor = workers.process.pid
    try:
        admin = AdminClient({"bootstrap.servers": workers.bootstrap})  # kept until done
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        workers.wait_topic(topic, PARTITIONS)
        for round_ in range(2 * kills):
            mode = "moved" if round_ % 2 == 0 else "restarted"
            workers.wait_all_serving(120)
            victim = 1 + (round_ // 2) % (workers.count - 1)
            survivor = 0
            led = [p for p, node in leaders(ports[survivor], topic).items() if node == victim]
            partition = led[0]
            assert produce_once(ports[victim], topic, partition) == ErrorCode.NONE
            if mode == "moved":
                os.kill(supervisor, signal.SIGSTOP)
            killed_at = time.monotonic()
            try:
                workers.kill_worker(victim)
                took, node = _first_stored(killed_at, ports, survivor, topic, partition)
            finally:
                if mode == "moved":
                    os.kill(supervisor, signal.SIGCONT)
            series[mode]["seconds"].append(took)
            series[mode]["stored_by"].append("survivor" if node != victim else "restarted")
            console.print(
                f"{mode} {round_ // 2 + 1}: worker {victim}, {topic}-{partition} stored again "
                f"after {took:.2f} s by the {series[mode]['stored_by'][-1]} worker"
            )
    finally:
        workers.stop()
    return {
        mode: {
            **values,
            "p50": statistics.median(values["seconds"]),
            "max": max(values["seconds"]),
        }
        for mode, values in series.items()
    } | {"lease_seconds": 6.0, "anomalies": list(ANOMALIES)}


def _first_stored(
    killed_at: float, ports: dict[int, int], survivor: int, topic: str, partition: int
) -> tuple[float, int]:
    """As a client: the leader from a survivor's Metadata, a produce to it, every 20 ms."""
    deadline = killed_at + 120
    while time.monotonic() < deadline:
        try:
            node = leaders(ports[survivor], topic)[partition]
        except (OSError, KeyError):
            node = -1
        try:
            stored = node in ports and produce_once(ports[node], topic, partition) == 0
        except KafkaDecodeError as exc:  # an answer that breaks the protocol: noted, retried
            ANOMALIES.append(f"{time.monotonic() - killed_at:.2f} s after the kill: {exc}")
            stored = False
        if stored:
            return time.monotonic() - killed_at, node
        time.sleep(0.02)
    raise TimeoutError(f"no produce to {topic}-{partition} stored within 120 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration (2)")
    parser.add_argument("--quick", action="store_true", help="20,000 records, 2 kills, 1 run")
    parser.add_argument("--out", type=Path, default=Path("reports/cluster-scaling"))
    parser.add_argument(
        "--report-only", type=Path, help="write the report again from this run's JSON"
    )
    args = parser.parse_args()
    if args.report_only:
        _report(json.loads(args.report_only.read_text()), args.out)
        return
    if args.quick:
        args.records, args.kills, args.repeat = 20_000, 2, 1
    auto = resolve_workers("auto")
    results: dict[str, Any] = {
        "settings": {
            "records": args.records,
            "kills": args.kills,
            "repeat": args.repeat,
            "auto_workers": auto,
        },
        "environment": {**machine(), "loadavg_at_start": os.getloadavg()},
    }
    configurations: list[tuple[str, Any]] = [
        ("single process", lambda d: GatewayProcess(d)),
        ("1 worker (cluster of one)", lambda d: GatewayProcess(d, CLUSTER_OF_ONE)),
        ("2 workers", lambda d: WorkersProcess(d, 2)),
        (f"auto ({auto}) workers", lambda d: WorkersProcess(d, auto, workers_arg="auto")),
    ]
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        # forward, then backward, ...: a load that changes during the run hits every
        # configuration alike; each one's best run is reported, all are in the JSON
        order = [
            item
            for round_ in range(args.repeat)
            for item in (configurations if round_ % 2 == 0 else configurations[::-1])
        ]
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in configurations}
        for number, (name, make) in enumerate(order):
            console.print(f"[bold]{name}[/]")
            target = Target(name, make(scratch / f"run{number}").start())
            try:
                run = measure(target, args.records, scratch)
            finally:
                target.stop()
            samples[name].append(run)
            console.print(
                f"  produce {run['produce_records_per_second']:,.0f} records/s, "
                f"{run['gateway_cpu_us_per_record']:.1f} us gateway CPU per record"
            )
        results["samples"] = samples
        results["runs"] = {
            name: max(runs, key=lambda run: run["produce_records_per_second"])
            for name, runs in samples.items()
        }
        # kept should the failover part fail: the throughput rounds took most of the time
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".partial.json").write_text(json.dumps(results, indent=2))
        results["failover"] = failover(args.kills, scratch)
    results["environment"]["loadavg_at_end"] = os.getloadavg()
    _report(results, args.out)


def _profiles_html(runs: dict[str, Any]) -> str:
    """The busiest worker's functions with the most own samples, per configuration."""
    import html

    items = []
    for name, run in runs.items():
        top = run["profile_top_own_time"] or [("not taken (py-spy missing)", 0.0)]
        lines = "".join(f"<li>{html.escape(fn)}: {share:.0%}</li>" for fn, share in top[:6])
        items.append(f"<h3>{html.escape(name)}</h3><ol>{lines}</ol>")
    return "<h2>py-spy: own time of the busiest worker</h2>" + "".join(items)


def _report(results: dict[str, Any], out: Path) -> None:
    runs = results["runs"]
    peer = runs["single process"]
    rows = []
    table = Table(title="Kafka through N workers (ratios to the single process, same run)")
    for column in (
        "configuration",
        "produce rec/s",
        "x single",
        "fetch rec/s",
        "x single",
        "gw CPU us/rec",
        "broker CPU us/rec",
        "CPU s per worker",
    ):
        table.add_column(column)
    for name, run in runs.items():
        row = {
            "configuration": name,
            "produce records/s": round(run["produce_records_per_second"]),
            "produce x single": round(
                run["produce_records_per_second"] / peer["produce_records_per_second"], 2
            ),
            "fetch records/s": round(run["fetch_records_per_second"]),
            "fetch x single": round(
                run["fetch_records_per_second"] / peer["fetch_records_per_second"], 2
            ),
            "gateway CPU us/record": round(run["gateway_cpu_us_per_record"], 1),
            "broker CPU us/record": round(run["broker_cpu_us_per_record"], 1),
            "CPU s per worker": " / ".join(f"{c:.1f}" for c in run["cpu_per_worker_seconds"]),
        }
        rows.append(row)
        table.add_row(*(str(value) for value in row.values()))
    console.print(table)
    fail = results["failover"]
    for mode in ("moved", "restarted"):
        values = fail[mode]
        console.print(
            f"kill -9 -> first stored produce on the killed worker's partition ({mode}): "
            f"p50 {values['p50']:.2f} s, max {values['max']:.2f} s over "
            f"{len(values['seconds'])} kills (lease {fail['lease_seconds']:g} s); stored by "
            f"{dict(Counter(values['stored_by']))}"
        )
    for name, run in runs.items():
        top = ", ".join(f"{fn} {share:.0%}" for fn, share in run["profile_top_own_time"][:4])
        console.print(f"profile ({name}, busiest worker): {top or 'not taken'}")
    charts = [
        bar_chart(
            "produce records/s",
            [(n, r["produce_records_per_second"]) for n, r in runs.items()],
            "records/s",
        ),
        bar_chart(
            "fetch records/s",
            [(n, r["fetch_records_per_second"]) for n, r in runs.items()],
            "records/s",
        ),
        bar_chart(
            "gateway CPU per record (all workers)",
            [(n, r["gateway_cpu_us_per_record"]) for n, r in runs.items()],
            "us",
        ),
        *(
            bar_chart(
                f"kill -9 -> first stored produce ({mode})",
                [(f"kill {i + 1}", t) for i, t in enumerate(fail[mode]["seconds"])]
                + [("lease", fail["lease_seconds"])],
                "s",
            )
            for mode in ("moved", "restarted")
        ),
    ]
    charts.append(_profiles_html(runs))
    json_path, html_path = write_report(out, "Workers on one host", results, charts, rows)
    console.print(f"wrote {json_path} and {html_path}")


if __name__ == "__main__":
    main()
