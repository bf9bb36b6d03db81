"""Kafka's primitive types on the wire: the read cursor, the readers and writers of ints,
varints, strings, bytes, uuids and tagged sections, and the codec's two errors.

Shared by the compiled codecs (construct inlines calls to these functions; see
vocabulary.py) and the uncompiled paths; split from the package's public API (__init__.py).
"""

from __future__ import annotations

import struct
import uuid
from io import BytesIO
from typing import Any


class KafkaDecodeError(Exception):
    """Malformed, truncated or oversized input; the only exception decoding raises."""


class TooManyEntries(KafkaDecodeError):
    """The message holds more array entries than the decode's EntryBudget allowed.

    Its own class so that a caller can try a small budget first (cheap, on the event loop) and
    decode again with a larger one elsewhere, telling "too big for here" from "malformed".
    """


class KafkaEncodeError(ValueError):
    """A body dict that cannot be encoded (wrong type, out of range); names the field."""


_I8 = struct.Struct(">b")
_U8 = struct.Struct(">B")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_ONE_BYTE = [bytes((i,)) for i in range(128)]
ZERO_UUID = uuid.UUID(int=0)
_ZERO_BYTES = bytes(16)
_UNLIMITED = 1 << 62  # an entry budget no message can spend: the bytes bound it first


class _Reader:
    """Read cursor over received bytes; values are read in place and blobs are views, not copies.

    ``entries`` is the array entries the decode may still create (see EntryBudget).
    """

    __slots__ = ("buf", "entries", "pos")

    def __init__(self, buf: memoryview, pos: int = 0, entries: int = _UNLIMITED) -> None:
        self.buf = buf
        self.pos = pos
        self.entries = entries


def _read(r: _Reader, fmt: struct.Struct) -> Any:
    pos = r.pos
    r.pos = pos + fmt.size
    return fmt.unpack_from(r.buf, pos)[0]


def _read_uvarint(r: _Reader) -> int:
    buf = r.buf
    pos = r.pos
    byte = buf[pos]
    if byte < 0x80:
        r.pos = pos + 1
        return byte
    value = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            r.pos = pos + 1
            return value
        shift += 7
        if shift > 28:
            raise KafkaDecodeError("unsigned varint longer than 5 bytes")


def _read_length(r: _Reader, compact: bool, nullable: bool, wide: bool) -> int:
    """A length or count prefix, -1 for null; never larger than the bytes left."""
    if compact:
        n = _read_uvarint(r) - 1
    else:
        n = _read(r, _I32 if wide else _I16)
    if n < 0:
        if nullable:
            return -1
        raise KafkaDecodeError("null where the field is not nullable")
    if n > len(r.buf) - r.pos:
        raise KafkaDecodeError(f"length {n} exceeds the {len(r.buf) - r.pos} bytes left")
    return n


def _read_count(r: _Reader, compact: bool, nullable: bool, min_size: int) -> int:
    """An array's entry count, -1 for null, checked before anything is allocated or looped.

    Every entry takes at least ``min_size`` bytes (its type's smallest encoding), so a count the
    bytes left cannot hold is refused at once rather than after decoding the entries that fit;
    and the count is spent from the reader's entry budget. Two comparisons per array, not per
    entry, so the hot paths do not notice.
    """
    n = _read_uvarint(r) - 1 if compact else _read(r, _I32)
    if n < 0:
        if nullable:
            return -1
        raise KafkaDecodeError("null where the field is not nullable")
    left = len(r.buf) - r.pos
    if n * min_size > left:
        raise KafkaDecodeError(
            f"{n} array entries of at least {min_size} bytes each exceed the {left} bytes left"
        )
    r.entries -= n
    if r.entries < 0:
        raise TooManyEntries(f"an array of {n} entries overspends the decode's entry budget")
    return n


def _read_str(r: _Reader, compact: bool, nullable: bool) -> str | None:
    n = _read_length(r, compact, nullable, False)
    if n < 0:
        return None
    if n > 0x7FFF:
        raise KafkaDecodeError(f"string length {n} exceeds 32767")
    pos = r.pos
    r.pos = pos + n
    return str(r.buf[pos : pos + n], "utf-8")


def _read_blob(r: _Reader, compact: bool, nullable: bool) -> memoryview | None:
    n = _read_length(r, compact, nullable, True)
    if n < 0:
        return None
    pos = r.pos
    r.pos = pos + n
    return r.buf[pos : pos + n]


def _read_bytes(r: _Reader, compact: bool, nullable: bool) -> bytes | None:
    blob = _read_blob(r, compact, nullable)
    return None if blob is None else bytes(blob)


def _read_uuid(r: _Reader) -> uuid.UUID:
    pos = r.pos
    if pos + 16 > len(r.buf):
        raise KafkaDecodeError("uuid truncated")
    r.pos = pos + 16
    data = bytes(r.buf[pos : pos + 16])
    # the zero id (a topic named, not identified: every v10+ Metadata topic from a client
    # that knows only names) is one shared object, not a UUID of its own per topic
    return ZERO_UUID if data == _ZERO_BYTES else uuid.UUID(bytes=data)


