"""The soak's healthy Kafka load: confluent-kafka producers (idempotent and not, acks=all)
writing keyed records with per-key sequence numbers, and consumer groups reading them.

Each client runs on its own thread. Producers are paced (a tick every 50 ms) so a stall
shows as a gap between acknowledgements rather than as a slower rate. Non-idempotent
producers keep one request in flight: with more, a retry after an error may reorder a key
even on Kafka, and the soak would blame the gateway for the client's behaviour.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.soak_common import (
    ClientRecord,
    KafkaAck,
    KafkaFailure,
    Timeline,
    kafka_value,
    parse_value,
)

TICK = 0.05
# librdkafka's own retries keep going through a broker outage: a record only fails when
# this passes, so a 20 s stall shows as a gap, not as failures.
MESSAGE_TIMEOUT_MS = 300_000


LOGGER = "soak.librdkafka"


def client_logger(path: Path) -> logging.Logger:
    """librdkafka's log lines go to a file in the report directory, not the terminal."""
    logger = logging.getLogger(LOGGER)
    if not logger.handlers:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": logging.getLogger(LOGGER)})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
    for future in futures.values():
        future.result(60)


class StatsWatch:
    """Turns librdkafka's statistics (once a second) into dropped-connection events: each
    broker connection's `disconnects` counter is exact, unlike error callbacks, which
    librdkafka suppresses when identical ones repeat."""

    def __init__(self, record: ClientRecord, timeline: Timeline) -> None:
        self.record = record
        self.timeline = timeline
        self.seen: dict[str, int] = {}

    def __call__(self, raw: str) -> None:
        stats = json.loads(raw)
        for name, broker in stats.get("brokers", {}).items():
            now = int(broker.get("disconnects", 0))
            if now > self.seen.get(name, 0):
                self.record.drop(
                    self.timeline.now(),
                    f"{name} disconnected ({now - self.seen.get(name, 0)}x, librdkafka stats)",
                )
            self.seen[name] = now


def _base_config(bootstrap: str, record: ClientRecord, timeline: Timeline, log_path: Path) -> dict:
    def on_error(error: KafkaError) -> None:
        record.error(timeline.now(), f"{error.name()}: {error.str()}")

    return {
        "bootstrap.servers": bootstrap,
        "client.id": record.name,
        "statistics.interval.ms": 1000,
        "stats_cb": StatsWatch(record, timeline),
        "error_cb": on_error,
        "logger": client_logger(log_path),
    }


