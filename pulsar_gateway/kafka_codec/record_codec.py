"""The records inside a Kafka RecordBatch (record_batch.py has the batch around them): the
per-record decode and encode loops, the gateway's hot path.

Both loops are written as flat loops over ``bytes``/``bytearray`` with the common one- and
two-byte varints decoded inline and a precomputed table for encoding; only rare shapes (long
varints, headers) leave the loop for a helper. The record layout is in record_batch.py's
docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pulsar_gateway.kafka_codec.errors import ErrorCode

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
_U64 = 1 << 64
# A base timestamp this far from the int64 limits cannot overflow by a one-byte delta, so the
# decode loop's fast path needs no wrap check (see wrap64).
_TS_SAFE = 1 << 62

# Zigzag decode of one-byte varints: _ZZ1[b] for b < 128.
_ZZ1 = tuple((b >> 1) ^ -(b & 1) for b in range(128))
# Encoded zigzag varints for every zigzag value below 2**14 (all one- and two-byte varints):
# values -8192..8191, i.e. every key/value length under 8 KiB, offset delta and small timestamp
# delta, cost one list lookup instead of a loop.
_VARINT_TABLE_SIZE = 1 << 14
_HALF = _VARINT_TABLE_SIZE >> 1


def _uvarint_bytes(u: int) -> bytes:
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_VARINT = [_uvarint_bytes(z) for z in range(_VARINT_TABLE_SIZE)]
_NULL = _VARINT[1]  # length -1
_NO_HEADERS = _VARINT[0]


class RecordBatchError(Exception):
    """Malformed or unacceptable batch; ``code`` is the Kafka error code to answer with."""

    def __init__(self, message: str, code: int = ErrorCode.CORRUPT_MESSAGE) -> None:
        super().__init__(message)
        self.code = code


class Record(NamedTuple):
    """One record. A NamedTuple so that encode_batch can unpack it like any 5-tuple.

    ``timestamp`` is absolute (baseTimestamp + delta, in ms); for a LOG_APPEND_TIME batch a
    consumer would show the batch's max_timestamp instead. Header keys are ``str``; bytes that
    are not UTF-8 survive as surrogate escapes (``errors="surrogateescape"``) so that a batch
    re-encodes byte for byte, as Kafka brokers never decode header keys at all.
    """

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


RecordLike = tuple[
    int,
    int,
    bytes | bytearray | memoryview | None,
    bytes | bytearray | memoryview | None,
    Sequence[tuple[str, bytes | bytearray | memoryview | None]],
]


def walk_records(body: memoryview, count: int) -> None:
    """Check that exactly ``count`` records, by their length prefixes, fill ``body``."""
    if count * 7 > len(body):
        raise RecordBatchError(f"record count {count} does not fit in {len(body)} bytes")
    limit = len(body)
    pos = 0
    zz = _ZZ1
    try:
        for _ in range(count):
            b = body[pos]
            if b < 128:
                size = zz[b]
                pos += 1
            else:
                c = body[pos + 1]
                if c < 128:  # two bytes: every record of 64 B to 8 KiB
                    u = (b & 127) | (c << 7)
                    size = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    size, pos = varint_slow(body, pos, 5)  # type: ignore[arg-type]
            if size < 6:
                raise RecordBatchError(f"record length {size} out of range")
            pos += size
    except IndexError:
        raise RecordBatchError("record runs past the end of the batch") from None
    if pos != limit:
        raise RecordBatchError(f"{count} records end at byte {pos} of a {limit}-byte body")


def decode_records(buf: bytes, count: int, base_ts: int) -> list[Record]:
    """The produce-side hot loop. IndexError means truncated input (the caller maps it)."""
    # The record walk is written out here, in decode_records/decode_messages and in
    # record_entry.build_entry on purpose: a walk shared as a generator cost 5-15 % more
    # per record (docs/pulsar-protocol.md, "Why the record walk is written three times").
    zz = _ZZ1
    slow = varint_slow
    new = tuple.__new__
    rec_type = Record
    records: list[Record] = []
    append = records.append
    limit = len(buf)
    pos = 0
    for _ in range(count):
        # record length
        b = buf[pos]
        if b < 128:
            size = zz[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 128:
                u = (b & 127) | (c << 7)
                size = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                size, pos = slow(buf, pos, 5)
        end = pos + size
        if size < 6 or end > limit:
            raise RecordBatchError(f"record length {size} out of range")
        pos += 1  # record attributes: unused by every Kafka version so far
        # timestamp delta
        b = buf[pos]
        if b < 128:
            ts = base_ts + zz[b]
            pos += 1
        else:
            ts, pos = _timestamp_slow(buf, pos, base_ts)
        # offset delta
        b = buf[pos]
        if b < 128:
            offset_delta = zz[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c < 128:
                u = (b & 127) | (c << 7)
                offset_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                offset_delta, pos = slow(buf, pos, 5)
        # key
        b = buf[pos]
        if b == 1:
            key = None
            pos += 1
        elif b < 128 and not b & 1:
            pos += 1
            key = buf[pos : pos + (b >> 1)]
            pos += b >> 1
        else:
            n, pos = _length_slow(buf, pos)
            if n < 0:
                key = None
            else:
                key = buf[pos : pos + n]
                pos += n
        # value
        b = buf[pos]
        if b == 1:
            value = None
            pos += 1
        elif b < 128:
            if b & 1:
                raise RecordBatchError(f"negative value length {zz[b]}")
            pos += 1
            value = buf[pos : pos + (b >> 1)]
            pos += b >> 1
        else:
            c = buf[pos + 1]
            if c < 128 and not b & 1:
                n = ((b & 127) | (c << 7)) >> 1
                pos += 2
                value = buf[pos : pos + n]
                pos += n
            else:
                n, pos = _length_slow(buf, pos)
                if n < 0:
                    value = None
                else:
                    value = buf[pos : pos + n]
                    pos += n
        # headers
        if buf[pos] == 0:
            headers: list[tuple[str, bytes | None]] = []
            pos += 1
        else:
            headers, pos = _decode_headers(buf, pos)
        if pos != end:
            raise RecordBatchError(f"record length {size} does not match its fields")
        append(new(rec_type, (offset_delta, ts, key, value, headers)))
    if pos != limit:
        raise RecordBatchError(f"{limit - pos} bytes left over after {count} records")
    if not -_TS_SAFE < base_ts < _TS_SAFE:
        # Java's long arithmetic wraps; so does ours, for bases near the int64 limits.
        records = [r._replace(timestamp=wrap64(r.timestamp)) for r in records]
    return records


def varint_slow(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """Zigzag varint of any length up to ``max_bytes`` (5 for int32, 10 for int64 fields)."""
    u = 0
    shift = 0
    stop = pos + max_bytes
    while pos < stop:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
    raise RecordBatchError(f"varint longer than {max_bytes} bytes")


def _length_slow(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = varint_slow(buf, pos, 5)
    if n < -1:
        raise RecordBatchError(f"negative length {n}")
    return n, pos


def wrap64(v: int) -> int:
    if I64_MIN <= v <= I64_MAX:
        return v
    return ((v - I64_MIN) % _U64) + I64_MIN


def _timestamp_slow(buf: bytes, pos: int, base_ts: int) -> tuple[int, int]:
    delta, pos = varint_slow(buf, pos, 10)
    return wrap64(base_ts + delta), pos


def _decode_headers(buf: bytes, pos: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """Headers of one record: rare enough to leave the main loop, common enough to be tight."""
    count, pos = varint_slow(buf, pos, 5)
    if count < 0:
        raise RecordBatchError(f"negative header count {count}")
    if count > len(buf) - pos:
        raise RecordBatchError(f"header count {count} does not fit in the record")
    headers: list[tuple[str, bytes | None]] = []
    append = headers.append
    for _ in range(count):
        b = buf[pos]
        if b < 128 and not b & 1:
            n = b >> 1
            pos += 1
        else:
            n, pos = varint_slow(buf, pos, 5)
            if n < 0:
                raise RecordBatchError(
                    "null or negative-length header key", ErrorCode.INVALID_RECORD
                )
        key = buf[pos : pos + n].decode("utf-8", "surrogateescape")
        pos += n
        b = buf[pos]
        if b == 1:
            value = None
            pos += 1
        elif b < 128 and not b & 1:
            pos += 1
            value = buf[pos : pos + (b >> 1)]
            pos += b >> 1
        else:
            n, pos = _length_slow(buf, pos)
            if n < 0:
                value = None
            else:
                value = buf[pos : pos + n]
                pos += n
        append((key, value))
    return headers, pos


def encode_records(
    buf: bytearray, records: Iterable[RecordLike] | Iterable[Record], base_ts: int
) -> tuple[int, int, int]:
    """The fetch-side hot loop: append each record to ``buf``.

    Returns (count, max timestamp, last offset delta).
    """
    table = _VARINT
    lim = _VARINT_TABLE_SIZE
    half = _HALF
    null = _NULL
    no_headers = _NO_HEADERS
    slow = _zigzag_bytes
    max_ts = I64_MIN
    count = 0
    offset_delta = 0
    for offset_delta, ts, key, value, headers in records:
        d = ts - base_ts
        z = (d << 1) ^ (d >> 63)  # zigzag; never negative, so a table index or "too big"
        tb = table[z] if z < lim else slow(d)
        z = (offset_delta << 1) ^ (offset_delta >> 63)
        ob = table[z] if z < lim else slow(offset_delta)
        if key is None:
            kb = null
            kn = 0
            key = b""  # nothing of it is written (`kn`); it only tells the type checker so
        else:
            kn = len(key)
            kb = table[kn << 1] if kn < half else slow(kn)
        if value is None:
            vb = null
            vn = 0
            value = b""
        else:
            vn = len(value)
            vb = table[vn << 1] if vn < half else slow(vn)
        hb = _encode_headers(headers) if headers else no_headers
        size = 1 + len(tb) + len(ob) + len(kb) + kn + len(vb) + vn + len(hb)
        buf += table[size << 1] if size < half else slow(size)
        buf.append(0)  # record attributes
        buf += tb
        buf += ob
        buf += kb
        if kn:
            buf += key
        buf += vb
        if vn:
            buf += value
        buf += hb
        if ts > max_ts:
            max_ts = ts
        count += 1
    return count, max_ts, offset_delta


def _zigzag_bytes(v: int) -> bytes:
    """Zigzag varint for values beyond the table; wraps to int64 as Java's longs do."""
    v = wrap64(v)
    return _uvarint_bytes(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _encode_headers(
    headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]],
) -> bytearray:
    table = _VARINT
    half = _HALF
    n = len(headers)
    out = bytearray(table[n << 1] if n < half else _zigzag_bytes(n))
    for key, value in headers:
        try:
            k = key.encode("utf-8", "surrogateescape")
        except (UnicodeEncodeError, AttributeError) as e:
            raise RecordBatchError(
                f"header key {key!r} is not a string", ErrorCode.INVALID_RECORD
            ) from e
        n = len(k)
        out += table[n << 1] if n < half else _zigzag_bytes(n)
        out += k
        if value is None:
            out += _NULL
        else:
            n = len(value)
            out += table[n << 1] if n < half else _zigzag_bytes(n)
            out += value
    return out


# for record_messages.decode_messages, the same loop making messages instead of records
TS_SAFE = _TS_SAFE
ZIGZAG_BYTE = _ZZ1
decode_headers = _decode_headers
length_slow = _length_slow
timestamp_slow = _timestamp_slow
# for storage/kafka/read_batches.py, which writes records straight from Pulsar entries
VARINTS = _VARINT
VARINT_TABLE_SIZE = _VARINT_TABLE_SIZE
zigzag_bytes = _zigzag_bytes
encode_headers = _encode_headers  # and storage/kafka/read_headers.py, a record's headers
