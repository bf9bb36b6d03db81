"""A publisher that never reads its basic.returns is throttled, not buffered (issue 10, item 13).

Unroutable mandatory publishes each come back as a basic.return with the whole body. A
client that sends 64 MiB of them and reads nothing once made the gateway hold all 64 MiB of
returns; now the gateway stops reading the socket once its unsent output passes
OUTPUT_HIGH_WATER, so the client's sends block after a bounded amount (the gateway's buffers
plus the kernel's) and the gateway's memory stays flat. Reading the returns lets it go on.
"""

from __future__ import annotations

import select
import socket
import time

from pamqp import commands

from harness.gateway_process import GatewayProcess
from harness.raw_amqp_socket import open_connection
from pulsar_gateway.handlers.amqp.frames import encode_content, encode_method
from pulsar_gateway.handlers.amqp.session import OUTPUT_HIGH_WATER
from pulsar_gateway.tools.parity.job import _rss_mib

MIB = 1024 * 1024
BODY = 256 * 1024
TOTAL = 64 * MIB


def _unroutable_publish() -> bytes:
    publish = commands.Basic.Publish(exchange="", routing_key="no-such-queue", mandatory=True)
    return encode_content(1, publish, b"r" * BODY, commands.Basic.Properties().marshal(), 131072)


def _send_until_blocked(sock: socket.socket, data: bytes, stuck_for: float) -> int:
    """Bytes of ``data`` the kernel took before a send made no progress for ``stuck_for``."""
    sock.settimeout(stuck_for)
    sent = 0
    view = memoryview(data)
    while sent < len(data):
        try:
            sent += sock.send(view[sent : sent + 64 * 1024])
        except TimeoutError:
            return sent
    return sent


def test_unread_returns_stop_the_reading_not_the_memory(gateway: GatewayProcess) -> None:
    sock = open_connection(gateway.amqp_port)
    sock.sendall(encode_method(1, commands.Channel.Open()))
    flood = _unroutable_publish() * (TOTAL // BODY)
    before = _rss_mib(gateway.process.pid)
    sent = _send_until_blocked(sock, flood, stuck_for=3)
    grown = _rss_mib(gateway.process.pid) - before
    print(f"sent {sent / MIB:.1f} of {len(flood) / MIB:.0f} MiB; gateway RSS +{grown:.0f} MiB")
    assert sent < TOTAL / 2, f"the gateway took {sent / MIB:.1f} MiB it could not answer"
    assert grown < OUTPUT_HIGH_WATER / MIB + 24, f"gateway RSS grew {grown:.0f} MiB"
    # reading the returns lets the rest through, and every body comes back
    returned_bodies = TOTAL // BODY * BODY
    received = 0
    deadline = time.monotonic() + 60
    view = memoryview(flood)
    sock.setblocking(False)
    while sent < len(flood) or received < returned_bodies:
        assert time.monotonic() < deadline, "the throttled client never caught up"
        writing = [sock] if sent < len(flood) else []
        readable, writable, _ = select.select([sock], writing, [], 1)
        if writable:
            sent += sock.send(view[sent : sent + 64 * 1024])
        if readable:
            chunk = sock.recv(1 << 20)
            assert chunk, "the gateway closed the connection"
            received += len(chunk)
    sock.close()
    assert gateway.process.poll() is None
