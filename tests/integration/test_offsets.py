"""The four offset invariants of docs/offsets.md, tested directly, with messages that a plain
pulsar-client producer wrote to the partition mixed in."""

from __future__ import annotations

import random
import time

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.gateway_process import GatewayProcess


def _fetch_from(bootstrap: str, topic: str, offset: int, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "inv",
            "enable.auto.commit": False,
            "fetch.max.bytes": 65536,
            "message.max.bytes": 4096,
            "max.partition.fetch.bytes": 4096,
        }
    )
    consumer.assign([TopicPartition(topic, 0, offset)])
    rows = []
    deadline = time.time() + 60
    while len(rows) < count and time.time() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            rows.append((msg.offset(), msg.value()))
    consumer.close()
    return rows


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    offsets: dict[bytes, int] = {}
    for value in values:
        producer.produce(
            topic, value, on_delivery=lambda e, m: offsets.__setitem__(m.value(), m.offset())
        )
    assert producer.flush(60) == 0
    return [offsets[value] for value in values]


@pytest.fixture
def own_gateway(tmp_path):
    process = GatewayProcess(tmp_path / "gw", extra=["--set", "kafka.index_interval=50"])
    process.start()
    yield process
    process.stop()


def test_offsets_dense_stable_exact(own_gateway, topic_name) -> None:
    gw = own_gateway
    kafka_values = [f"kafka-{i}".encode() for i in range(300)]
    first = _produce(gw.bootstrap, topic_name, kafka_values[:150])
    # a plain Pulsar producer writes to the same partition
    client = pulsar.Client(f"pulsar://127.0.0.1:{gw.broker_port}")
    direct = client.create_producer(f"persistent://public/default/{topic_name}-partition-0")
    pulsar_values = [f"pulsar-{i}".encode() for i in range(40)]
    for value in pulsar_values:
        direct.send(value)
    client.close()
    second = _produce(gw.bootstrap, topic_name, kafka_values[150:])
    total = 300 + 40

    everything = _fetch_from(gw.bootstrap, topic_name, 0, total)
    # 1. dense: every message has exactly one offset, counting up by one
    assert [offset for offset, _ in everything] == list(range(total))
    by_value = {value: offset for offset, value in everything}
    assert set(by_value) == set(kafka_values) | set(pulsar_values)
    # 3. produce responses carried the real base offsets
    assert [by_value[v] for v in kafka_values] == first + second
    assert first == list(range(150))
    # 4. fetch from any offset is exact: no duplicate, no gap
    for start in random.Random(7).sample(range(total), 12):
        rows = _fetch_from(gw.bootstrap, topic_name, start, total - start)
        assert rows == everything[start:]

    # 2. stable across a gateway restart (with offsets past the in-memory index)
    assert gw.stop() == 0
    gw.start()
    assert _fetch_from(gw.bootstrap, topic_name, 0, total) == everything
    more = _produce(gw.bootstrap, topic_name, [b"after-restart"])
    assert more == [total]

    # ... and across a backend restart: kill -9 the embedded broker, the gateway restarts it
    gw.kill_broker()
    assert _fetch_from(gw.bootstrap, topic_name, 0, total + 1)[:total] == everything
    assert _produce(gw.bootstrap, topic_name, [b"after-broker-restart"]) == [total + 1]

    # ... and across both together: kill -9 gateway and broker, start again
    gw.kill()
    gw.start()
    rows = _fetch_from(gw.bootstrap, topic_name, 0, total + 2)
    assert rows[:total] == everything
    assert [value for _, value in rows[total:]] == [b"after-restart", b"after-broker-restart"]
