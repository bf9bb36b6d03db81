"""The methods an AMQP client receives, in the order its socket gets them: a raw
connection (harness/raw_amqp_socket.py) publishes and consumes on one channel
and records every basic.deliver and basic.ack/nack byte-level ordered, so a scenario
can compare the interleaving RabbitMQ produces with the gateway's."""

from __future__ import annotations

import socket
import urllib.parse
from typing import Any

from pamqp import commands

from harness.raw_amqp_socket import next_method, open_connection
from pulsar_gateway.handlers.amqp.frames import (
    BodyFrame,
    FrameReader,
    HeaderFrame,
    encode_content,
    encode_method,
    encode_properties,
)

FRAME_MAX = 131072


def _expect(sock: socket.socket, reader: FrameReader, kind: type) -> Any:
    method = next_method(sock, reader)
    assert isinstance(method, kind), f"expected {kind.__name__}, got {method!r}"
    return method


def publish_and_consume_trace(
    url: str, queue: str, bodies: list[bytes], no_ack: bool
) -> list[tuple[Any, ...]]:
    """Consume `queue` on channel 1 in confirm mode, then publish `bodies` to it in one
    write; the deliveries and confirms received, in order: ("deliver", body) and
    ("ack"|"nack", the publish sequence numbers it covers)."""
    port = urllib.parse.urlparse(url).port
    assert port is not None
    sock = open_connection(port)
    reader = FrameReader(0)
    try:
        sock.sendall(encode_method(1, commands.Channel.Open()))
        _expect(sock, reader, commands.Channel.OpenOk)
        sock.sendall(encode_method(1, commands.Confirm.Select()))
        _expect(sock, reader, commands.Confirm.SelectOk)
        sock.sendall(encode_method(1, commands.Queue.Declare(queue=queue)))
        _expect(sock, reader, commands.Queue.DeclareOk)
        consume = commands.Basic.Consume(queue=queue, consumer_tag="trace", no_ack=no_ack)
        sock.sendall(encode_method(1, consume))
        _expect(sock, reader, commands.Basic.ConsumeOk)
        publish = commands.Basic.Publish(exchange="", routing_key=queue)
        sock.sendall(
            b"".join(
                encode_content(1, publish, body, encode_properties(None), FRAME_MAX)
                for body in bodies
            )
        )
        trace: list[tuple[Any, ...]] = []
        delivered = confirmed = 0
        while delivered < len(bodies) or confirmed < len(bodies):
            method = next_method(sock, reader)
            if isinstance(method, commands.Basic.Deliver):
                delivered += 1
                trace.append(("deliver", _body(sock, reader)))
                if not no_ack:
                    ack = commands.Basic.Ack(delivery_tag=method.delivery_tag)
                    sock.sendall(encode_method(1, ack))
            elif isinstance(method, commands.Basic.Ack | commands.Basic.Nack):
                tag = method.delivery_tag
                first = confirmed + 1 if method.multiple else tag
                confirmed = tag
                kind = "ack" if isinstance(method, commands.Basic.Ack) else "nack"
                trace.append((kind, *range(first, tag + 1)))
            else:
                raise AssertionError(f"unexpected {method!r}")
        return trace
    finally:
        sock.close()


def _body(sock: socket.socket, reader: FrameReader) -> bytes:
    """The body of the content whose method was just read (header, then body frames)."""
    size: int | None = None
    parts: list[bytes] = []
    while size is None or sum(map(len, parts)) < size:
        frame = reader.next_frame()
        if frame is None:
            data = sock.recv(65536)
            assert data, "connection closed inside a delivery"
            reader.feed(data)
        elif isinstance(frame, HeaderFrame):
            size = frame.body_size
        elif isinstance(frame, BodyFrame):
            parts.append(frame.payload)
    return b"".join(parts)


def confirm_after_delivery(trace: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The order facts RabbitMQ guarantees, whatever confirms it coalesces: the bodies in
    delivery order, and for each publish whether its confirm came after its delivery."""
    delivered: list[bytes] = [entry[1] for entry in trace if entry[0] == "deliver"]
    facts: list[tuple[Any, ...]] = [("delivered", delivered)]
    seen = 0
    for entry in trace:
        if entry[0] == "deliver":
            seen += 1
        else:
            facts.extend((entry[0], seq, seq <= seen) for seq in entry[1:])
    return facts
