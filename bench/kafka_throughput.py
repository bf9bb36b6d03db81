"""Kafka produce and fetch throughput: the gateway (topics in the `pulsar` and in the
`kafka` entry format) beside tansu and beside pulsar-client writing straight to the
embedded broker, in one run, with ratios.

Beside records/s: server CPU per record (user+sys from /proc: the gateway and its broker;
the broker alone for pulsar-client direct; tansu), produce latency p50/p99 and end-to-end
latency (produce to fetch) p50/p99 of every peer at one rate they all sustain (half the
gateway's `pulsar`-format peak, at most LATENCY_MAX_RATE). The gateway's fetch
right after the produce reads its tail cache, as a consumer keeping up does; it is then
restarted and the same records fetched again, from Pulsar (its history reads), as a
consumer starting from the beginning of an old topic does. The `kafka` format's fetch and
tansu's are also measured on `--parallel-records` records with one consumer process per
partition, so that one Python consumer loop is not the limit (the consumers' share of the
cores is printed: near 100% means the clients still set the rate). `--profile` records
py-spy flame graphs of the gateway under the `pulsar`-format produce and fetch and puts
them in the HTML report.

    python -m bench.kafka_throughput [--records 200000] [--size 100] [--profile]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.report import bar_chart, write_report
from harness.gateway_process import GatewayProcess
from harness.tansu_process import TansuProcess
from pulsar_gateway.storage.kafka.whole_entry import HOT_MODULES

console = Console()
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LATENCY_SECONDS = 5.0
# The latency runs' common rate: half the gateway's `pulsar`-format produce peak, at most
# this. The Python load generators stamp and time every record (pulsar-client's a callback
# each, about 16 us) and top out near 30k records/s, so half a peer's peak (150k-600k) would
# measure the generator, saturated, not the server.
LATENCY_MAX_RATE = 20_000.0
# The latency consumer's longest wait for a group of records: at most this much of an
# end-to-end latency is the bench's own (it was 0.1 s, which set the p50 of every peer)
E2E_POLL_SECONDS = 0.001
# The latency producers' tick: the records due are handed over this often, in one go
PACE_SECONDS = 0.001


def cpu_seconds(pids: list[int]) -> float:
    """User+sys CPU the processes have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / CLOCK_TICKS


def minor_faults(pids: list[int]) -> int:
    """Minor page faults the processes have taken so far: memory newly touched (a fresh
    mapping's pages), which a loaded machine does not distort as it does CPU time."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[7])  # minflt (field 10)
    return total


@contextlib.contextmanager
def faulted(pids: list[int], into: dict[str, float], name: str) -> Iterator[None]:
    """Minor page faults the processes take inside the block, as into[name]."""
    before = minor_faults(pids)
    yield
    into[name] = minor_faults(pids) - before


@contextlib.contextmanager
def measured(pids: list[int], into: dict[str, float], name: str) -> Iterator[None]:
    """CPU seconds the processes spend inside the block, as into[name]."""
    before = cpu_seconds(pids)
    yield
    into[name] = cpu_seconds(pids) - before


@contextlib.contextmanager
def flame_graph(pid: int, svg: Path, enabled: bool) -> Iterator[None]:
    """py-spy record of `pid` for the duration of the block (when enabled and installed)."""
    beside = Path(sys.executable).parent / "py-spy"  # installed in the venv, not on PATH
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if not enabled or spy is None:
        yield
        return
    process = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--output", str(svg), "--rate", "200", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached before the load starts
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds."""
    if len(samples) < 2:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    cuts = statistics.quantiles(samples, n=100)
    return {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# two headers a record, as tracing and routing add them (`headers=True`): each Kafka header
# becomes a Pulsar property of the record's message (docs/pulsar-mapping.md)
HEADERS = [("trace-id", b"4bf92f3577b34da6"), ("source", b"bench")]


def kafka_produce(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    codec: str = "none",
    headers: bool = False,
    idempotent: bool = False,
) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "compression.type": codec,
            # Java clients 3.0+ are idempotent by default: every record then carries a
            # producer stamp in the `pulsar` entry format (storage/kafka/producer_state.py)
            "enable.idempotence": idempotent,
        }
    )
    payload = b"x" * size
    if codec != "none":  # compressible but not trivially: a codec costs what it would
        payload = (bytes(range(32, 127)) * (size // 95 + 1))[:size]
    extra = HEADERS if headers else None
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, str(i % 100).encode(), headers=extra)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return time.perf_counter() - start


def kafka_consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    isolation: str = "read_committed",  # librdkafka's default
) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 52428800,
            "session.timeout.ms": 6000,
            # librdkafka stops fetching for this long once its queue holds 100,000 records
            # the loop has not consumed (queued.min.messages); at its default of 1 s, a peer
            # serving faster than this loop consumes was measured at 180k records/s in one
            # run and 1.2M in the next (seen with the `kafka` format): every peer gets 10 ms
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    start = time.perf_counter()
    deadline = start + 300
    while count < records and time.perf_counter() < deadline:
        for msg in consumer.consume(min(10000, records - count), 1):
            if not msg.error():
                count += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if count < records:
        raise RuntimeError(f"consumed only {count} of {records}")
    return elapsed


