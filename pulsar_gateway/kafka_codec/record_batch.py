"""Kafka RecordBatch (magic v2): decode what producers send, encode what consumers fetch.

Layout (all big-endian; see Kafka's ``DefaultRecordBatch``)::

    0  baseOffset int64          27 baseTimestamp int64
    8  batchLength int32         35 maxTimestamp int64
    12 partitionLeaderEpoch i32  43 producerId int64
    16 magic int8 (= 2)          51 producerEpoch int16
    17 crc uint32 (CRC-32C of    53 baseSequence int32
       bytes 21..end)            57 recordCount int32
    21 attributes int16          61 records (compressed as a whole if codec != 0)
    23 lastOffsetDelta int32

    Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
            keyLength varint + key, valueLength varint + value,
            headerCount varint, [keyLength varint + key (UTF-8), valueLength varint + value]
    (varints are zigzag LEB128; a length of -1 means null)

Both per-record loops are the gateway's hot path (every produced and every fetched record goes
through one of them), so they are written as flat loops over ``bytes``/``bytearray`` with the
common one- and two-byte varints decoded inline and a precomputed table for encoding; only rare
shapes (long varints, headers) leave the loop for a helper. Everything else here runs once per
batch and is written for clarity instead.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import crc32c

from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CompressionError,
    InflateBudget,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode

MAGIC = 2
HEADER_SIZE = 61
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
_LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiib")  # up to and including magic
_AFTER_MAGIC = struct.Struct(">Ihiqqqhii")  # crc .. recordCount
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_U64 = 1 << 64
# A base timestamp this far from the int64 limits cannot overflow by a one-byte delta, so the
# decode loop's fast path needs no wrap check (see _wrap64).
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
_BLANK_HEADER = bytes(HEADER_SIZE)


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


class DecodedBatch:
    """The header fields of one v2 batch, its records, and its raw bytes (for storing as-is)."""

    __slots__ = (
        "base_offset",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
        "records",
        "raw",
    )

    def __init__(
        self,
        base_offset: int,
        partition_leader_epoch: int,
        magic: int,
        crc: int,
        attributes: int,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        record_count: int,
        records: list[Record],
        raw: memoryview,
    ) -> None:
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.magic = magic
        self.crc = crc
        self.attributes = attributes
        self.last_offset_delta = last_offset_delta
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.record_count = record_count
        self.records = records
        self.raw = raw

    @property
    def compression(self) -> int:
        """Codec id, 0-4."""
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & ATTR_LOG_APPEND_TIME else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    def __repr__(self) -> str:
        return (
            f"DecodedBatch(base_offset={self.base_offset}, records={self.record_count}, "
            f"codec={self.compression}, attributes={self.attributes:#x}, "
            f"producer_id={self.producer_id}, size={len(self.raw)})"
        )


# --------------------------------------------------------------------------------------------
# decode


def decode_batches(
    data: bytes | bytearray | memoryview,
    verify_crc: bool = True,
    max_uncompressed: int = DEFAULT_MAX_DECOMPRESSED,
    budget: InflateBudget | None = None,
    records: bool = True,
) -> list[DecodedBatch]:
    """Decode every batch in a Produce request's ``records`` bytes.

    ``records=False`` reads the batch headers (and checks the CRC) and leaves ``records``
    empty: a batch stored as sent (the `kafka` entry format) needs nothing more. Its
    records are only walked by their length prefixes, to check the count it claims
    (a compressed one is inflated for that, within the same limits).

    The input must be whole batches back to back (a partial trailing batch is an error, unlike
    in a Fetch response). ``max_uncompressed`` bounds what one compressed batch may inflate to,
    ``budget`` what all the compressed batches of a request may, together.
    Raises RecordBatchError and nothing else on malformed input.
    """
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    n = len(view)
    pos = 0
    batches: list[DecodedBatch] = []
    while pos < n:
        if n - pos < _MAGIC_OFFSET + 1:
            raise RecordBatchError(f"truncated batch header: {n - pos} bytes left at {pos}")
        base_offset, length, leader_epoch, magic = _PREFIX.unpack_from(view, pos)
        if magic != MAGIC:
            if magic in (0, 1):
                # Kafka's ProduceRequest.validateRecords answers ErrorCode.INVALID_RECORD for legacy
                # message sets in Produce v3+, and v3 is the oldest Produce we serve.
                raise RecordBatchError(
                    f"legacy message set (magic {magic}) is not accepted; magic 2 is required",
                    ErrorCode.INVALID_RECORD,
                )
            raise RecordBatchError(f"unknown magic byte {magic} at {pos}")
        end = pos + _LOG_OVERHEAD + length
        if length < HEADER_SIZE - _LOG_OVERHEAD:
            raise RecordBatchError(f"batch length {length} is smaller than a batch header")
        if end > n:
            raise RecordBatchError(f"batch length {length} runs past the end ({n - pos} bytes)")
        (crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count) = (
            _AFTER_MAGIC.unpack_from(view, pos + _CRC_OFFSET)
        )
        if verify_crc and crc32c.crc32c(view[pos + _ATTRIBUTES_OFFSET : end]) != crc:
            raise RecordBatchError(f"CRC mismatch in batch at {pos}")
        if count < 0:
            raise RecordBatchError(f"negative record count {count}")
        codec = attrs & ATTR_CODEC_MASK
        body = view[pos + HEADER_SIZE : end]
        if codec > 4:
            raise RecordBatchError(
                f"unknown compression codec {codec}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            )
        header = (base_offset, leader_epoch, magic, crc, attrs, last_delta, base_ts, max_ts)
        producer = (pid, pepoch, bseq, count)
        if not records and codec == 0:
            # the count is what the log numbers the batch by: the records' lengths must
            # add up to the body exactly, or a batch could claim offsets it does not hold
            _walk_records(body, count)
            batches.append(DecodedBatch(*header, *producer, [], view[pos:end]))
            pos = end
            continue
        if codec == 0:
            buf = body.tobytes()
        else:
            limit = max_uncompressed if budget is None else min(max_uncompressed, budget.remaining)
            try:
                buf = compression.decompress(codec, body, limit)
            except CompressionError as e:
                raise RecordBatchError(str(e), e.code) from e
            if budget is not None:
                budget.take(len(buf))
            if not records:
                # stored as sent: inflated only to check its count, as an uncompressed one
                _walk_records(memoryview(buf), count)
                batches.append(DecodedBatch(*header, *producer, [], view[pos:end]))
                pos = end
                continue
        # Every record takes at least 7 bytes; refuse absurd counts before looping on them.
        if count * 7 > len(buf):
            raise RecordBatchError(f"record count {count} does not fit in {len(buf)} bytes")
        try:
            decoded = _decode_records(buf, count, base_ts)
        except IndexError:
            raise RecordBatchError("record runs past the end of the batch") from None
        batches.append(DecodedBatch(*header, *producer, decoded, view[pos:end]))
        pos = end
    return batches


def batch_headers(data: bytes | bytearray | memoryview) -> list[DecodedBatch]:
    """The headers of every batch in ``data`` (whole v2 batches back to back), CRCs checked,
    nothing inflated or walked: for a reader that passes batches on as they are (the
    migration's copy) and must not pay for their records. ``records`` stays empty."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
    found: list[DecodedBatch] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            raise RecordBatchError(f"truncated batch header: {len(view) - pos} bytes at {pos}")
        base_offset, length, leader_epoch, magic = _PREFIX.unpack_from(view, pos)
        end = pos + _LOG_OVERHEAD + length
        if magic != MAGIC or length < HEADER_SIZE - _LOG_OVERHEAD or end > len(view):
            raise RecordBatchError(f"not a whole v2 batch at {pos} (magic {magic})")
        fields = _AFTER_MAGIC.unpack_from(view, pos + _CRC_OFFSET)
        if crc32c.crc32c(view[pos + _ATTRIBUTES_OFFSET : end]) != fields[0]:
            raise RecordBatchError(f"CRC mismatch in batch at {pos}")
        found.append(
            DecodedBatch(base_offset, leader_epoch, magic, *fields, [], view[pos:end])  # type: ignore[arg-type]
        )
        pos = end
    return found


def _walk_records(body: memoryview, count: int) -> None:
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
                    size, pos = _varint_slow(body, pos, 5)  # type: ignore[arg-type]
            if size < 6:
                raise RecordBatchError(f"record length {size} out of range")
            pos += size
    except IndexError:
        raise RecordBatchError("record runs past the end of the batch") from None
    if pos != limit:
        raise RecordBatchError(f"{count} records end at byte {pos} of a {limit}-byte body")


def _decode_records(buf: bytes, count: int, base_ts: int) -> list[Record]:
    """The produce-side hot loop. IndexError means truncated input (the caller maps it)."""
    zz = _ZZ1
    slow = _varint_slow
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
        records = [r._replace(timestamp=_wrap64(r.timestamp)) for r in records]
    return records


def _varint_slow(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
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
    n, pos = _varint_slow(buf, pos, 5)
    if n < -1:
        raise RecordBatchError(f"negative length {n}")
    return n, pos


def _wrap64(v: int) -> int:
    if _I64_MIN <= v <= _I64_MAX:
        return v
    return ((v - _I64_MIN) % _U64) + _I64_MIN


def _timestamp_slow(buf: bytes, pos: int, base_ts: int) -> tuple[int, int]:
    delta, pos = _varint_slow(buf, pos, 10)
    return _wrap64(base_ts + delta), pos


def _decode_headers(buf: bytes, pos: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """Headers of one record: rare enough to leave the main loop, common enough to be tight."""
    count, pos = _varint_slow(buf, pos, 5)
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
            n, pos = _varint_slow(buf, pos, 5)
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


# --------------------------------------------------------------------------------------------
# encode

RecordLike = tuple[
    int,
    int,
    bytes | bytearray | memoryview | None,
    bytes | bytearray | memoryview | None,
    Sequence[tuple[str, bytes | bytearray | memoryview | None]],
]


def encode_batch(
    base_offset: int,
    records: Sequence[RecordLike] | Sequence[Record],
    compression_type: int = 0,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    compression_level: int | None = None,
    out: bytearray | None = None,
) -> bytearray:
    """Encode ``records`` as one v2 batch and return the buffer holding it.

    ``records`` are ``(offset_delta, timestamp_ms, key, value, headers)`` tuples in offset
    order, so decoded ``Record`` objects (or any 5-tuples a storage layer yields) go in without
    conversion. With ``out``, the batch is appended to that bytearray (say, a Fetch response
    being assembled) and ``out`` is returned: an uncompressed batch is then written in place
    with no intermediate copy. ``last_offset_delta`` defaults to the last record's delta; pass
    it for a compacted batch whose tail records are gone. ``max_timestamp`` defaults to the
    largest record timestamp (pass the append time for LOG_APPEND_TIME batches).
    """
    buf = bytearray() if out is None else out
    start = len(buf)
    buf += _BLANK_HEADER  # filled in once the records are written
    if records:
        base_ts = records[0][1]
        if compression_type == 0:
            count, max_ts, last_delta = _encode_records(buf, records, base_ts)
        else:
            body = bytearray()
            count, max_ts, last_delta = _encode_records(body, records, base_ts)
            try:
                buf += compression.compress(compression_type, body, compression_level)
            except CompressionError as e:
                del buf[start:]
                raise RecordBatchError(str(e), e.code) from e
    else:
        # An empty batch only exists after compaction; Kafka gives it no timestamps.
        base_ts = max_ts = -1
        count = 0
        last_delta = 0
    if last_offset_delta is not None:
        last_delta = last_offset_delta
    if max_timestamp is not None:
        max_ts = max_timestamp
    attrs = compression_type & ATTR_CODEC_MASK
    if timestamp_type:
        attrs |= ATTR_LOG_APPEND_TIME
    if is_transactional:
        attrs |= ATTR_TRANSACTIONAL
    if is_control:
        attrs |= ATTR_CONTROL
    _HEADER.pack_into(
        buf,
        start,
        base_offset,
        len(buf) - start - _LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attrs,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    _seal(buf, start)
    return buf


def _seal(buf: bytearray, start: int) -> None:
    """Write the CRC of the batch that runs from ``start`` to the end of ``buf``."""
    crc = crc32c.crc32c(memoryview(buf)[start + _ATTRIBUTES_OFFSET :])
    struct.pack_into(">I", buf, start + _CRC_OFFSET, crc)


def _encode_records(
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
    max_ts = _I64_MIN
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
        else:
            kn = len(key)
            kb = table[kn << 1] if kn < half else slow(kn)
        if value is None:
            vb = null
            vn = 0
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
    v = _wrap64(v)
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


def rewrite_base_offset(
    batch: bytes | bytearray | memoryview,
    base_offset: int,
    partition_leader_epoch: int | None = None,
    *,
    out: bytearray | None = None,
) -> bytes | bytearray:
    """Return ``batch`` re-based at ``base_offset`` without touching its CRC.

    baseOffset (and partitionLeaderEpoch) precede the CRC'd range, so a stored batch can be
    served at whatever offset the log assigns it at the cost of one copy. With ``out`` (a
    Fetch response being assembled) that copy is the append to ``out``, which is returned.
    """
    view = memoryview(batch)
    if len(view) < HEADER_SIZE:
        raise RecordBatchError(f"batch of {len(view)} bytes is shorter than its header")
    head = _I64.pack(base_offset) + (
        view[8:16]
        if partition_leader_epoch is None
        else bytes(view[8:12]) + _I32.pack(partition_leader_epoch)
    )
    if out is None:
        return b"".join((head, view[16:]))
    out += head
    out += view[16:]
    return out


def truncate_batch(buf: bytearray, start: int, limit: int, keep_one: bool = False) -> int:
    """Cut the uncompressed batch that runs from ``start`` to the end of ``buf`` after its last
    whole record ending at or before ``limit`` (a position in ``buf``); return how many records
    it keeps.

    Fetch encodes a run of stored records as one batch and trims it to the response's byte
    budget afterwards, so the encoding loop itself carries no per-record limit check: only the
    one batch that overflows is walked here (record lengths and deltas, nothing decoded). With
    ``keep_one`` the first record stays even when it alone passes ``limit`` (KIP-74: a consumer
    always makes progress). A batch left without records is removed from ``buf`` entirely.
    """
    (base_ts,) = _I64.unpack_from(buf, start + 27)
    pos = start + HEADER_SIZE
    end = len(buf)
    kept = 0
    last_delta = 0
    max_ts = _I64_MIN
    while pos < end:
        size, body = _varint_slow(buf, pos, 5)
        record_end = body + size
        if record_end > limit and (kept or not keep_one):
            break
        ts_delta, at = _varint_slow(buf, body + 1, 10)  # after the attributes byte
        last_delta, _ = _varint_slow(buf, at, 5)
        max_ts = max(max_ts, _wrap64(base_ts + ts_delta))
        kept += 1
        pos = record_end
    if not kept:
        del buf[start:]
        return 0
    if pos < end:
        del buf[pos:]
        struct.pack_into(">i", buf, start + 8, pos - start - _LOG_OVERHEAD)
        struct.pack_into(">i", buf, start + 23, last_delta)
        _I64.pack_into(buf, start + 35, max_ts)
        struct.pack_into(">i", buf, start + 57, kept)
        _seal(buf, start)
    return kept


def stamp_log_append_time(batch: bytes | bytearray | memoryview, now: int) -> bytes:
    """One batch marked LogAppendTime with ``now`` as its max timestamp, CRC renewed: what a
    Kafka broker does to a batch appended to a `message.timestamp.type=LogAppendTime` topic
    (consumers then show ``now`` for every record of it)."""
    buf = bytearray(batch)
    (attrs,) = struct.unpack_from(">h", buf, _ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, _ATTRIBUTES_OFFSET, attrs | ATTR_LOG_APPEND_TIME)
    _I64.pack_into(buf, 35, now)
    _seal(buf, 0)
    return bytes(buf)


def check_produce_batches(batches: Sequence[DecodedBatch], api_version: int) -> None:
    """Apply the broker's Produce validation (ProduceRequest.validateRecords, LogValidator).

    Kept apart from decode_batches because the decoder also reads batches that are legal in a
    Fetch response but not in a Produce request (compacted gaps, several batches).
    """
    if not batches:
        raise RecordBatchError("produce request without a record batch", ErrorCode.INVALID_RECORD)
    if len(batches) > 1:
        raise RecordBatchError(
            "produce requests must contain exactly one batch", ErrorCode.INVALID_RECORD
        )
    batch = batches[0]
    if batch.compression == compression.ZSTD and api_version < 7:
        raise RecordBatchError(
            "zstd needs Produce v7 or later", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        )
    if batch.base_offset != 0:
        raise RecordBatchError(
            f"produced batch has base offset {batch.base_offset}, not 0", ErrorCode.INVALID_RECORD
        )
    if batch.is_control:
        raise RecordBatchError("clients may not produce control batches", ErrorCode.INVALID_RECORD)
    count = batch.record_count
    if count <= 0 or batch.last_offset_delta + 1 != count:
        raise RecordBatchError(
            f"record count {count} does not match last offset delta {batch.last_offset_delta}",
            ErrorCode.INVALID_RECORD,
        )
    for i, record in enumerate(batch.records):
        if record[0] != i:
            raise RecordBatchError(
                f"record {i} has offset delta {record[0]}", ErrorCode.INVALID_RECORD
            )
