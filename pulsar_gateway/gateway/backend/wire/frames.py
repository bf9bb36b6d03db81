"""Pulsar frames, sans I/O: bytes in, frames out, and the bytes of frames to send.

A simple frame is `[total size][command size][BaseCommand]`, sizes 4-byte big-endian, the
total counting everything after itself. A payload frame (SEND, MESSAGE) goes on with
`[0x0e01][crc32c][metadata size][MessageMetadata][payload]`, the checksum covering
everything after it; a broker may put `[0x0e02][size][BrokerEntryMetadata]` before the
0x0e01 magic of a MESSAGE (docs/pulsar-protocol.md, "Frames").

`FrameReader.feed` takes bytes split anywhere and returns the whole frames they complete.
Every byte is treated as hostile: a frame announcing more than `max_frame_size` is refused
before it is buffered (so the buffer never holds more than one frame and one read), sizes
that do not add up and checksums that do not match raise `DecodeError` subclasses, and
nothing else escapes. The connection closes on any of them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from crc32c import crc32c

from pulsar_gateway.gateway.backend.wire.commands import (
    Command,
    UnknownCommand,
    decode_command,
    encode_command,
)
from pulsar_gateway.gateway.backend.wire.errors import ChecksumMismatch, DecodeError, FrameTooLarge
from pulsar_gateway.gateway.backend.wire.messages import BrokerEntryMetadata, MessageMetadata

MAGIC_CRC32C = b"\x0e\x01"
MAGIC_BROKER_ENTRY = b"\x0e\x02"
# What a broker allows when CONNECTED does not say (Pulsar's default maxMessageSize).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# Room for the command and metadata around a message of the largest size (Pulsar's own
# padding is 10 KiB).
FRAME_OVERHEAD = 64 * 1024

_U32 = struct.Struct(">I")
# frames over this size (an entry of many records) are read by `_large_frame`
LARGE_FRAME = 64 * 1024
_U32_PAIR = struct.Struct(">II")

# What may stand for a MESSAGE's payload, given its command and metadata (None: nothing,
# the payload is copied out as usual): `FrameReader.claim`.
Claim = Callable[[Command | UnknownCommand, MessageMetadata], object]
# the same for one consumer's entries (`Consumer.claim`, asked by its connection)
EntryClaim = Callable[[MessageMetadata], object]


@dataclass(slots=True)
class Frame:
    """One frame read: its command and, for MESSAGE, what follows the command. `claimed`:
    what `FrameReader.claim` gave for it, the payload then left out (b"")."""

    command: Command | UnknownCommand
    metadata: MessageMetadata | None = None
    payload: bytes = b""
    broker_entry: BrokerEntryMetadata | None = None
    claimed: object = None


def simple_frame(command: Command) -> bytes:
    body = encode_command(command)
    return _U32_PAIR.pack(len(body) + 4, len(body)) + body


def payload_section(metadata: bytes, payload: bytes) -> bytes:
    """What follows the command of a SEND: magic, crc32c, metadata size, metadata, payload."""
    return b"".join(section_parts(metadata, payload))


def section_parts(metadata: bytes, payload: bytes | memoryview) -> tuple[bytes, bytes | memoryview]:
    """`payload_section` as two pieces, everything before the payload and the payload,
    written one after the other: joining them copied the whole payload (an entry of a
    big Kafka batch: a megabyte, and as many fresh pages faulted in) for nothing.
    Kept by a producer as is, so a resend after a reconnect only needs a new command."""
    sized = _U32.pack(len(metadata)) + metadata
    checksum = crc32c(payload, crc32c(sized))
    return MAGIC_CRC32C + _U32.pack(checksum) + sized, payload


def payload_frame_head(command: Command | bytes, section_size: int) -> bytes:
    """The sizes and command (or its encoded bytes) that go before a payload section of
    `section_size` bytes."""
    body = command if isinstance(command, bytes) else encode_command(command)
    return _U32_PAIR.pack(4 + len(body) + section_size, len(body)) + body


# the most a FrameReader's buffer keeps between frames: the entry of a Kafka batch of
# librdkafka's default 1 MB and more (a bigger frame's buffer shrinks back to it after)
_KEPT_BUFFER = 2 << 20


class FrameReader:
    """Splits a byte stream into frames; `max_frame_size` bounds one frame (its total size
    field), and may be changed once the broker says its message size limit."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + FRAME_OVERHEAD) -> None:
        self.max_frame_size = max_frame_size
        self.verify_checksums = True
        self.large_frame = LARGE_FRAME  # frames over this size: `_large_frame`
        # Asked for each frame with a payload, once its metadata is read: what it gives
        # (not None) stands for the payload, which is then not copied out (only checked).
        # The gateway's own entries, read back by a partition's tailer, are made from the
        # writer's note (gateway/backend/written_entries.py): their payload, a megabyte for
        # a big Kafka batch, was copied for nothing (docs/pulsar-protocol.md, "Page faults").
        self.claim: Claim | None = None
        # The stream's unparsed bytes are `_buffer[:_filled]`; the buffer keeps its size
        # between frames. Shrunk to the bytes left after each parse (`del`), it gave its
        # megabyte back after every big entry and grew page by page for the next, fresh
        # pages faulted in each time (the tailer reads back every entry the gateway
        # writes: docs/pulsar-protocol.md, "Page faults"). Frames are parsed from copies:
        # no view of the buffer may outlive `feed`, as its bytes are written over.
        self._buffer = bytearray()
        self._filled = 0
        self._needed = 4  # bytes the buffer must hold before the next frame can be parsed

    @property
    def buffered(self) -> int:
        return self._filled

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        buffer = self._buffer
        filled = self._filled
        size = len(data)
        if filled + size <= len(buffer):
            # through a view: a bytearray's slice assigned from bytes copies them into a
            # new bytearray first (a second copy of every chunk the socket gave)
            with memoryview(buffer) as into:
                into[filled : filled + size] = data
        else:
            del buffer[filled:]
            buffer += data
        end = self._filled = filled + size
        if end < self._needed:
            return []
        frames: list[Frame] = []
        pos = 0
        with memoryview(buffer) as view:
            while end - pos >= 4:
                total = _U32.unpack_from(view, pos)[0]
                if total > self.max_frame_size:
                    raise FrameTooLarge(
                        f"frame of {total} bytes over the limit of {self.max_frame_size}"
                    )
                if total < 4:
                    raise DecodeError(f"frame of {total} bytes cannot hold a command")
                if end - pos < 4 + total:
                    self._needed = 4 + total
                    break
                # parsed from a bytes copy of the frame: indexing and slicing bytes is
                # about twice as fast as through the memoryview, and the copy is one memcpy
                # (a large entry's payload is copied once, not with the frame and again)
                large = None
                verify, claim = self.verify_checksums, self.claim
                if total > self.large_frame:
                    large = _large_frame(view, pos + 4, pos + 4 + total, verify, claim)
                if large is None:
                    frame = bytes(view[pos + 4 : pos + 4 + total])
                    large = parse_frame(frame, 0, total, verify, claim)
                frames.append(large)
                pos += 4 + total
            else:
                self._needed = 4
        if pos:
            left = end - pos
            if left:
                buffer[:left] = buffer[pos:end]
            else:
                self._needed = 4
            self._filled = left
            if len(buffer) > _KEPT_BUFFER and left <= _KEPT_BUFFER:
                del buffer[_KEPT_BUFFER:]  # (a frame over it was rare: not kept for)
        return frames


