"""What a publisher can make the gateway hold is bounded, with the defaults (issue 10, item 13).

Seen by real clients: an open transaction past amqp.max_tx_bytes (128 MiB) closes its
channel with 406 PRECONDITION_FAILED; so does a content header that would take the bodies a
connection is still receiving past amqp.max_incoming_body_bytes (256 MiB, two largest
messages). The connection, its other channels and the gateway go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
from pamqp import commands, frame, header

from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.handlers.amqp.frames import FrameReader, encode_method
from tests.support.gateway_process import GatewayProcess
from tests.support.raw_amqp_socket import next_method, open_connection

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


def test_a_third_largest_message_trickling_in_at_once_is_refused_at_its_header(
    gateway: GatewayProcess,
) -> None:
    largest = AmqpSection().max_message_bytes
    sock = open_connection(gateway.amqp_port)
    reader = FrameReader(0)
    publish = commands.Basic.Publish(exchange="", routing_key="nowhere")
    for number in (1, 2, 3):
        sock.sendall(encode_method(number, commands.Channel.Open()))
        assert isinstance(next_method(sock, reader), commands.Channel.OpenOk)
    for number in (1, 2, 3):  # headers announcing 128 MiB each, bodies to come
        announced = header.ContentHeader(0, largest, commands.Basic.Properties())
        sock.sendall(encode_method(number, publish) + frame.marshal(announced, number))
    close = next_method(sock, reader)
    assert isinstance(close, commands.Channel.Close), close
    assert close.reply_code == 406
    assert "amqp.max_incoming_body_bytes" in close.reply_text
    # the connection goes on: the refused channel is released and a new one opens
    sock.sendall(encode_method(3, commands.Channel.CloseOk()))
    sock.sendall(encode_method(4, commands.Channel.Open()))
    assert isinstance(next_method(sock, reader), commands.Channel.OpenOk)
    sock.close()
    assert gateway.process is not None and gateway.process.poll() is None
