"""`amqp.batched_queue_entries = true` (docs/backend.md, "AMQP queue messages in batched
entries"): queues written as batched entries through the gateway's own Pulsar client keep
RabbitMQ's queue semantics for a client: every confirmed message once, in order, and what
a closed channel held comes again marked redelivered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from harness.gateway_process import GatewayProcess


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path_factory.mktemp("batched"), extra=["--set", "amqp.batched_queue_entries=true"]
    )
    process.start()
    yield process
    assert process.stop() == 0, process.log_tail()


def _take(channel: Any, queue: str, count: int, ack_below: int) -> list[tuple[Any, bytes]]:
    """`count` deliveries; those of a body below `ack_below` acknowledged as they come."""
    got: list[tuple[Any, bytes]] = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=20):
        assert method is not None, f"only {len(got)} of {count} came"
        got.append((method, body))
        if int(body) < ack_below:
            channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    return got


def test_confirmed_messages_come_once_in_order_and_held_ones_come_again(
    batched: GatewayProcess,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(batched.amqp_url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = channel.queue_declare("batched-q", durable=True).method.queue
        for i in range(300):
            channel.basic_publish("", queue, str(i).encode())
        assert channel.queue_declare(queue, passive=True).method.message_count == 300
        reader = connection.channel()
        reader.basic_qos(prefetch_count=50)
        first = _take(reader, queue, 120, ack_below=100)  # 100-119 stay unacknowledged
        assert [int(body) for _, body in first] == list(range(120))
        reader.close()
        again = connection.channel()
        rest = _take(again, queue, 200, ack_below=300)
        assert [int(body) for _, body in rest] == list(range(100, 300))
        assert all(method.redelivered for method, _ in rest[:20])
        assert not any(method.redelivered for method, _ in rest[50:])
        again.cancel()
        assert again.queue_declare(queue, passive=True).method.message_count == 0
    finally:
        connection.close()
