"""A raw Kafka socket for hostile-input tests: exact frames out, exact bytes back, and how
long the gateway took to close the connection."""

from __future__ import annotations

import socket
import struct
import time


def uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (compact lengths and counts are the value + 1)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def frame(body: bytes) -> bytes:
    """``body`` behind its 4-byte size prefix."""
    return struct.pack(">i", len(body)) + body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the gateway")
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> bytes:
    """One response frame, without its size prefix."""
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    return recv_exactly(sock, size)


def seconds_until_closed(sock: socket.socket, limit: float = 30) -> float:
    """How long until the gateway closes ``sock``, reading and dropping what it sends."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started
