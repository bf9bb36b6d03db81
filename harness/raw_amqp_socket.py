"""A raw AMQP 0-9-1 socket for hostile-input tests: the handshake done by hand (heartbeats
off unless asked), then whatever bytes the test wants to send."""

from __future__ import annotations

import socket

from pamqp import commands

from pulsar_gateway.handlers.amqp.frames import (
    PROTOCOL_HEADER,
    FrameReader,
    MethodFrame,
    encode_method,
)


def next_method(sock: socket.socket, reader: FrameReader) -> object | None:
    """The next method the gateway sends (other frames skipped); None once it closes."""
    while True:
        found = reader.next_frame()
        if isinstance(found, MethodFrame):
            return found.method
        if found is None:
            data = sock.recv(65536)
            if not data:
                return None
            reader.feed(data)


def open_connection(port: int, heartbeat: int = 0, source: str = "") -> socket.socket:
    """A connection through connection.open-ok as guest on vhost '/' (from the loopback
    address ``source``, if given)."""
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=30, source_address=(source, 0) if source else None
    )
    reader = FrameReader(0)
    sock.sendall(PROTOCOL_HEADER)
    assert isinstance(next_method(sock, reader), commands.Connection.Start)
    login = commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest", locale="en_US"
    )
    sock.sendall(encode_method(0, login))
    tune = next_method(sock, reader)
    assert isinstance(tune, commands.Connection.Tune)
    tune_ok = commands.Connection.TuneOk(
        channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=heartbeat
    )
    sock.sendall(encode_method(0, tune_ok) + encode_method(0, commands.Connection.Open("/")))
    assert isinstance(next_method(sock, reader), commands.Connection.OpenOk)
    return sock
