"""What a publisher can make the gateway hold is bounded, with the defaults (issue 10, item 13).

Seen by real clients: an open transaction past amqp.max_tx_bytes (128 MiB) closes its
channel with 406 PRECONDITION_FAILED; so does a content header that would take the bodies a
connection is still receiving past amqp.max_incoming_body_bytes (256 MiB, two largest
messages). The connection, its other channels and the gateway go on. And while the
publishes awaiting the store (a frozen broker) hold amqp.max_in_flight_bytes, the gateway
stops reading the publisher's socket and tells it connection.blocked, then
connection.unblocked once the broker is back.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pamqp import commands, frame, header

from harness.gateway_process import GatewayProcess
from harness.raw_amqp_socket import next_method, open_connection
from harness.waiting import wait_until
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.handlers.amqp.frames import (
    PROTOCOL_HEADER,
    FrameReader,
    MethodFrame,
    encode_content,
    encode_method,
)

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


def _open_announcing_blocked(port: int) -> tuple[socket.socket, FrameReader]:
    """A raw connection whose client properties announce the connection.blocked capability."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    reader = FrameReader(0)
    sock.sendall(PROTOCOL_HEADER)
    assert isinstance(next_method(sock, reader), commands.Connection.Start)
    login = commands.Connection.StartOk(
        client_properties={"capabilities": {"connection.blocked": True}},
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    )
    sock.sendall(encode_method(0, login))
    tune = next_method(sock, reader)
    assert isinstance(tune, commands.Connection.Tune)
    tune_ok = commands.Connection.TuneOk(
        channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
    )
    sock.sendall(encode_method(0, tune_ok) + encode_method(0, commands.Connection.Open("/")))
    assert isinstance(next_method(sock, reader), commands.Connection.OpenOk)
    return sock, reader


def _methods(sock: socket.socket, reader: FrameReader) -> list[object]:
    """The methods the gateway has sent so far, without waiting for more."""
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(1 << 20)
            assert chunk, "the gateway closed the connection"
            reader.feed(chunk)
    except BlockingIOError:
        pass
    found = []
    while (item := reader.next_frame()) is not None:
        if isinstance(item, MethodFrame):
            found.append(item.method)
    return found


def test_publishes_awaiting_a_frozen_broker_block_the_publisher_by_bytes(tmp_path: Path) -> None:
    limit = 4 * MIB
    total = 64 * MIB
    extra = ["--set", f"amqp.max_in_flight_bytes={limit}"]
    gw = GatewayProcess(tmp_path / "gw", extra=extra).start()
    try:
        sock, reader = _open_announcing_blocked(gw.amqp_port)
        queue = "frozen-broker"
        sock.sendall(encode_method(1, commands.Channel.Open()))
        assert isinstance(next_method(sock, reader), commands.Channel.OpenOk)
        sock.sendall(encode_method(1, commands.Queue.Declare(queue=queue)))
        assert isinstance(next_method(sock, reader), commands.Queue.DeclareOk)
        publish = commands.Basic.Publish(exchange="", routing_key=queue)
        flood = encode_content(
            1, publish, b"f" * MIB, commands.Basic.Properties().marshal(), 131072
        ) * (total // MIB)
        view = memoryview(flood)
        sent = 0
        broker = gw.broker_pid()
        os.kill(broker, signal.SIGSTOP)
        try:
            # send until the gateway has stopped reading (no progress for 2 s)
            sock.settimeout(2)
            try:
                while sent < len(flood):
                    sent += sock.send(view[sent : sent + 64 * 1024])
            except TimeoutError:
                pass
            blocked = _methods(sock, reader)
            assert gw.metric("gateway_amqp_blocked_connections") == 1
            held = gw.metric("gateway_amqp_publish_held_bytes", stage="in_flight")
            assert limit <= held < 2 * limit, held
        finally:
            os.kill(broker, signal.SIGCONT)
        print(f"the gateway took {sent / MIB:.1f} MiB before it stopped reading")
        # 2,000 publishes of 1 MiB were let in before; now the limit plus kernel buffers
        assert sent < total / 2, f"the gateway took {sent / MIB:.1f} MiB for a frozen broker"
        assert [type(m) for m in blocked] == [commands.Connection.Blocked], blocked
        assert "amqp.max_in_flight_bytes" in blocked[0].reason

        # the broker is back: the rest goes through, the publisher is told it is unblocked
        deadline = time.monotonic() + 60
        later: list[object] = []
        while sent < len(flood):
            assert time.monotonic() < deadline, "the publisher stayed blocked"
            _, writable, _ = select.select([], [sock], [], 1)
            if writable:
                try:
                    sent += sock.send(view[sent : sent + 64 * 1024])
                except BlockingIOError:
                    pass
            later += _methods(sock, reader)
        sock.setblocking(True)
        sock.settimeout(30)
        sock.sendall(encode_method(1, commands.Queue.Declare(queue=queue, passive=True)))
        while not any(isinstance(m, commands.Queue.DeclareOk) for m in later):
            method = next_method(sock, reader)
            assert method is not None, "the gateway closed the connection"
            later.append(method)
        assert commands.Connection.Unblocked in [type(m) for m in later], later
        assert not any(isinstance(m, commands.Channel.Close) for m in later), later
        # the tail of the flood may block the connection once more while the broker catches
        # up after SIGCONT: what must hold is that it ends unblocked
        wait_until(
            lambda: gw.metric("gateway_amqp_blocked_connections") == 0,
            30,
            0.1,
            "the connection to end unblocked",
        )
        sock.close()
    finally:
        assert gw.stop() == 0, gw.log_tail()
