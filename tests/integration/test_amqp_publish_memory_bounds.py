"""What a publisher can make the gateway hold is bounded, with the defaults (issue 10, item 13).

Seen by real clients: an open transaction past amqp.max_tx_bytes (128 MiB) closes its
channel with 406 PRECONDITION_FAILED, and the connection, its other channels and the
gateway go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from pulsar_gateway.gateway.config import AmqpSection
from tests.support.gateway_process import GatewayProcess

MIB = 1024 * 1024


@pytest.fixture
def conn(gateway: GatewayProcess) -> Iterator[pika.BlockingConnection]:
    connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    yield connection
    if connection.is_open:
        connection.close()


def test_an_open_transaction_past_max_tx_bytes_closes_its_channel(
    conn: pika.BlockingConnection,
) -> None:
    queue = f"q-{uuid.uuid4().hex[:10]}"
    limit = AmqpSection().max_tx_bytes
    ch = conn.channel()
    ch.queue_declare(queue, auto_delete=True)
    ch.tx_select()
    body = b"t" * MIB
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        for _ in range(limit // MIB + 1):
            ch.basic_publish("", queue, body)
        ch.tx_commit()  # the close comes back at the latest as the answer to this
    assert closed.value.reply_code == 406
    assert "amqp.max_tx_bytes" in closed.value.reply_text
    # the connection goes on; the dropped transaction stored nothing
    other = conn.channel()
    assert other.queue_declare(queue, passive=True).method.message_count == 0
    other.tx_select()
    other.basic_publish("", queue, b"after")
    other.tx_commit()
    assert other.queue_declare(queue, passive=True).method.message_count == 1
    other.queue_delete(queue)
