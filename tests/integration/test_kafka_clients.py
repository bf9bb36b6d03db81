"""confluent-kafka, kafka-python and aiokafka against the gateway: produce with keys to
a 3-partition topic, read back per partition in order, assign + seek, offsets for
times, and topic admin."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

N = 300


def _records() -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % 7}".encode(), f"value-{i}".encode()) for i in range(N)]


def _check_partitioning(rows: list[tuple[int, int, bytes, bytes]]) -> None:
    """rows: (partition, offset, key, value). Same key -> same partition; order kept."""
    partition_of_key: dict[bytes, int] = {}
    per_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for partition, offset, key, value in rows:
        assert partition_of_key.setdefault(key, partition) == partition
        per_partition[partition].append((offset, value))
    for items in per_partition.values():
        offsets = [offset for offset, _ in items]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        numbers = [int(value.split(b"-")[1]) for _, value in items]
        assert numbers == sorted(numbers)
    assert sum(len(items) for items in per_partition.values()) == N


def _confluent_read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rows, eof = [], set()
    deadline = time.time() + 60
    while len(eof) < partitions and time.time() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:  # _PARTITION_EOF
                eof.add(msg.partition())
                continue
            raise AssertionError(msg.error())
        rows.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return rows


def test_confluent_kafka(gateway, topic_name) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(30)
    assert topic_name in admin.list_topics(timeout=10).topics
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 5})
    delivered = []
    for key, value in _records():
        producer.produce(
            topic_name,
            value,
            key,
            on_delivery=lambda err, msg: delivered.append(
                (err, msg.partition(), msg.offset(), msg.value())
            ),
        )
    assert producer.flush(60) == 0
    assert all(err is None for err, *_ in delivered)
    rows = _confluent_read_all(gateway.bootstrap, topic_name, 3)
    _check_partitioning(rows)
    # delivery reports carry the offsets a fetch shows (Produce base offsets are real)
    assert sorted((p, o, v) for _, p, o, v in delivered) == sorted((p, o, v) for p, o, _, v in rows)

    # assign + seek to an offset
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "group.id": "unused2", "enable.auto.commit": False}
    )
    partition0 = sorted(o for p, o, _, _ in rows if p == 0)
    target = partition0[len(partition0) // 2]
    consumer.assign([TopicPartition(topic_name, 0, target)])
    msg = None
    while msg is None or msg.error():
        msg = consumer.poll(5)
    assert msg.offset() == target
    consumer.seek(TopicPartition(topic_name, 0, 1))
    msg = None
    while msg is None or msg.error():
        msg = consumer.poll(5)
    assert msg.offset() == 1

    # offsets_for_times: the first record at or after a timestamp
    stamps = sorted(m.timestamp()[1] for m in [msg])
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, stamps[0])], 10)
    assert found[0].offset <= 1
    future = consumer.offsets_for_times(
        [TopicPartition(topic_name, 0, int(time.time() * 1000) + 3_600_000)], 10
    )
    assert future[0].offset == -1
    consumer.close()

    # configs and cluster
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "delete"
    cluster = admin.describe_cluster().result(30)
    assert [node.port for node in cluster.nodes] == [gateway.kafka_port]

    # grow, then delete: gone at once, also on the embedded broker (a logical deletion:
    # tests/integration/test_delete_topics.py)
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(30)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 4
    admin.delete_topics([topic_name])[topic_name].result(30)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_kafka_python(gateway, topic_name) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    admin.create_topics([KNewTopic(topic_name, 3, 1)])
    assert topic_name in admin.list_topics()
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic_name, value=v, key=k) for k, v in _records()]
    producer.flush(60)
    metas = [f.get(30) for f in futures]
    consumer = KafkaConsumer(
        bootstrap_servers=gateway.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    parts = [KTP(topic_name, p) for p in range(3)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    rows = [(m.partition, m.offset, m.key, m.value) for m in consumer]
    _check_partitioning(rows)
    assert sorted((m.partition, m.offset) for m in metas) == sorted((p, o) for p, o, _, _ in rows)
    # seek, then offsets_for_times
    consumer.seek(parts[0], 2)
    first = next(iter(consumer))
    assert first.offset == 2
    found = consumer.offsets_for_times({parts[0]: first.timestamp})
    assert found[parts[0]].offset <= 2
    consumer.close()
    admin.delete_topics([topic_name])  # gone at once (a logical deletion on the embedded broker)
    assert topic_name not in admin.list_topics()
    admin.close()
    producer.close()


def test_aiokafka(gateway, topic_name) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=gateway.bootstrap)
        await admin.start()
        await admin.create_topics([ANewTopic(topic_name, 3, 1)])
        assert topic_name in await admin.list_topics()
        producer = AIOKafkaProducer(bootstrap_servers=gateway.bootstrap, acks="all")
        await producer.start()
        metas = [
            await producer.send_and_wait(topic_name, value=v, key=k) for k, v in _records()[:60]
        ]
        # the rest pipelined
        sends = [await producer.send(topic_name, value=v, key=k) for k, v in _records()[60:]]
        metas += [await s for s in sends]
        await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=gateway.bootstrap, enable_auto_commit=False)
        await consumer.start()
        parts = [ATP(topic_name, p) for p in range(3)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        rows = []
        while len(rows) < N:
            got = await consumer.getmany(timeout_ms=2000)
            assert got, f"stalled after {len(rows)} records"
            for _tp, messages in got.items():
                rows += [(m.partition, m.offset, m.key, m.value) for m in messages]
        _check_partitioning(rows)
        assert sorted((m.partition, m.offset) for m in metas) == sorted(
            (p, o) for p, o, _, _ in rows
        )
        consumer.seek(parts[1], 3)
        msg = await consumer.getone(parts[1])
        assert msg.offset == 3
        found = await consumer.offsets_for_times({parts[1]: msg.timestamp})
        assert found[parts[1]].offset <= 3
        await consumer.stop()
        deleted = await admin.delete_topics([topic_name])  # gone at once (logically)
        assert [(t[0], t[1]) for t in deleted.topic_error_codes] == [(topic_name, 0)]
        assert topic_name not in await admin.list_topics()
        await admin.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_create_existing_topic_fails(gateway, topic_name, client) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    with pytest.raises(Exception, match="already exists|TOPIC_ALREADY_EXISTS|TopicAlreadyExists"):
        if client == "confluent":
            admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
        else:
            from kafka import KafkaAdminClient
            from kafka.admin import NewTopic as KNewTopic

            KafkaAdminClient(bootstrap_servers=gateway.bootstrap).create_topics(
                [KNewTopic(topic_name, 2, 1)]
            )