def _large_frame(
    view: memoryview, start: int, end: int, verify: bool, claim: Claim | None = None
) -> Frame | None:
    """A frame with a payload (MESSAGE) parsed from copies of its head (command, broker
    entry metadata, checksum if any, metadata) and of its payload: the payload is copied once,
    where a copy of the whole frame and then of the payload cost two copies of it and,
    past the gateway's mapping threshold (docs/backend.md, "Memory"), two sets of page
    faults. None when the frame is not laid out so (`parse_frame` then reads it, and
    says what is wrong)."""
    at = start + 4 + _U32.unpack_from(view, start)[0]
    if at + 6 <= end and view[at : at + 2] == MAGIC_BROKER_ENTRY:
        at += 6 + _U32.unpack_from(view, at + 2)[0]
    # the checksum, if any (without one the metadata size follows)
    checked = at + 6 <= end and view[at : at + 2] == MAGIC_CRC32C
    summed = at + 6 if checked else at
    if summed + 4 > end:
        return None
    metadata_end = summed + 4 + _U32.unpack_from(view, summed)[0]
    if metadata_end > end:
        return None
    head = bytes(view[start:metadata_end])
    command_end = 4 + _U32.unpack_from(head, 0)[0]
    command = decode_command(head, 4, command_end)
    covered = view[summed:end] if checked else None
    payload = view[metadata_end:end]
    return _payload(command, head, command_end, len(head), verify, covered, payload, claim)


