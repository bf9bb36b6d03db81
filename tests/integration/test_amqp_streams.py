"""Stream queues seen from the other protocols (issue 36): what AMQP publishers append to a
stream is partition 0 of the Kafka topic of the same name, at the same offsets, and a
Pulsar reader of that partition's topic reads the same bodies. Retention moves the first
offset a stream consumer may start at. The AMQP behaviour itself is compared with
RabbitMQ in tests/differential/ (scenario `stream_queue`).
"""

from __future__ import annotations

import time
import uuid

import pika
import pulsar
from confluent_kafka import Consumer

from harness.gateway_process import GatewayProcess


def _declare_and_publish(url: str, name: str, bodies: list[bytes], **arguments: object) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", **arguments})
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", name, body)
    conn.close()


def _stream_from(url: str, name: str, offset: object, expect: int) -> list[tuple[int, bytes]]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list[tuple[int, bytes]] = []

    def on_message(channel, method, props, body) -> None:  # noqa: ANN001
        got.append((props.headers["x-stream-offset"], body))
        channel.basic_ack(method.delivery_tag)

    ch.basic_consume(name, on_message, arguments={"x-stream-offset": offset})
    deadline = time.time() + 5
    while len(got) < expect and time.time() < deadline:
        conn.process_data_events(time_limit=0.05)
    conn.process_data_events(time_limit=0.2)
    conn.close()
    return got


def test_kafka_consumers_and_pulsar_readers_see_what_amqp_appends(gateway: GatewayProcess) -> None:
    name = f"events-{uuid.uuid4().hex[:8]}"
    bodies = [f"e{i}".encode() for i in range(20)]
    _declare_and_publish(gateway.amqp_url, name, bodies)
    kafka = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"g-{name}",
            "auto.offset.reset": "earliest",
        }
    )
    kafka.subscribe([name])
    seen: list[tuple[int, int, bytes]] = []
    deadline = time.time() + 20
    while len(seen) < len(bodies) and time.time() < deadline:
        record = kafka.poll(0.2)
        if record is not None and record.error() is None:
            seen.append((record.partition(), record.offset(), record.value()))
    kafka.close()
    assert seen == [(0, i, body) for i, body in enumerate(bodies)]
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}")
    try:
        reader = client.create_reader(
            f"persistent://public/default/{name}-partition-0", pulsar.MessageId.earliest
        )
        read = [reader.read_next(5000).data() for _ in bodies]
    finally:
        client.close()
    assert read == bodies
    # and the AMQP offsets are Kafka's
    assert _stream_from(gateway.amqp_url, name, 15, 5) == [
        (15 + i, bodies[15 + i]) for i in range(5)
    ]


def test_retention_moves_the_first_offset(gateway: GatewayProcess) -> None:
    by_bytes = f"bytes-{uuid.uuid4().hex[:8]}"
    _declare_and_publish(
        gateway.amqp_url, by_bytes, [b"x" * 100 for _ in range(10)], **{"x-max-length-bytes": 350}
    )
    assert [offset for offset, _ in _stream_from(gateway.amqp_url, by_bytes, "first", 3)] == [
        7,
        8,
        9,
    ]
    by_age = f"age-{uuid.uuid4().hex[:8]}"
    _declare_and_publish(gateway.amqp_url, by_age, [b"old"], **{"x-max-age": "1s"})
    time.sleep(1.1)  # the message must be past its age: nothing else shows that
    _declare_and_publish(gateway.amqp_url, by_age, [b"new"], **{"x-max-age": "1s"})
    assert _stream_from(gateway.amqp_url, by_age, "first", 1) == [(1, b"new")]
    assert _stream_from(gateway.amqp_url, by_age, 0, 1) == [(1, b"new")]  # clamped
