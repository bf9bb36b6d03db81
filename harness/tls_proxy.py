"""A TLS front for the embedded broker (which speaks no TLS): a real `pulsar+ssl://`
endpoint for tests, which also keeps what each client sent first (the Pulsar CONNECT
command, where authentication data travels), to check a client sends it.

Like Pulsar's own proxy, it answers topic lookups with `proxy_through_service_url` and
its own TLS URL, so clients keep connecting through it: the broker's lookup answers name
its plaintext address, which a TLS client cannot use. That means reading the broker's
frames (Pulsar's binary protocol: a 4-byte total size, a 4-byte command size, a protobuf
`BaseCommand`, for some commands a payload after it) and rewriting the one command, by
hand: a protobuf field is a varint key (number << 3 | wire type) and a value."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from pathlib import Path

FIRST_BYTES = 64 * 1024


class TlsProxy:
    """Accepts TLS on `host` (a free port), forwards to `target_port` on 127.0.0.1."""

    def __init__(self, target_port: int, cert: Path, key: Path, host: str = "127.0.0.1") -> None:
        self.target_port = target_port
        self.host = host
        self.port = 0
        self.first_bytes: list[bytes] = []  # per connection, what the client sent first
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert, key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> TlsProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(10)
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, 0, ssl=self._context, ssl_handshake_timeout=10
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        seen = bytearray()
        self.first_bytes.append(b"")
        index = len(self.first_bytes) - 1

        async def upstream() -> None:
            while data := await reader.read(65536):
                if len(seen) < FIRST_BYTES:
                    seen.extend(data[: FIRST_BYTES - len(seen)])
                    self.first_bytes[index] = bytes(seen)
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downstream() -> None:
            while True:
                size = await up_reader.readexactly(4)
                frame = await up_reader.readexactly(int.from_bytes(size, "big"))
                frame = self._rewrite(frame)
                writer.write(len(frame).to_bytes(4, "big") + frame)
                await writer.drain()

        with contextlib.suppress(OSError, ConnectionError, ssl.SSLError, EOFError):
            await asyncio.gather(upstream(), downstream())
        writer.close()
        up_writer.close()

    def _rewrite(self, frame: bytes) -> bytes:
        """A lookup answer made to send the client through this proxy; others unchanged."""
        command_size = int.from_bytes(frame[:4], "big")
        command, rest = frame[4 : 4 + command_size], frame[4 + command_size :]
        fields = _fields(command)
        if not any(number == LOOKUP_RESPONSE for number, _, _ in fields):
            return frame
        out = bytearray()
        for number, wire, value in fields:
            if number == LOOKUP_RESPONSE:
                url = f"pulsar+ssl://localhost:{self.port}".encode()
                kept = [f for f in _fields(value) if f[0] not in (2, 8)]
                value = b"".join(_encode(*f) for f in kept)
                value += _encode(2, 2, url) + _encode(8, 0, 1)  # TLS URL, through proxy
            out += _encode(number, wire, value)
        return len(out).to_bytes(4, "big") + bytes(out) + rest

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


LOOKUP_RESPONSE = 24  # BaseCommand.lookupTopicResponse
Field = tuple[int, int, "bytes | int"]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(data: bytes) -> list[Field]:
    """A protobuf message's fields: (number, wire type, varint or bytes)."""
    fields: list[Field] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            fields.append((number, wire, value))
        elif wire == 2:
            length, at = _varint(data, at)
            fields.append((number, wire, data[at : at + length]))
            at += length
        elif wire in (1, 5):  # fixed 64 / 32 bits
            width = 8 if wire == 1 else 4
            fields.append((number, wire, data[at : at + width]))
            at += width
        else:
            raise ValueError(f"protobuf wire type {wire}")
    return fields


def _encode(number: int, wire: int, value: bytes | int) -> bytes:
    key = _put_varint(number << 3 | wire)
    if wire == 0:
        assert isinstance(value, int)
        return key + _put_varint(value)
    assert isinstance(value, bytes)
    if wire == 2:
        return key + _put_varint(len(value)) + value
    return key + value