def parse_frame(
    data: bytes | bytearray | memoryview,
    start: int,
    end: int,
    verify: bool = True,
    claim: Claim | None = None,
) -> Frame:
    """The frame in `data[start:end]` (after its total size field)."""
    if end - start < 4:
        raise DecodeError("frame too short for its command size")
    command_size = _U32.unpack_from(data, start)[0]
    command_end = start + 4 + command_size
    if command_end > end:
        raise DecodeError(f"command of {command_size} bytes runs past its frame")
    command = decode_command(data, start + 4, command_end)
    if command_end == end:
        return Frame(command)
    return _payload(command, data, command_end, end, verify, claim=claim)


def _payload(
    command: Command | UnknownCommand,
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    verify: bool,
    summed: memoryview | None = None,
    payload: memoryview | None = None,
    claim: Claim | None = None,
) -> Frame:
    """What follows the command in `data[pos:end]`; `summed` and `payload`, when given,
    are what the checksum covers and the payload (`data` then ends with the metadata).
    `claim`: `FrameReader.claim`."""
    broker_entry = None
    if data[pos : pos + 2] == MAGIC_BROKER_ENTRY:
        if end - pos < 6:
            raise DecodeError("truncated broker entry metadata")
        size = _U32.unpack_from(data, pos + 2)[0]
        stop = pos + 6 + size
        if stop > end:
            raise DecodeError("broker entry metadata runs past its frame")
        broker_entry = BrokerEntryMetadata.decode(data, pos + 6, stop)
        pos = stop
    if data[pos : pos + 2] == MAGIC_CRC32C:
        if end - pos < 6:
            raise DecodeError("truncated checksum")
        expected = _U32.unpack_from(data, pos + 2)[0]
        pos += 6
        # through a view: a slice of the frame's bytes would copy the whole payload (and,
        # past the gateway's mapping threshold, fault in fresh pages) only to sum it
        if summed is None:
            summed = memoryview(data)[pos:end]
        if verify and crc32c(summed) != expected:
            raise ChecksumMismatch("payload checksum mismatch")
    # (no magic: a payload written without a checksum, as very old producers did)
    if end - pos < 4:
        raise DecodeError("truncated metadata size")
    metadata_size = _U32.unpack_from(data, pos)[0]
    metadata_end = pos + 4 + metadata_size
    if metadata_end > end:
        raise DecodeError(f"metadata of {metadata_size} bytes runs past its frame")
    metadata = MessageMetadata.decode(data, pos + 4, metadata_end)
    claimed = None if claim is None else claim(command, metadata)
    if claimed is not None:
        return Frame(command, metadata, b"", broker_entry, claimed)
    rest = data[metadata_end:end] if payload is None else payload
    return Frame(command, metadata, bytes(rest), broker_entry)