def _fetch_one_partition(
    bootstrap: str, topic: str, partition: int, ready: Any, go: Any, done: Any
) -> None:
    """One consumer process of `parallel_fetch`: connects and learns its partition's end
    before the start signal, so that the timed part is the fetching. (Re-reading with the
    same consumer is no good: librdkafka's fetch outstanding at the end of the partition
    holds a re-assignment back for fetch.wait.max.ms, measured at 0.48 s a round.)"""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-parallel",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "fetch.queue.backoff.ms": 10,  # as in kafka_consume
        }
    )
    _low, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), 30)
    ready.put(end)
    go.wait()
    cpu_start = time.process_time()
    consumer.assign([TopicPartition(topic, partition, 0)])
    count = 0
    deadline = time.perf_counter() + 300
    while count < end and time.perf_counter() < deadline:
        # never ask for more than is left: consume() waits out its timeout for a count
        # that never arrives
        for msg in consumer.consume(min(10000, end - count), 1):
            if not msg.error():
                count += 1
    finished = time.perf_counter() if count == end else None
    done.put((finished, time.process_time() - cpu_start, count))
    consumer.close()


def parallel_fetch(
    bootstrap: str, topic: str, partitions: int, servers: list[int]
) -> dict[str, float]:
    """Fetch every partition from offset 0, one consumer process per partition, all started
    at once: the issue asks for the fetch comparison with enough consumer processes that one
    Python consumer loop is not the limit. Returns the records read, the wall time from the
    start signal to the last process's last record, the server CPU in it and the consumer
    processes' own CPU (to tell when the clients are the limit)."""
    context = multiprocessing.get_context("spawn")
    ready, done, go = context.Queue(), context.Queue(), context.Event()
    workers = [
        context.Process(
            target=_fetch_one_partition,
            args=(bootstrap, topic, p, ready, go, done),
            daemon=True,
        )
        for p in range(partitions)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=120)
    cpu: dict[str, float] = {}
    with measured(servers, cpu, "fetch"):
        start = time.perf_counter()
        go.set()
        finished = [done.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(30)
    if any(end is None for end, _cpu, _count in finished):
        raise RuntimeError(f"a consumer process fell short: {finished}")
    return {
        "records": float(sum(count for _end, _cpu, count in finished)),
        "consume_s": max(end for end, _cpu, _count in finished) - start,
        "cpu_fetch_s": cpu["fetch"],
        "client_cpu_s": sum(client for _end, client, _count in finished),
    }


def due_in_ticks(count: int, rate: float, wait: Callable[[], Any]) -> Iterator[int]:
    """0..count-1 at `rate` a second, in ticks: every index due by now at once, then `wait()`
    (which should last about PACE_SECONDS) before the next tick. The latency runs' pacing."""
    start = time.perf_counter()
    i = 0
    while i < count:
        due = min(count, int((time.perf_counter() - start) * rate) + 1)
        while i < due:
            yield i
            i += 1
        wait()


def kafka_latency(bootstrap: str, topic: str, rate: float, size: int) -> dict[str, Any]:
    """Produce at `rate` records/s for LATENCY_SECONDS (acks=all) while one consumer reads
    partition 0..n: produce (ack) and end-to-end (send to receipt) percentiles."""
    # linger 1 ms: each tick's records (below) wait it out whole, about 0.5 ms more than
    # records spread over the tick would, the same for every peer (linger 0 sends a request
    # per record and falls behind the rate)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"latency-{time.time_ns()}",
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    acks: list[float] = []
    ends: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            # consume(n, timeout) returns only when n messages are in or the timeout ran
            # out: a long timeout would put its own wait into every end-to-end latency
            for msg in consumer.consume(1000, E2E_POLL_SECONDS):
                if not msg.error() and msg.value()[:3] == b"lat":
                    ends.append(time.perf_counter() - float(msg.value()[3:23]))

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        time.sleep(1)  # the consumer's first fetch is in
        padding = b"x" * max(0, size - 23)
        count = int(rate * LATENCY_SECONDS)
        # Paced in ticks, as Kafka's own perf tool does: every record due by now is handed
        # over (each stamped as it goes), then poll waits for the next tick, running the
        # delivery callbacks as they come. (A wait per record spun: poll's timeout is whole
        # milliseconds, so the 50 us gaps at 20k/s became zero-timeout polls, 85% of a core
        # that the server on the same machine then lacked.)
        start = time.perf_counter()
        for _ in due_in_ticks(count, rate, lambda: producer.poll(PACE_SECONDS)):
            sent = time.perf_counter()

            def acked(err: Any, _msg: Any, sent: float = sent) -> None:
                if err is None:
                    acks.append(time.perf_counter() - sent)

            value = b"lat" + f"{sent:20.6f}".encode() + padding
            while True:
                try:
                    producer.produce(topic, value, on_delivery=acked)
                    break
                except BufferError:  # the server is behind the rate: its latency shows it
                    producer.poll(0.01)
        producer.flush(120)
        achieved = count / (time.perf_counter() - start)
        wait_deadline = time.monotonic() + 30
        while len(ends) < len(acks) and time.monotonic() < wait_deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join(30)
        consumer.close()
    return latency_result(rate, achieved, acks, ends)


def latency_result(
    rate: float, achieved: float, acks: list[float], ends: list[float]
) -> dict[str, Any]:
    """One latency run's summary, the same for the gateway and the direct peer."""
    return {
        "rate": rate,
        "achieved_rate": achieved,
        "produce": percentiles(acks),
        "end_to_end": percentiles(ends),
        "received": len(ends),
    }


def pulsar_latency(service_url: str, rate: float, size: int) -> dict[str, Any]:
    """The same with pulsar-client straight to the broker: send-ack and send-to-read."""
    import pulsar

    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"persistent://public/default/bench-latency-{time.time_ns()}"
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=1, block_if_queue_full=True
    )
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    acks: list[float] = []
    ends: list[float] = []
    count = int(rate * LATENCY_SECONDS)
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                msg = reader.read_next(200)
            except Exception:  # noqa: BLE001 - pulsar.Timeout: check the flag again
                if stop.is_set():
                    return
                continue
            ends.append(time.perf_counter() - float(msg.data()[3:23]))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    padding = b"x" * max(0, size - 23)
    start = time.perf_counter()
    for _ in due_in_ticks(count, rate, lambda: time.sleep(PACE_SECONDS)):
        sent = time.perf_counter()

        def acked(result: Any, _mid: Any, sent: float = sent) -> None:
            acks.append(time.perf_counter() - sent)

        producer.send_async(b"lat" + f"{sent:20.6f}".encode() + padding, acked)
    producer.flush()
    achieved = count / (time.perf_counter() - start)
    time.sleep(1)
    stop.set()
    thread.join(30)
    client.close()
    return latency_result(rate, achieved, acks, ends)


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
    # the reader's making (lookup, subscribe) is timed, as the Kafka consumer's first Fetch
    # (which opens the partitions on the gateway) is in `kafka_consume`
    start = time.perf_counter()
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=5000)
    seen = 0
    while seen < records:
        reader.read_next(10000)
        seen += 1
    consume = time.perf_counter() - start
    client.close()
    return produce, consume


