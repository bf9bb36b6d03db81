"""A message the Pulsar client resent after a broker crash is stored twice by pulsar-lite
(docs/backend.md, "Producer resends after a reconnect"); an AMQP queue delivers it once.
The soak saw the second copy delivered as a new message right after a broker SIGKILL.
The resend is made here as the client makes it: the same producer name and sequence stamp
on a second stored message."""

from __future__ import annotations

import uuid

import pika
import pulsar

from harness.gateway_process import GatewayProcess
from harness.pika_waits import drain
from pulsar_gateway.gateway.backend.resend_filter import SEQ


def test_a_resent_copy_is_delivered_once(gateway: GatewayProcess) -> None:
    queue = f"resend-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}")
    try:
        producer = client.create_producer(
            f"persistent://public/default/{queue}",
            producer_name=f"gw-{uuid.uuid4().hex}",
            batching_enabled=False,
        )
        for body, sequence in ((b"a", 1), (b"b", 2), (b"a", 1), (b"c", 3)):
            producer.send(body, properties={SEQ: str(sequence)})
        producer.close()
    finally:
        client.close()
    assert drain(channel, queue, quiet=5) == [b"a", b"b", b"c"]
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    connection.close()
