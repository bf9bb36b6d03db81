"""`pulsar.client = native` against `pulsar-client` (docs/pulsar-protocol.md, "On the data
path"): the same Kafka traffic through a gateway with each setting is read back identically
by a plain pulsar-client reader (every record its own message: value or null, partition and
ordering key, properties, event time) and by a Kafka consumer (offsets, keys, values,
headers, timestamps), also after a gateway restart (the fetch path reading the native
batched entries from storage); and with `native`, a broker SIGKILL or SIGSTOP mid-produce loses
no acknowledged record and stores none twice."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pulsar
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import GatewayProcess
from harness.partition_records import read_to_end
from harness.waiting import wait_until

PARTITIONS = 3
BATCHES = 4
PER_BATCH = 50


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, GatewayProcess]]:
    started: dict[str, GatewayProcess] = {}
    try:
        for choice in ("pulsar-client", "native"):
            started[choice] = GatewayProcess(
                tmp_path_factory.mktemp(choice), extra=["--pulsar-client", choice]
            ).start()
        yield started
    finally:
        for gw in started.values():
            gw.stop()


def _record(partition: int, batch: int, index: int) -> dict:
    n = (partition * BATCHES + batch) * PER_BATCH + index
    return {
        "partition": partition,
        "value": None if n % 7 == 3 else f"value-{n}".encode() * (1 + n % 5),
        "key": None if n % 5 == 1 else (f"key-{n % 11}".encode() if n % 3 else b"\xff\x00k"),
        "headers": [("h", f"{n}".encode()), ("bin", b"\x00\xfe")] if n % 4 == 0 else None,
        "timestamp": 1_700_000_000_000 + n,
    }


def _produce(gw: GatewayProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "acks": "all", "linger.ms": 50})
    for batch in range(BATCHES):  # each flush ends a batch per partition
        for partition in range(PARTITIONS):
            for index in range(PER_BATCH):
                producer.produce(topic, **_record(partition, batch, index))
        assert producer.flush(30) == 0


def _kafka_view(gw: GatewayProcess, topic: str, partition: int) -> list[tuple]:
    consumer = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": "differential",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    rows: list[tuple] = []

    def at_end() -> bool:
        msg = consumer.poll(1)
        if msg is None:
            return False
        if msg.error():
            return msg.error().code() == KafkaError._PARTITION_EOF
        rows.append((msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()))
        return False

    try:
        wait_until(at_end, 60, 0, f"the end of {topic}-{partition}")
    finally:
        consumer.close()
    return rows


def _pulsar_view(gw: GatewayProcess, topic: str, partition: int, count: int) -> list[tuple]:
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{gw.broker_port}",
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic}-partition-{partition}",
            pulsar.MessageId.earliest,
        )
        rows: list[tuple] = []
        last = None
        while len(rows) < count:
            msg = reader.read_next(10_000)
            mid = msg.message_id()
            at = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if last is not None and at <= last:
                continue  # pulsar-lite readers may replay (docs/backend.md)
            last = at
            null = msg._message.has_null_value()
            properties = msg.properties()
            # where the Kafka client cut its batches ("more follows" marks) is its timing's
            properties["__gw.seq"] = properties["__gw.seq"].rstrip("+")
            rows.append(
                (
                    None if null else msg.data(),
                    msg.partition_key(),
                    msg.ordering_key(),
                    properties,
                    msg.event_timestamp(),
                )
            )
        return rows
    finally:
        client.close()


def test_the_same_traffic_reads_back_identically_through_either_client(gateways) -> None:
    topic = "differential"
    for gw in gateways.values():
        _produce(gw, topic)
    per_partition = BATCHES * PER_BATCH
    views: dict[str, list] = {}
    for choice, gw in gateways.items():
        views[choice] = [
            (_kafka_view(gw, topic, p), _pulsar_view(gw, topic, p, per_partition))
            for p in range(PARTITIONS)
        ]
    reference, native = views["pulsar-client"], views["native"]
    for partition in range(PARTITIONS):
        kafka_rows = native[partition][0]
        assert [row[0] for row in kafka_rows] == list(range(per_partition))  # dense
        expected = [_record(partition, b, i) for b in range(BATCHES) for i in range(PER_BATCH)]
        assert [(r[1], r[2], r[4][1]) for r in kafka_rows] == [
            (e["key"], e["value"], e["timestamp"]) for e in expected
        ]
        assert kafka_rows == reference[partition][0]
        assert native[partition][1] == reference[partition][1]
    # ... and after a restart, read from storage rather than the tail cache
    gw = gateways["native"]
    assert gw.stop() == 0
    gw.start()
    for partition in range(PARTITIONS):
        assert _kafka_view(gw, topic, partition) == reference[partition][0]


def test_native_records_are_batched_one_entry_per_kafka_batch(gateways) -> None:
    gw = gateways["native"]
    topic = "entries"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 1000})
    # known before producing: records for a topic librdkafka has no metadata for yet are
    # parked, and flush() sent them as they were moved over, round 0 in six batches (cc51)
    producer.list_topics(topic, timeout=30)
    for round_number in range(3):
        for i in range(100):
            producer.produce(topic, b"%d-%d" % (round_number, i), partition=0)
        assert producer.flush(30) == 0
    client = pulsar.Client(f"pulsar://127.0.0.1:{gw.broker_port}")
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic}-partition-0", pulsar.MessageId.earliest
        )
        entries: Counter[tuple[int, int]] = Counter()
        for _ in range(300):
            msg = reader.read_next(10_000)
            assert msg.producer_name().endswith(".native")
            mid = msg.message_id()
            entries[(mid.ledger_id(), mid.entry_id())] += 1
    finally:
        client.close()
    # the first record opens the ledger alone, the rest of each Kafka batch is one entry
    # (a lone first record again only if the backend looked unreachable meanwhile)
    sizes = [entries[key] for key in sorted(entries)]
    assert sizes[0] == 1 and len(sizes) <= 6 and sorted(sizes)[-2:] == [100, 100], sizes
    assert read_to_end(gw.bootstrap, topic) == [(n, b"%d-%d" % divmod(n, 100)) for n in range(300)]


def _produce_through(gw: GatewayProcess, topic: str, fault: Callable[[], None]) -> None:
    """An idempotent producer writes while `fault` happens: afterwards every acknowledged
    record is stored once, in order, at dense offsets, and none failed."""
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "delivery.timeout.ms": 120_000,
        }
    )
    acknowledged: list[bytes] = []
    failed: list[str] = []

    def delivered(err, msg) -> None:
        if err is None:
            acknowledged.append(msg.value())
        else:
            failed.append(str(err))

    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            try:
                producer.produce(topic, b"r%06d" % n, partition=0, on_delivery=delivered)
            except BufferError:  # a stalled broker: the client's queue is full, wait
                producer.poll(0.1)
                continue
            n += 1
            if n % 200 == 0:
                producer.poll(0)
                time.sleep(0.01)
        producer.flush(120)

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        wait_until(lambda: len(acknowledged) > 2000, 60, 0.05, "records before the fault")
        fault()
        seen = len(acknowledged)
        wait_until(lambda: len(acknowledged) > seen + 2000, 90, 0.05, "records after it")
    finally:
        stop.set()
        worker.join(150)
    assert not failed, failed[:3]
    rows = read_to_end(gw.bootstrap, topic, timeout=90)
    values = [value for _, value in rows]
    assert [offset for offset, _ in rows] == list(range(len(rows)))
    assert len(values) == len(set(values)), "a record stored twice"
    assert set(acknowledged) <= set(values), "an acknowledged record lost"
    assert values == sorted(values)  # in the order produced


def test_a_broker_kill_mid_produce_loses_no_acknowledged_record(gateways) -> None:
    _produce_through(gateways["native"], "fault-kill", gateways["native"].kill_broker)


def test_a_stalled_broker_loses_no_acknowledged_record_and_health_says_so(gateways) -> None:
    """SIGSTOP for 6 s: the connections stay up and nothing answers; /health says the
    backend is unreachable, and once it runs again everything goes on."""
    gw = gateways["native"]

    def stall() -> None:
        broker = gw.broker_pid()
        os.kill(broker, signal.SIGSTOP)
        try:
            # GatewayProcess.health is None while /health answers 503 (the gateway runs)
            wait_until(lambda: gw.health() is None, 20, 0.1, "/health to answer 503")
            time.sleep(3)
        finally:
            os.kill(broker, signal.SIGCONT)
        wait_until(lambda: (gw.health() or {}).get("ok"), 30, 0.1, "/health ok again")

    _produce_through(gw, "fault-stall", stall)


def test_a_kafka_batch_over_the_broker_message_size_is_split(gateways) -> None:
    """Four 2 MiB records in one Kafka batch (8 MiB, over pulsar-lite's 5 MiB): stored as
    several entries, read back whole and in order by Kafka and by pulsar-client."""
    gw = gateways["native"]
    topic = "big-batch"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    config = {"max.message.bytes": "20000000"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "message.max.bytes": 20_000_000,
            "batch.size": 20_000_000,
            "linger.ms": 500,
            "compression.type": "none",
        }
    )
    values = [bytes([65 + i]) * (2 << 20) for i in range(5)]
    for i, value in enumerate(values):
        producer.produce(topic, value, b"k%d" % i, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": "big",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 20_000_000,
            "fetch.max.bytes": 20_000_000,
            "receive.message.max.bytes": 40_000_000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 60
    while len(got) < len(values) and time.time() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert got == [(i, b"k%d" % i, value) for i, value in enumerate(values)]
    pulsar_rows = _pulsar_view(gw, topic, 0, len(values))
    assert [(row[0], row[1]) for row in pulsar_rows] == [
        (value, f"k{i}") for i, value in enumerate(values)
    ]
