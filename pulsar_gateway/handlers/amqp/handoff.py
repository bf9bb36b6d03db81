"""Handing an AMQP connection to the cluster member that serves its vhost.

Why: RabbitMQ's per-queue semantics (one order per queue, exclusive queues, max-length,
TTL, dead-lettering, round robin over consumers) hold because one process runs each queue.
In a cluster each vhost has one owner (docs/cluster.md, "AMQP on one port"), and every
worker accepts on the same public port, so a connection often lands on a member that does
not own its vhost. That member runs the handshake itself (the login is checked where the
client connected), and at connection.open it connects to the owner's member-to-member
listener, replays the bytes the client sent so far (so the owner checks the same login
and access again: that listener is no way around authentication), drops the owner's own
handshake answers (connection.start, secure, tune: the client already had ours) and
forwards everything from the owner's answer to connection.open on: open-ok, or the close
that refuses it. From then on the two sockets are spliced both ways until either closes.

Memory is bounded per direction: one read of at most SPLICE_CHUNK bytes is written and
drained (the transport's high-water mark) before the next read, so a slow reader stops
its writer through TCP, never through a growing buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import struct
import time
from dataclasses import dataclass

from pulsar_gateway.gateway.waiting import cancel_and_wait

# What the accepting member records before connection.open: the protocol header,
# start-ok, secure-ok, tune-ok and open fit in far less; more is no handshake
MAX_HANDSHAKE_BYTES = 64 * 1024
SPLICE_CHUNK = 64 * 1024
# The owner's answers before its connection.open answer are frames of at most the
# pre-tune frame size (4096) and its connection.start; anything bigger is not one
MAX_SKIPPED_FRAME = 128 * 1024
_FRAME_HEADER = struct.Struct(">BHI")
_METHOD_IDS = struct.Struct(">HH")
_METHOD_FRAME = 1
_HEARTBEAT_FRAME = 8
_FRAME_END = 0xCE
# connection.start, connection.secure, connection.tune
_HANDSHAKE_METHODS = frozenset({(10, 10), (10, 20), (10, 30)})
# The signed origin a hand-off starts with when the members share `cluster.member_secret`:
# magic, a 2-byte length, the JSON facts, their HMAC-SHA256
ORIGIN_MAGIC = b"PGHO"
_ORIGIN_LENGTH = struct.Struct(">H")
MAX_ORIGIN_BYTES = 1024
# a signed origin older than this (or from this far ahead) is refused: a recorded one
# cannot be replayed later, and within the window its nonce is refused a second time
ORIGIN_MAX_AGE_SECONDS = 60.0


class HandshakeRecorder:
    """The client's bytes until connection.open, to replay to the owner; bounded."""

    def __init__(self, limit: int = MAX_HANDSHAKE_BYTES) -> None:
        self._data = bytearray()
        self._limit = limit
        self.overflowed = False

    def record(self, data: bytes) -> None:
        if self.overflowed:
            return
        if len(self._data) + len(data) > self._limit:
            self.overflowed = True
            self._data.clear()
            return
        self._data += data

    @property
    def data(self) -> bytes:
        return bytes(self._data)


class HandOffError(Exception):
    """The owner's answer was not an AMQP handshake, or a signed origin did not verify."""


@dataclass(frozen=True)
class Origin:
    """What the accepting member knew of the client and the owner cannot see: the client's
    address (`guest` logs in from loopback only) and the name in its TLS certificate
    (EXTERNAL logins). Trusted only when signed with the members' shared secret."""

    peer_host: str
    common_name: str | None


def sign_origin(secret: bytes, origin: Origin) -> bytes:
    """The prelude the accepting member sends before the client's handshake."""
    facts = json.dumps(
        {
            "peer": origin.peer_host,
            "cn": origin.common_name,
            "at": time.time(),
            "nonce": secrets.token_hex(16),
        },
        separators=(",", ":"),
    ).encode()
    tag = hmac.new(secret, facts, hashlib.sha256).digest()
    return ORIGIN_MAGIC + _ORIGIN_LENGTH.pack(len(facts)) + facts + tag