class KafkaProducerLoad(threading.Thread):
    """One paced producer: `keys` keys spread over `topics`, `rate` records a second."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topics: list[str],
        keys: int,
        rate: float,
        idempotent: bool,
        timeline: Timeline,
        log_path: Path,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.topics = topics
        self.keys = [f"{name}/k{i:02d}" for i in range(keys)]
        self.rate = rate
        self.idempotent = idempotent
        self.timeline = timeline
        self.log_path = log_path
        self.record = ClientRecord(name, "kafka", "producer")
        self.acks: list[KafkaAck] = []
        self.failures: list[KafkaFailure] = []
        self.pending: dict[tuple[str, int], tuple[str, float]] = {}
        self.stopping = threading.Event()
        self.done = threading.Event()
        self.fatal: str | None = None
        self.incarnations = 0

    def topic_of(self, index: int) -> str:
        return self.topics[index % len(self.topics)]

    def _make(self) -> Producer:
        self.incarnations += 1
        config = _base_config(self.bootstrap, self.record, self.timeline, self.log_path)
        previous = config["error_cb"]

        def on_error(error: KafkaError) -> None:
            previous(error)
            if error.fatal():
                self.fatal = f"{error.name()}: {error.str()}"

        config.update(
            {
                "error_cb": on_error,
                "acks": "all",
                "enable.idempotence": self.idempotent,
                "linger.ms": 5,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            }
        )
        if not self.idempotent:
            config["max.in.flight.requests.per.connection"] = 1
        return Producer(config)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        parsed = parse_value(message.value())
        if parsed is None:
            return
        _, key, seq = parsed
        now = self.timeline.now()
        topic, _ = self.pending.pop((key, seq), (message.topic(), now))
        if error is None:
            self.acks.append(
                KafkaAck(self.name, key, seq, topic, message.partition(), message.offset(), now)
            )
            self.record.ack_times.append(now)
            self.timeline.count("kafka acknowledged")
        else:
            self.failures.append(KafkaFailure(self.name, key, seq, topic, error.name(), now))
            self.record.error(now, f"delivery failed: {error.name()}")

    def run(self) -> None:
        producer = self._make()
        seqs: Counter[str] = Counter()
        owed = 0.0
        index = 0
        next_tick = time.monotonic()
        try:
            while not self.stopping.is_set():
                owed += self.rate * TICK
                while owed >= 1:
                    key = self.keys[index % len(self.keys)]
                    topic = self.topic_of(index % len(self.keys))
                    seq = seqs[key]
                    try:
                        producer.produce(
                            topic,
                            kafka_value(self.name, key, seq),
                            key.encode(),
                            on_delivery=self._delivered,
                        )
                    except BufferError:
                        self.record.note("local queue full")
                        break
                    self.pending[(key, seq)] = (topic, self.timeline.now())
                    self.record.produced += 1
                    seqs[key] += 1
                    index += 1
                    owed -= 1
                producer.poll(0)
                if self.fatal:
                    producer = self._replace(producer)
                next_tick += TICK
                time.sleep(max(0.0, next_tick - time.monotonic()))
            self._finish(producer)
        finally:
            self.done.set()

    def _replace(self, producer: Producer) -> Producer:
        """A fatal error (an idempotent producer's sequence broken) ends that producer for
        good; the soak counts it as a dropped client and goes on with a new one."""
        self.record.drop(self.timeline.now(), f"fatal error, producer replaced: {self.fatal}")
        self.fatal = None
        producer.purge()
        producer.flush(10)
        return self._make()

    def _finish(self, producer: Producer, timeout: float = 120) -> None:
        """Wait for every outstanding record's answer; what is still open is unresolved."""
        producer.flush(timeout)
        now = self.timeline.now()
        for (key, seq), (topic, _) in list(self.pending.items()):
            self.failures.append(KafkaFailure(self.name, key, seq, topic, "unresolved", now))
        self.pending.clear()


@dataclass
class GroupLedger:
    """What one consumer group's members received during the run."""

    group: str
    seen: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    foreign: int = 0
    commits: int = 0
    commit_errors: list[tuple[float, str]] = field(default_factory=list)
    rebalances: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def missing(self, acked: set[tuple[str, str, int]]) -> int:
        return sum(1 for ident in acked if ident not in self.seen)


class KafkaGroupMember(threading.Thread):
    """One member of a consumer group: consumes, auto-commits every second."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topics: list[str],
        ledger: GroupLedger,
        timeline: Timeline,
        log_path: Path,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.topics = topics
        self.ledger = ledger
        self.timeline = timeline
        self.record = ClientRecord(name, "kafka", "consumer")
        self.stopping = threading.Event()
        self.assigned_once = False
        config = _base_config(bootstrap, self.record, timeline, log_path)
        config.update(
            {
                "group.id": ledger.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "on_commit": self._committed,
            }
        )
        self.consumer = Consumer(config)

    def _committed(self, error: KafkaError | None, partitions: list[Any]) -> None:
        if error is not None and error.code() != KafkaError._NO_OFFSET:
            self.ledger.commit_errors.append((self.timeline.now(), f"{self.name}: {error.name()}"))
            self.record.error(self.timeline.now(), f"commit failed: {error.name()}")
        elif error is None:
            self.ledger.commits += 1

    def _assigned(self, consumer: Consumer, partitions: list[Any]) -> None:
        if self.assigned_once:
            self.ledger.rebalances.append(
                (self.timeline.now(), f"{self.name} assigned {len(partitions)}")
            )
        self.assigned_once = True

    def run(self) -> None:
        self.consumer.subscribe(self.topics, on_assign=self._assigned)
        try:
            while not self.stopping.is_set():
                for message in self.consumer.consume(500, 0.5):
                    error = message.error()
                    if error is not None:
                        self.record.error(self.timeline.now(), f"consume: {error.name()}")
                        continue
                    parsed = parse_value(message.value())
                    if parsed is None:
                        self.ledger.foreign += 1
                        continue
                    with self.ledger.lock:
                        self.ledger.seen[parsed] += 1
                    self.timeline.count("kafka consumed (3 groups)")
        finally:
            self.consumer.close()


def warm_up(bootstrap: str, topic: str, records: int = 2000) -> None:
    """Exercise produce, fetch, join and commit once before the RSS baseline, so the
    baseline is a gateway that has served traffic, not one that has only started."""
    logger = logging.getLogger(LOGGER)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "logger": logger}
    )
    for i in range(records):
        producer.produce(topic, kafka_value("warmup", "w", i), b"w")
        producer.poll(0)
    if producer.flush(180):
        raise RuntimeError("warm-up: records not delivered in 180 s")
    config = {"bootstrap.servers": bootstrap, "group.id": "soak-warmup", "logger": logger}
    consume_all(config, [topic], records, 180, "warm-up")


def consume_all(
    config: dict[str, Any], topics: list[str], records: int, timeout: float, what: str
) -> None:
    """Read `records` records of `topics` from the group's position (the start, for a new
    group) as its one member, or raise."""
    consumer = Consumer({**config, "auto.offset.reset": "earliest"})
    consumer.subscribe(topics)
    seen, deadline = 0, time.monotonic() + timeout
    while seen < records and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(1000, 0.5) if not m.error())
    consumer.close()
    if seen < records:
        raise RuntimeError(f"{what}: consumed {seen} of {records}")
