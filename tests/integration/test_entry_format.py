"""Topics in the `kafka` entry format (one Pulsar message per record batch, stored as
sent): dense offsets through batches, reads from inside a batch, history reads after a
restart, offsets for times, a Pulsar producer writing beside it, a group commit in the
middle of a batch mirrored without skipping a record."""

from __future__ import annotations

import time
from pathlib import Path

import pulsar
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from harness.gateway_process import GatewayProcess
from pulsar_gateway.kafka_codec.record_batch import decode_batches

FORMAT = {"pulsar.entry.format": "kafka"}


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=FORMAT)])[topic].result(30)


def _produce(bootstrap: str, topic: str, first: int, count: int, **conf) -> list[tuple]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})
    acked = []
    for number in range(first, first + count):
        producer.produce(
            topic,
            f"value-{number}".encode(),
            f"k{number % 5}".encode(),
            partition=0,
            headers=[("n", str(number).encode())],
            timestamp=1_700_000_000_000 + number,
            on_delivery=lambda err, msg: acked.append((err, msg.offset(), msg.value())),
        )
    assert producer.flush(60) == 0
    assert all(err is None for err, _, _ in acked)
    return acked


def _read(bootstrap: str, topic: str, start: int, count: int) -> list[tuple]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "r", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    got = []
    deadline = time.time() + 60
    while len(got) < count and time.time() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got.append((msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]))
    consumer.close()
    return got


def _expected(start: int, end: int) -> list[tuple]:
    return [
        (
            n,
            f"k{n % 5}".encode(),
            f"value-{n}".encode(),
            [("n", str(n).encode())],
            1_700_000_000_000 + n,
        )
        for n in range(start, end)
    ]


def test_batches_are_stored_as_sent_and_read_record_by_record(gateway, topic_name) -> None:
    _create(gateway.bootstrap, topic_name)
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    assert (
        admin.describe_configs([resource])[resource].result(30)["pulsar.entry.format"].value
        == "kafka"
    )
    acked = _produce(gateway.bootstrap, topic_name, 0, 500, **{"compression.type": "lz4"})
    acked += _produce(gateway.bootstrap, topic_name, 500, 300)
    assert sorted(offset for _, offset, _ in acked) == list(range(800))
    assert all(value == f"value-{offset}".encode() for _, offset, value in acked)
    assert _read(gateway.bootstrap, topic_name, 0, 800) == _expected(0, 800)
    assert _read(gateway.bootstrap, topic_name, 321, 10) == _expected(321, 331)  # mid-batch

    # Pulsar holds one message per batch, not per record
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}")
    reader = client.create_reader(
        f"persistent://public/default/{topic_name}-partition-0", pulsar.MessageId.earliest
    )
    stored = []
    while reader.has_message_available():
        stored.append(reader.read_next(5000))
    assert len(stored) < 100
    assert sum(decode_batches(m.data())[0].record_count for m in stored) == 800
    # each an entry of its own: a stored batch does not wait out the producer's batching
    assert len(stored) > 1
    assert [m.message_id().batch_index() for m in stored] == [-1] * len(stored)

    # a Pulsar producer writing to the same partition: its message is the next record
    producer = client.create_producer(
        f"persistent://public/default/{topic_name}-partition-0", batching_enabled=False
    )
    producer.send(b"from-pulsar", partition_key="pk")
    client.close()
    [(offset, key, value, _headers, _ts)] = _read(gateway.bootstrap, topic_name, 800, 1)
    assert (offset, key, value) == (800, b"pk", b"from-pulsar")

    # offsets for times look inside batches
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "t"})
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, 1_700_000_000_000 + 333)], 10)
    consumer.close()
    assert found[0].offset == 333


def test_offsets_survive_a_restart_and_history_reads(tmp_path: Path, topic_name) -> None:
    """Checkpoints every 50 offsets land on batch starts; a tail of 5 messages forces
    reads below it through history cursors, before and after a restart."""
    settings = ["--set", "kafka.index_interval=50", "--set", "kafka.tail_cache_records=5"]
    gateway = GatewayProcess(tmp_path / "gw", extra=settings).start()
    try:
        _create(gateway.bootstrap, topic_name)
        for round_ in range(6):
            _produce(gateway.bootstrap, topic_name, round_ * 137, 137)
        assert _read(gateway.bootstrap, topic_name, 0, 822) == _expected(0, 822)
        assert _read(gateway.bootstrap, topic_name, 401, 50) == _expected(401, 451)
        gateway.stop()
        gateway.start()
        assert _read(gateway.bootstrap, topic_name, 0, 822) == _expected(0, 822)
        assert _read(gateway.bootstrap, topic_name, 777, 45) == _expected(777, 822)
        _produce(gateway.bootstrap, topic_name, 822, 10)
        assert _read(gateway.bootstrap, topic_name, 820, 12) == _expected(820, 832)
    finally:
        gateway.stop()


def test_group_commit_inside_a_batch_is_mirrored_without_a_gap(gateway, topic_name) -> None:
    _create(gateway.bootstrap, topic_name)
    _produce(gateway.bootstrap, topic_name, 0, 100)
    _produce(gateway.bootstrap, topic_name, 100, 100)
    group = f"g-{topic_name}"
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "group.id": group, "session.timeout.ms": 6000}
    )
    consumer.commit(offsets=[TopicPartition(topic_name, 0, 150)], asynchronous=False)
    consumer.close()
    partition = f"persistent://public/default/{topic_name}-partition-0"
    mirrored = f"__kafka.group.{group}"  # kafka.group_subscription_prefix + the group id
    gateway.wait_for_mirror(partition, mirrored)
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}")
    subscription = client.subscribe(
        partition,
        mirrored,
        consumer_type=pulsar.ConsumerType.Exclusive,
    )
    numbers = []
    try:
        while True:
            for batch in decode_batches(subscription.receive(2000).data()):
                numbers += [int(r.value.split(b"-")[1]) for r in batch.records]
    except pulsar.Timeout:
        pass
    client.close()
    assert numbers == list(range(numbers[0], 200)) and numbers[0] <= 150
    assert numbers[0] >= 100  # the batch holding 150, not everything


def test_idempotent_producer_sequences_count_records_not_batches(gateway, topic_name) -> None:
    """Sequence numbers advance by records; a stored batch is one message but many records."""
    _create(gateway.bootstrap, topic_name)
    acked = _produce(
        gateway.bootstrap,
        topic_name,
        0,
        2000,
        **{"enable.idempotence": True, "batch.num.messages": 100},
    )
    assert sorted(offset for _, offset, _ in acked) == list(range(2000))
    assert _read(gateway.bootstrap, topic_name, 0, 2000) == _expected(0, 2000)