def _read_ints(r: _Reader, n: int, code: str) -> list[int]:
    """An array of fixed-size integers in one unpack."""
    fmt = f">{n}{code}"
    pos = r.pos
    r.pos = pos + struct.calcsize(fmt)
    return list(struct.unpack_from(fmt, r.buf, pos))


def _skip_tagged(r: _Reader) -> None:
    for _ in range(_read_uvarint(r)):
        _read_uvarint(r)
        end = _read_uvarint(r) + r.pos
        if end > len(r.buf):
            raise KafkaDecodeError("tagged field overruns the message")
        r.pos = end


def _write_uvarint(w: BytesIO, value: int) -> None:
    if 0 <= value < 0x80:
        w.write(_ONE_BYTE[value])
        return
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    w.write(out)


def _write_length(w: BytesIO, n: int, compact: bool, wide: bool) -> None:
    """A length or count prefix; -1 writes null."""
    if compact:
        _write_uvarint(w, n + 1)
    else:
        w.write((_I32 if wide else _I16).pack(n))


def _write_null(w: BytesIO, nullable: bool, compact: bool, wide: bool) -> None:
    if not nullable:
        raise ValueError("None where the field is not nullable")
    _write_length(w, -1, compact, wide)


def _write_str(w: BytesIO, value: str | None, compact: bool, nullable: bool) -> None:
    if value is None:
        _write_null(w, nullable, compact, False)
        return
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes exceeds 32767")
    _write_length(w, len(data), compact, False)
    w.write(data)


class BlobParts:
    """A bytes field's value in pieces, written one after another: a Fetch answer's
    records, each stored batch as the tail cache holds it behind a re-based copy of its
    first 16 bytes (entry_format.encode_entry_parts). Joined into one buffer first, every
    batch was copied once more on its way to the socket (a fresh mapping each time for an
    answer of 512 KiB or more, at the gateway's malloc threshold)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | bytearray | memoryview], size: int) -> None:
        self.parts = parts
        self.size = size  # the parts' bytes together

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


# a read-only part of at least this many bytes goes to the socket as it is held
# (`PartsWriter`); smaller ones are copied beside their neighbours
BY_REFERENCE = 64 * 1024


class PartsWriter:
    """What a response is encoded into when it goes to the socket as a list of buffers
    (one writev): the big read-only parts of its `BlobParts` values (a Fetch answer's
    stored batches) kept as they are held, everything between copied into small
    bytearrays. Encoded into one BytesIO, a Fetch answer of some megabytes was copied
    once more into fresh pages (a mapping of its own past the gateway's malloc
    threshold): about 80 ns a record, a tenth of a fetch from storage (docs/offsets.md,
    "Reads from storage, an entry at a time"). Only `write` is asked of it, as of a
    BytesIO by the compiled codecs (tagged fields are written into BytesIOs of their own)."""

    __slots__ = ("_chunk", "parts", "size")

    def __init__(self) -> None:
        self._chunk = bytearray()
        self.parts: list[bytes | bytearray | memoryview] = [self._chunk]
        self.size = 0  # the bytes written so far

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        if n >= BY_REFERENCE and (
            isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly)
        ):
            self.parts.append(data)
            self._chunk = bytearray()
            self.parts.append(self._chunk)
        else:
            self._chunk += data
        self.size += n
        return n

    def finished(self) -> list[bytes | bytearray | memoryview]:
        """The buffers in order, empty ones left out (none is written to any more)."""
        return [part for part in self.parts if len(part)]


def _write_blob(w: BytesIO, value: Any, compact: bool, nullable: bool) -> None:
    """Bytes and records: accepts bytes, bytearray, memoryview or `BlobParts`."""
    if value is None:
        _write_null(w, nullable, compact, True)
        return
    if isinstance(value, BlobParts):
        _write_length(w, value.size, compact, True)
        for part in value.parts:
            w.write(part)
        return
    if isinstance(value, memoryview):
        n = value.nbytes
    elif isinstance(value, bytes | bytearray):
        n = len(value)
    else:
        raise TypeError(f"expected bytes, bytearray or memoryview, got {type(value).__name__}")
    _write_length(w, n, compact, True)
    w.write(value)


def _write_uuid(w: BytesIO, value: Any) -> None:
    data = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    if len(data) != 16:
        raise ValueError(f"uuid must be 16 bytes, got {len(data)}")
    w.write(data)


def _write_tagged(w: BytesIO, tags: list[tuple[int, bytes]]) -> None:
    _write_uvarint(w, len(tags))
    for tag, data in tags:
        _write_uvarint(w, tag)
        _write_uvarint(w, len(data))
        w.write(data)


def _as_view(data: memoryview | bytes) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
