"""Bad bytes on real sockets: the right connection.close code, the process
lives, and a connection next to the bad one carries on untouched."""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import time
import uuid

import pika
import pytest
from pamqp import commands, frame

from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until, wait_until_stable
from pulsar_gateway.handlers.amqp.frames import PROTOCOL_HEADER, encode_method


def _unread_bytes(sock: socket.socket) -> int:
    """Bytes the kernel holds for `sock` that the client has not read yet."""
    return struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0" * 4))[0]


class RawClient:
    """Just enough of a client to get a connection open, then misbehave."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self, channel: int, method) -> None:
        self.send(encode_method(channel, method))

    def next_frame(self):
        while True:
            if len(self.buffer) >= 7:
                size = struct.unpack(">I", self.buffer[3:7])[0]
                if len(self.buffer) >= size + 8:
                    consumed, channel, value = frame.unmarshal(self.buffer)
                    self.buffer = self.buffer[consumed:]
                    return channel, value
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk

    def expect(self, kind):
        while True:
            got = self.next_frame()
            assert got is not None, f"socket closed while waiting for {kind.__name__}"
            if isinstance(got[1], kind):
                return got[1]

    def open(self) -> RawClient:
        self.send(PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        self.method(
            0,
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
            ),
        )
        tune = self.expect(commands.Connection.Tune)
        self.method(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
            ),
        )
        self.method(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        return self

    def closed_with(self) -> int:
        """The reply code of the server's connection.close; then the socket must close."""
        close = self.expect(commands.Connection.Close)
        self.method(0, commands.Connection.CloseOk())
        assert self.next_frame() is None
        return close.reply_code

    def close(self) -> None:
        self.sock.close()


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def _garbage(c: RawClient) -> None:
    c.send(b"\x01\x00\x00\x00\x00\x00\x04abcd\x42garbage")


def _oversized(c: RawClient) -> None:
    c.method(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    c.send(_frame(3, 1, b"x" * (200 * 1024)))


def _closed_channel(c: RawClient) -> None:
    c.method(7, commands.Queue.Declare(queue="q"))


def _body_without_header(c: RawClient) -> None:
    c.method(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    c.method(1, commands.Basic.Publish(exchange="", routing_key="q"))
    c.send(_frame(3, 1, b"body"))


def _unknown_method(c: RawClient) -> None:
    c.method(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    c.send(_frame(1, 1, struct.pack(">HH", 999, 7)))


def _unknown_frame_type(c: RawClient) -> None:
    c.send(_frame(9, 0, b""))


@pytest.mark.parametrize(
    ("misbehave", "code"),
    [
        (_garbage, 501),
        (_oversized, 501),
        (_closed_channel, 504),
        (_body_without_header, 505),
        (_unknown_method, 540),
        (_unknown_frame_type, 501),
    ],
)
def test_bad_input_closes_only_that_connection(gateway: GatewayProcess, misbehave, code) -> None:
    good = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = good.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        bad = RawClient(gateway.amqp_port).open()
        misbehave(bad)
        assert bad.closed_with() == code
        bad.close()
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"still here")
        assert ch.basic_get(queue, auto_ack=True)[2] == b"still here"
    finally:
        good.close()
    assert gateway.process.poll() is None


def test_garbage_instead_of_header_and_silent_peers(gateway: GatewayProcess) -> None:
    bad = RawClient(gateway.amqp_port)
    bad.send(b"GET / HTTP/1.1\r\n\r\n")
    assert bad.sock.recv(8) == PROTOCOL_HEADER  # RabbitMQ answers with the header it speaks
    bad.close()
    accepted = gateway.metric("gateway_connections_total", protocol="amqp")
    half = RawClient(gateway.amqp_port)
    half.send(PROTOCOL_HEADER + b"\x01\x00")  # then nothing, then gone
    wait_until(
        lambda: gateway.metric("gateway_connections_total", protocol="amqp") > accepted,
        10,
        message="the gateway to take the half-sent connection",
    )
    half.close()
    ok = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    assert ok.channel().is_open
    ok.close()
    assert gateway.process.poll() is None


def test_silent_peer_is_dropped_after_missed_heartbeats(gateway: GatewayProcess) -> None:
    client = RawClient(gateway.amqp_port)
    client.send(PROTOCOL_HEADER)
    client.expect(commands.Connection.Start)
    client.method(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
        ),
    )
    tune = client.expect(commands.Connection.Tune)
    client.method(
        0,
        commands.Connection.TuneOk(
            channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=1
        ),
    )
    client.method(0, commands.Connection.Open(virtual_host="/"))
    client.expect(commands.Connection.OpenOk)
    client.sock.settimeout(10)
    started = time.monotonic()
    heartbeats = 0
    while True:  # the server heartbeats, then gives up on us
        got = client.next_frame()
        if got is None:
            break
        heartbeats += 1
    assert heartbeats >= 1 and 1.5 < time.monotonic() - started < 8
    client.close()


def test_slow_reader_gets_everything_once_it_reads(gateway: GatewayProcess) -> None:
    """Deliveries pause while the socket's write buffer is full and resume when it drains."""
    publisher = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    ch = publisher.channel()
    queue = f"slow-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(queue)
    ch.confirm_delivery()
    for _ in range(100):
        ch.basic_publish("", queue, b"s" * 100_000)
    reader = RawClient(gateway.amqp_port).open()
    reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    reader.method(1, commands.Channel.Open())
    reader.expect(commands.Channel.OpenOk)
    reader.method(1, commands.Basic.Consume(queue=queue, no_ack=True))
    # not reading: our socket's buffer fills, stops growing, and delivery pauses
    wait_until_stable(
        lambda: _unread_bytes(reader.sock),
        20,
        0.1,
        polls=5,
        accept=lambda unread: unread > 0,
        message="deliveries to fill the unread socket and pause",
    )
    delivered = 0
    deadline = time.time() + 20
    while delivered < 100 and time.time() < deadline:
        got = reader.next_frame()
        assert got is not None
        if isinstance(got[1], commands.Basic.Deliver):
            delivered += 1
    assert delivered == 100
    reader.close()
    ch.queue_delete(queue)
    publisher.close()