def cold_fetch(gateway: GatewayProcess, partitions: int, records: int) -> dict[str, float]:
    """Restart the gateway and fetch the `pulsar`-format topic from its start: nothing is in
    the tail cache, so every record comes from Pulsar through the history readers."""
    gateway.stop()
    gateway.start()
    assert gateway.process is not None
    cpu: dict[str, float] = {}
    with measured([gateway.process.pid, gateway.broker_pid()], cpu, "fetch"):
        seconds = kafka_consume(gateway.bootstrap, "bench", partitions, records)
    return {"consume_s": seconds, "cpu_fetch_s": cpu["fetch"]}


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
    parser.add_argument("--profile", action="store_true", help="py-spy flame graphs")
    parser.add_argument("--no-tansu", action="store_true", help="leave tansu out")
    parser.add_argument(
        "--parallel-records",
        type=int,
        default=1_000_000,
        help="records of the fetch with a consumer process per partition (kafka format, tansu)",
    )
    parser.add_argument(
        "--compression",
        default="none",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="the producers' codec (every peer; the gateway's fetch serves it back)",
    )
    args = parser.parse_args()
    n, size, parts = args.records, args.size, args.partitions
    results: dict[str, Any] = {
        "records": n,
        "size": size,
        "partitions": parts,
        "compression": args.compression,
        "peers": {},
        "latency": {},
        "parallel_fetch": {},
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # compiled twins or not (docs/compiled.md): the gateways run this tree
            "gateway_hot_modules": HOT_MODULES,
            "load_average_at_start": os.getloadavg(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    flames = {
        "produce": args.out.with_name(args.out.name + "-produce.svg"),
        "fetch": args.out.with_name(args.out.name + "-fetch.svg"),
    }
    with tempfile.TemporaryDirectory() as scratch, Progress(console=console) as progress:
        task = progress.add_task("gateway", total=6)
        gateway = GatewayProcess(Path(scratch) / "gw").start()
        try:
            time.sleep(1)
            assert gateway.process is not None
            gw_pid = gateway.process.pid
            servers = [gw_pid, gateway.broker_pid()]
            alone: dict[str, float] = {}  # the gateway process alone, without its broker
            idle = rss_mib(gw_pid)
            create_topic(gateway.bootstrap, parts)
            cpu: dict[str, float] = {}
            with (
                flame_graph(gw_pid, flames["produce"], args.profile),
                measured(servers, cpu, "produce"),
                measured([gw_pid], alone, "produce"),
            ):
                produce = kafka_produce(gateway.bootstrap, "bench", n, size, args.compression)
            loaded = rss_mib(gw_pid)
            progress.advance(task)
            with (
                flame_graph(gw_pid, flames["fetch"], args.profile),
                measured(servers, cpu, "fetch"),
                measured([gw_pid], alone, "fetch"),
            ):
                consume = kafka_consume(gateway.bootstrap, "bench", parts, n)
            peak = max(loaded, rss_mib(gw_pid))
            results["peers"]["gateway"] = {
                "produce_s": produce,
                "consume_s": consume,
                "cpu_produce_s": cpu["produce"],
                "cpu_fetch_s": cpu["fetch"],
                "gateway_process_cpu_produce_s": alone["produce"],
                "gateway_process_cpu_fetch_s": alone["fetch"],
                "rss_idle_mib": idle,
                "rss_load_mib": peak,
            }
            progress.advance(task)
            # the same, on a topic in the `kafka` entry format (a message per batch)
            create_topic(gateway.bootstrap, parts, "bench-kf", {"pulsar.entry.format": "kafka"})
            with measured(servers, cpu, "produce"):
                produce = kafka_produce(gateway.bootstrap, "bench-kf", n, size, args.compression)
            with measured(servers, cpu, "fetch"):
                consume = kafka_consume(gateway.bootstrap, "bench-kf", parts, n)
            results["peers"]["gateway, kafka format"] = {
                "produce_s": produce,
                "consume_s": consume,
                "cpu_produce_s": cpu["produce"],
                "cpu_fetch_s": cpu["fetch"],
                "rss_load_mib": max(peak, rss_mib(gw_pid)),
            }
            create_topic(
                gateway.bootstrap, parts, "bench-kf-wide", {"pulsar.entry.format": "kafka"}
            )
            kafka_produce(gateway.bootstrap, "bench-kf-wide", args.parallel_records, size)
            results["parallel_fetch"]["gateway, kafka format"] = parallel_fetch(
                gateway.bootstrap, "bench-kf-wide", parts, servers
            )
            progress.advance(task)
            service_url = f"pulsar://127.0.0.1:{gateway.broker_port}"
            broker = [gateway.broker_pid()]
            before = cpu_seconds(broker)
            direct_p, direct_c = pulsar_direct(service_url, n, size)
            results["peers"]["pulsar-client direct"] = {
                "produce_s": direct_p,
                "consume_s": direct_c,
                # the broker only: produce and read are not timed apart from /proc
                "cpu_produce_s": (cpu_seconds(broker) - before) * direct_p / (direct_p + direct_c),
                "cpu_fetch_s": (cpu_seconds(broker) - before) * direct_c / (direct_p + direct_c),
            }
            progress.advance(task)
            # latency at one rate for every peer (LATENCY_MAX_RATE)
            rate = min(0.5 * n / results["peers"]["gateway"]["produce_s"], LATENCY_MAX_RATE)
            create_topic(gateway.bootstrap, parts, "bench-latency")
            results["latency"]["gateway"] = kafka_latency(
                gateway.bootstrap, "bench-latency", rate, size
            )
            kf_config = {"pulsar.entry.format": "kafka"}
            create_topic(gateway.bootstrap, parts, "bench-latency-kf", kf_config)
            results["latency"]["gateway, kafka format"] = kafka_latency(
                gateway.bootstrap, "bench-latency-kf", rate, size
            )
            results["latency"]["pulsar-client direct"] = pulsar_latency(service_url, rate, size)
            progress.advance(task)
            results["cold_fetch"] = cold_fetch(gateway, parts, n)
            progress.advance(task)
        finally:
            gateway.stop()
        if not args.no_tansu:
            task = progress.add_task("tansu", total=1)
            tansu = TansuProcess().start()
            try:
                bootstrap = tansu.bootstrap
                tansu_pids = [tansu.process.pid]
                create_topic(bootstrap, parts)
                with measured(tansu_pids, cpu, "produce"):
                    produce = kafka_produce(bootstrap, "bench", n, size, args.compression)
                with measured(tansu_pids, cpu, "fetch"):
                    consume = kafka_consume(bootstrap, "bench", parts, n)
                results["peers"]["tansu"] = {
                    "produce_s": produce,
                    "consume_s": consume,
                    "cpu_produce_s": cpu["produce"],
                    "cpu_fetch_s": cpu["fetch"],
                    "rss_load_mib": rss_mib(tansu.process.pid),
                }
                create_topic(bootstrap, parts, "bench-wide")
                kafka_produce(bootstrap, "bench-wide", args.parallel_records, size)
                results["parallel_fetch"]["tansu"] = parallel_fetch(
                    bootstrap, "bench-wide", parts, tansu_pids
                )
                create_topic(bootstrap, parts, "bench-latency")
                # at the rate of the gateway's latency runs above
                results["latency"]["tansu"] = kafka_latency(bootstrap, "bench-latency", rate, size)
                progress.advance(task)
            finally:
                tansu.stop()
    results["environment"]["load_average_at_end"] = os.getloadavg()
    _print_and_write(results, args.out, flames if args.profile else {})


def _print_and_write(results: dict[str, Any], out: Path, flames: dict[str, Path]) -> None:
    n, size, parts = results["records"], results["size"], results["partitions"]
    table = Table(title=f"{n:,} records x {size} B, {parts} partitions")
    rows = []
    columns = (
        "peer",
        "produce rec/s",
        "fetch rec/s",
        "server CPU us/rec produce",
        "server CPU us/rec fetch",
    )
    for column in columns:
        table.add_column(column, justify="right")
    peers = results["peers"]
    for peer, numbers in peers.items():
        numbers["produce_rps"] = n / numbers["produce_s"]
        numbers["consume_rps"] = n / numbers["consume_s"]
        numbers["cpu_us_per_record_produce"] = numbers["cpu_produce_s"] / n * 1e6
        numbers["cpu_us_per_record_fetch"] = numbers["cpu_fetch_s"] / n * 1e6
        row = {
            "peer": peer,
            "produce rec/s": f"{numbers['produce_rps']:,.0f}",
            "fetch rec/s": f"{numbers['consume_rps']:,.0f}",
            "server CPU us/rec produce": f"{numbers['cpu_us_per_record_produce']:.1f}",
            "server CPU us/rec fetch": f"{numbers['cpu_us_per_record_fetch']:.1f}",
        }
        rows.append(row)
        table.add_row(*row.values())
    cold = results.get("cold_fetch")
    if cold:
        cold["consume_rps"] = n / cold["consume_s"]
        cold["cpu_us_per_record_fetch"] = cold["cpu_fetch_s"] / n * 1e6
        row = {
            "peer": "gateway, fetch after a restart",
            "produce rec/s": "-",
            "fetch rec/s": f"{cold['consume_rps']:,.0f}",
            "server CPU us/rec produce": "-",
            "server CPU us/rec fetch": f"{cold['cpu_us_per_record_fetch']:.1f}",
        }
        rows.append(row)
        table.add_row(*row.values())
    console.print(table)
    parallel = results["parallel_fetch"]
    for peer, numbers in parallel.items():
        records = numbers["records"]
        numbers["consume_rps"] = records / numbers["consume_s"]
        numbers["cpu_us_per_record_fetch"] = numbers["cpu_fetch_s"] / records * 1e6
        numbers["client_cpu_us_per_record"] = numbers["client_cpu_s"] / records * 1e6
        # share of the machine's cores the consumer processes kept busy: near 1 means the
        # clients, not the server, set the rate
        numbers["client_core_share"] = numbers["client_cpu_s"] / (
            numbers["consume_s"] * (os.cpu_count() or 1)
        )
        console.print(
            f"parallel fetch, {peer}: {numbers['consume_rps']:,.0f} rec/s"
            f" ({parts} consumer processes, {records:,.0f} records), server CPU"
            f" {numbers['cpu_us_per_record_fetch']:.2f} us/rec, consumers"
            f" {numbers['client_cpu_us_per_record']:.2f} us/rec"
            f" ({numbers['client_core_share']:.0%} of the cores)"
        )
    gw, direct = peers["gateway"], peers["pulsar-client direct"]
    ratios = {
        "gateway/direct produce": gw["produce_rps"] / direct["produce_rps"],
        "gateway/direct fetch": gw["consume_rps"] / direct["consume_rps"],
        "gateway/direct CPU per record, produce": gw["cpu_us_per_record_produce"]
        / direct["cpu_us_per_record_produce"],
        "gateway/direct CPU per record, fetch": gw["cpu_us_per_record_fetch"]
        / direct["cpu_us_per_record_fetch"],
    }
    if cold:
        ratios["gateway/direct fetch after restart"] = cold["consume_rps"] / direct["consume_rps"]
    if "tansu" in peers:
        kf, tansu = peers["gateway, kafka format"], peers["tansu"]
        ratios["gateway/tansu produce"] = gw["produce_rps"] / tansu["produce_rps"]
        ratios["gateway/tansu fetch"] = gw["consume_rps"] / tansu["consume_rps"]
        ratios["gateway kafka format/tansu produce"] = kf["produce_rps"] / tansu["produce_rps"]
        ratios["gateway kafka format/tansu fetch"] = kf["consume_rps"] / tansu["consume_rps"]
    if "tansu" in parallel:
        ratios[f"gateway kafka format/tansu fetch, {parts} consumer processes"] = (
            parallel["gateway, kafka format"]["consume_rps"] / parallel["tansu"]["consume_rps"]
        )
    latency = results["latency"]
    if "tansu" in latency:
        for peer in ("gateway", "gateway, kafka format"):
            name = "gateway" if peer == "gateway" else "gateway kafka format"
            ratios[f"{name}/tansu produce p99 latency"] = (
                latency[peer]["produce"]["p99_ms"] / latency["tansu"]["produce"]["p99_ms"]
            )
    results["ratios"] = ratios
    for name, ratio in ratios.items():
        console.print(f"{name}: {ratio:.2f}x")
    for peer, numbers in results["latency"].items():
        console.print(
            f"latency {peer} at {numbers['rate']:,.0f} rec/s"
            f" (achieved {numbers['achieved_rate']:,.0f}): produce p50"
            f" {numbers['produce']['p50_ms']:.1f} ms p99 {numbers['produce']['p99_ms']:.1f} ms;"
            f" end to end p50 {numbers['end_to_end']['p50_ms']:.1f} ms"
            f" p99 {numbers['end_to_end']['p99_ms']:.1f} ms"
        )
    console.print(
        "gateway process alone (without its broker), CPU per record: produce"
        f" {gw['gateway_process_cpu_produce_s'] / n * 1e6:.1f} us,"
        f" fetch {gw['gateway_process_cpu_fetch_s'] / n * 1e6:.1f} us"
    )
    console.print(
        f"gateway RSS: idle {gw['rss_idle_mib']:.0f} MiB, under load {gw['rss_load_mib']:.0f} MiB"
    )
    charts = [
        bar_chart(
            "Produce (records/s)", [(p, v["produce_rps"]) for p, v in peers.items()], "rec/s"
        ),
        bar_chart(
            "Fetch (records/s)",
            [(p, v["consume_rps"]) for p, v in peers.items()]
            + ([("gateway, after a restart", cold["consume_rps"])] if cold else []),
            "rec/s",
        ),
        bar_chart(
            "Server CPU per record, produce (us)",
            [(p, v["cpu_us_per_record_produce"]) for p, v in peers.items()],
            "us",
        ),
        bar_chart(
            "Server CPU per record, fetch (us)",
            [(p, v["cpu_us_per_record_fetch"]) for p, v in peers.items()],
            "us",
        ),
    ]
    if parallel:
        charts.append(
            bar_chart(
                f"Fetch with {parts} consumer processes (records/s)",
                [(p, v["consume_rps"]) for p, v in parallel.items()],
                "rec/s",
            )
        )
    for kind in ("produce", "end_to_end"):
        charts.append(
            bar_chart(
                f"Latency {kind.replace('_', ' ')} p99 (ms)",
                [(p, v[kind]["p99_ms"]) for p, v in results["latency"].items()],
                "ms",
            )
        )
    for phase, svg in flames.items():
        if svg.exists():
            encoded = base64.b64encode(svg.read_bytes()).decode()
            charts.append(
                f"<h2>Gateway flame graph, pulsar-format {phase} (py-spy)</h2>"
                f'<img style="max-width:100%" src="data:image/svg+xml;base64,{encoded}">'
            )
    json_path, html_path = write_report(out, "Kafka throughput", results, charts, rows)
    console.print(f"report: {json_path} and {html_path}")


if __name__ == "__main__":
    main()
