"""Kafka records and Pulsar messages, both ways, with the KoP mapping."""

from __future__ import annotations

import time

import pulsar
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.partition_records import read_messages
from harness.waiting import wait_until


def _pulsar_client(gateway) -> pulsar.Client:
    return pulsar.Client(
        f"pulsar://127.0.0.1:{gateway.broker_port}",
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )


def _read_from_start(gateway, topic_name: str, count: int) -> list:
    """Up to `count` records of partition 0 from offset 0, through the gateway (30 s)."""
    return read_messages(gateway.bootstrap, topic_name, count)


def test_kafka_record_read_by_pulsar_consumer(gateway, topic_name) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(
        topic_name,
        b"value-1",
        b"user-42",
        timestamp=1_700_000_000_123,
        headers=[("trace", b"abc"), ("n", b"1")],
    )
    producer.produce(topic_name, None, b"tombstone", timestamp=1_700_000_000_124)
    producer.produce(
        topic_name,
        b"bin",
        b"\xff\x00key",
        timestamp=1_700_000_000_125,
        headers=[("raw", b"\x00\xff"), ("raw", b"again"), ("nul", None)],
    )
    producer.produce(topic_name, b"no key")
    assert producer.flush(30) == 0

    client = _pulsar_client(gateway)
    reader = client.create_reader(
        f"persistent://public/default/{topic_name}-partition-0", pulsar.MessageId.earliest
    )
    messages = [reader.read_next(10000) for _ in range(4)]
    client.close()
    first, tombstone, binary, keyless = messages
    assert first.data() == b"value-1"
    assert first.partition_key() == "user-42" and first.ordering_key() == "user-42"
    assert {k: v for k, v in first.properties().items() if not k.startswith("__")} == {
        "trace": "abc",
        "n": "1",
    }
    assert first.event_timestamp() == 1_700_000_000_123
    assert tombstone._message.has_null_value()
    assert tombstone.partition_key() == "tombstone"
    assert binary.event_timestamp() == 1_700_000_000_125
    assert "__kafka.headers" in binary.properties()
    assert keyless.partition_key() == ""

    # and the same records read back through Kafka are exactly what was sent
    got = _read_from_start(gateway, topic_name, 4)
    assert [m.key() for m in got] == [b"user-42", b"tombstone", b"\xff\x00key", None]
    assert [m.value() for m in got] == [b"value-1", None, b"bin", b"no key"]
    assert got[0].headers() == [("trace", b"abc"), ("n", b"1")]
    assert got[2].headers() == [("raw", b"\x00\xff"), ("raw", b"again"), ("nul", None)]
    assert got[1].headers() is None and got[3].headers() is None  # no gateway stamps leak
    assert got[0].timestamp()[1] == 1_700_000_000_123


def test_pulsar_message_fetched_by_kafka_clients(gateway, topic_name) -> None:
    # the topic must exist for Kafka clients: auto-created on first metadata request
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"from-kafka")
    assert producer.flush(30) == 0
    client = _pulsar_client(gateway)
    direct = client.create_producer(f"persistent://public/default/{topic_name}-partition-0")
    direct.send(
        b"from-pulsar",
        partition_key="pk",
        properties={"h1": "v1"},
        event_timestamp=1_650_000_000_000,
    )
    direct.send(b"no-event-time")
    client.close()

    got = _read_from_start(gateway, topic_name, 3)
    assert [m.value() for m in got] == [b"from-kafka", b"from-pulsar", b"no-event-time"]
    assert got[1].key() == b"pk"
    assert got[1].headers() == [("h1", b"v1")]
    assert got[1].timestamp()[1] == 1_650_000_000_000
    # publish time stands in for a missing event time
    assert abs(got[2].timestamp()[1] - time.time() * 1000) < 120_000
    assert [m.offset() for m in got] == [0, 1, 2]


def test_six_mib_record_round_trips(gateway, topic_name) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    # above the 1 MB default of max.message.bytes, as in Kafka: the topic raises its limit
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    config = {"max.message.bytes": "10000000"}
    admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name].result(30)
    big = bytes(range(256)) * (6 * 1024 * 1024 // 256)
    producer = Producer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "message.max.bytes": 10_000_000,
            "compression.type": "none",
        }
    )
    producer.produce(topic_name, b"small-before")
    producer.produce(topic_name, big, b"big")
    producer.produce(topic_name, b"small-after")
    assert producer.flush(60) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": "z",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 10_000_000,
            "fetch.max.bytes": 10_000_000,
            "receive.message.max.bytes": 20_000_000,
        }
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.time() + 60
    while len(got) < 3 and time.time() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.close()
    assert [m.value() for m in got] == [b"small-before", big, b"small-after"]
    assert [m.offset() for m in got] == [0, 1, 2]


def test_batching_pulsar_producer_does_not_stall_the_partition(gateway, topic_name) -> None:
    """pulsar-lite drops a client connection when a reader acks a batched entry, and its
    readers then get nothing more: the gateway must notice and reopen its tailer."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "group.id": "b", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    consumer.poll(1)  # the partition is open and tailed from here on
    client = _pulsar_client(gateway)
    batching = client.create_producer(
        f"persistent://public/default/{topic_name}-partition-0",
        batching_enabled=True,
        batching_max_publish_delay_ms=1,
    )
    expected: list[bytes] = []
    got: list[bytes] = []

    def read(count: int) -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg.value())
        return len(got) >= count

    for round_ in range(4):
        for i in range(50):
            batching.send_async(f"p{round_}-{i}".encode(), None)
            expected.append(f"p{round_}-{i}".encode())
        batching.flush()
        # the tailer's reader has read, and acked, this round's batch entry before the next
        wait_until(lambda: read(len(expected)), 30, 0, message=f"round {round_} through Kafka")
    client.close()
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"k1")
    assert producer.flush(30) == 0, "a produce after Pulsar batches stalled"
    wait_until(lambda: read(len(expected) + 1), 30, 0, message="the Kafka record after them")
    consumer.close()
    assert got == expected + [b"k1"]


def test_a_pulsar_message_with_a_bogus_gateway_stamp_is_read_like_any_other(
    gateway, topic_name
) -> None:
    """A native producer may set any property, the gateway's `__gw.seq` included; a value
    that is no sequence must not stop the partition's reader (hostile input through Pulsar)."""
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"first")
    assert producer.flush(30) == 0
    client = _pulsar_client(gateway)
    direct = client.create_producer(f"persistent://public/default/{topic_name}-partition-0")
    direct.send(b"bogus-stamp", properties={"__gw.seq": "not-a-number"})
    direct.send(b"huge-stamp", properties={"__gw.seq": str(2**70)})
    client.close()
    producer.produce(topic_name, b"last")
    assert producer.flush(30) == 0

    got = _read_from_start(gateway, topic_name, 4)
    assert [(m.offset(), m.value()) for m in got] == [
        (0, b"first"),
        (1, b"bogus-stamp"),
        (2, b"huge-stamp"),
        (3, b"last"),
    ]