class OriginVerifier:
    """Checks the signed origins arriving on the member-to-member listener: the tag, the
    age, and that no nonce is used twice while it is young enough to be accepted."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._seen: dict[str, float] = {}  # nonce -> when it was accepted

    async def read(self, reader: asyncio.StreamReader) -> Origin:
        head = await reader.readexactly(len(ORIGIN_MAGIC) + _ORIGIN_LENGTH.size)
        if head[: len(ORIGIN_MAGIC)] != ORIGIN_MAGIC:
            raise HandOffError("no signed origin: the members' cluster.member_secret differ")
        (size,) = _ORIGIN_LENGTH.unpack_from(head, len(ORIGIN_MAGIC))
        if size > MAX_ORIGIN_BYTES:
            raise HandOffError("signed origin too large")
        facts = await reader.readexactly(size)
        tag = await reader.readexactly(hashlib.sha256().digest_size)
        expected = hmac.new(self._secret, facts, hashlib.sha256).digest()
        if not hmac.compare_digest(tag, expected):
            raise HandOffError("signed origin does not verify")
        try:
            values = json.loads(facts)
            peer, name = str(values["peer"]), values["cn"]
            at, nonce = float(values["at"]), str(values["nonce"])
        except (ValueError, KeyError, TypeError):
            raise HandOffError("signed origin unreadable") from None
        now = time.time()
        for old in [n for n, when in self._seen.items() if now - when > ORIGIN_MAX_AGE_SECONDS]:
            del self._seen[old]
        if abs(now - at) > ORIGIN_MAX_AGE_SECONDS or nonce in self._seen:
            raise HandOffError("signed origin too old or replayed")
        self._seen[nonce] = now
        return Origin(peer, name if isinstance(name, str) else None)


def is_handshake_answer(frame_type: int, channel: int, payload: bytes) -> bool:
    """A frame of the owner's handshake that the client must not see a second time."""
    if channel != 0:
        return False
    if frame_type == _HEARTBEAT_FRAME:
        return True
    if frame_type != _METHOD_FRAME or len(payload) < _METHOD_IDS.size:
        return False
    return _METHOD_IDS.unpack_from(payload) in _HANDSHAKE_METHODS


async def skip_handshake_answers(reader: asyncio.StreamReader) -> bytes:
    """Read the owner's frames up to its answer to connection.open; return that frame's
    bytes (to forward) without the ones before it."""
    while True:
        header = await reader.readexactly(_FRAME_HEADER.size)
        frame_type, channel, size = _FRAME_HEADER.unpack(header)
        if size > MAX_SKIPPED_FRAME:
            raise HandOffError("frame too large for a handshake")
        rest = await reader.readexactly(size + 1)
        if rest[-1] != _FRAME_END:
            raise HandOffError("frame end octet missing")
        if not is_handshake_answer(frame_type, channel, rest[:-1]):
            return header + rest


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, waiting for each write to drain before reading on."""
    while True:
        data = await reader.read(SPLICE_CHUNK)
        if not data:
            return
        writer.write(data)
        await writer.drain()


async def splice(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    owner: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Both directions until either side closes or fails; then both are closed."""
    tasks = [
        asyncio.ensure_future(pump(client[0], owner[1])),
        asyncio.ensure_future(pump(owner[0], client[1])),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*tasks)
        for writer in (owner[1], client[1]):
            with contextlib.suppress(Exception):
                writer.close()


async def hand_off(
    recorded: bytes,
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    host: str,
    port: int,
    timeout: float,
    prelude: bytes = b"",
) -> None:
    """Connect to the owner at host:port, send `prelude` (a signed origin, or nothing),
    replay `recorded`, forward its answer to connection.open and splice until either side
    closes. Raises OSError, TimeoutError or HandOffError when the owner cannot be reached or
    does not answer as one; the caller then closes the client's socket (clients
    reconnect)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port, limit=SPLICE_CHUNK)
        try:
            writer.write(prelude + recorded)
            await writer.drain()
            answer = await skip_handshake_answers(reader)
        except BaseException:
            writer.close()
            raise
    client[1].write(answer)
    await client[1].drain()
    await splice(client, (reader, writer))
