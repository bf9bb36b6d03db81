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
through one of them) and live in record_codec.py, written for speed. Everything here runs once
per batch and is written for clarity instead.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c

from pulsar_gateway.gateway.messages import RecordMessages
from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CompressionError,
    InflateBudget,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_codec import (
    I64_MIN,
    Record,
    RecordBatchError,
    RecordLike,
    decode_records,
    encode_records,
    varint_slow,
    walk_records,
    wrap64,
)
from pulsar_gateway.kafka_codec.record_entry import record_messages

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
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordCount: the CRC's start
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
# the most parts `seal_records` joins into one piece: some 500 records of 100 bytes, 60 KB
SEAL_PIECE_PARTS = 3000

_BLANK_HEADER = bytes(HEADER_SIZE)


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
        "messages",
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
        # `pulsar`-format messages decoded in place of `records` (decode_batches' `messages`)
        self.messages: RecordMessages | None = None

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
    messages: bool = False,
) -> list[DecodedBatch]:
    """Decode every batch in a Produce request's ``records`` bytes.

    ``messages=True`` decodes the records straight into `pulsar`-format messages
    (record_messages.py), in ``messages``, leaving ``records`` empty; their offset deltas
    are checked there (check_produce_batches' rule).

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
            walk_records(body, count)
            batches.append(DecodedBatch(*header, *producer, [], view[pos:end]))
            pos = end
            continue
        start = 0  # where the records start in `buf`
        if codec == 0 and messages:
            # one copy of the whole batch: the records are read from it after the header,
            # and it is the batch a tail fetch serves (`raw` a view of it, kept as that
            # object: written_entries.WrittenEntry.as_one), not a second copy of it
            whole = view[pos:end].tobytes()
            buf, start = whole, HEADER_SIZE
        elif codec == 0:
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
                walk_records(memoryview(buf), count)
                batches.append(DecodedBatch(*header, *producer, [], view[pos:end]))
                pos = end
                continue
        # Every record takes at least 7 bytes; refuse absurd counts before looping on them.
        if count * 7 > len(buf) - start:
            raise RecordBatchError(f"record count {count} does not fit in {len(buf) - start} bytes")
        try:
            if messages:
                raw = memoryview(buf) if start else view[pos:end]
                batch = DecodedBatch(*header, *producer, [], raw)
                batch.messages = record_messages(buf, count, base_ts, codec, start)
                batches.append(batch)
                pos = end
                continue
            decoded = decode_records(buf, count, base_ts)
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
        (crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count) = (
            _AFTER_MAGIC.unpack_from(view, pos + _CRC_OFFSET)
        )
        if crc32c.crc32c(view[pos + _ATTRIBUTES_OFFSET : end]) != crc:
            raise RecordBatchError(f"CRC mismatch in batch at {pos}")
        header = (base_offset, leader_epoch, magic, crc, attrs, last_delta, base_ts, max_ts)
        found.append(DecodedBatch(*header, pid, pepoch, bseq, count, [], view[pos:end]))
        pos = end
    return found


# --------------------------------------------------------------------------------------------
# encode


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
            count, max_ts, last_delta = encode_records(buf, records, base_ts)
        else:
            body = bytearray()
            count, max_ts, last_delta = encode_records(body, records, base_ts)
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


def seal_records(
    parts: list[bytes],
    count: int,
    base_ts: int,
    max_ts: int,
    codec: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    """A plain v2 batch at base offset 0 around `count` records already encoded (the bytes
    of `parts`, in order), with offset deltas 0..count-1 and timestamps relative to
    `base_ts` (CreateTime; `producer`: its id, epoch and base sequence, an idempotent
    producer's or none; `transactional`: marked so): what a reader that writes records itself
    (storage/kafka/read_batches.py) puts around them.

    The batch is the one large buffer made: the records are joined and checksummed in
    pieces of at most SEAL_PIECE_PARTS parts (well under the size at which the allocator
    maps a block of its own, so each piece reuses freed heap memory), then joined once
    behind the header. Joined whole, then copied behind a header and copied again into
    bytes, a batch of 1 MB took three fresh mappings and their page faults: 8.9 ms against
    3.5 ms this way, with the gateway's 512 KiB mapping threshold (docs/backend.md,
    "Memory"; the old way took 0.9 ms without it). With `codec`, the records compressed
    with it, as a producer would (the migration's gathered batches keep the source's)."""
    pieces = [
        b"".join(parts[i : i + SEAL_PIECE_PARTS]) for i in range(0, len(parts), SEAL_PIECE_PARTS)
    ]
    if codec:
        pieces = [compression.compress(codec, b"".join(pieces))]
    attributes = codec | ATTR_TRANSACTIONAL if transactional else codec
    tail = _AFTER_CRC.pack(attributes, count - 1, base_ts, max_ts, *producer, count)
    crc = crc32c.crc32c(tail)
    size = len(tail)
    for piece in pieces:
        crc = crc32c.crc32c(piece, crc)
        size += len(piece)
    head = _PREFIX.pack(0, size + _ATTRIBUTES_OFFSET - _LOG_OVERHEAD, -1, MAGIC) + _U32.pack(crc)
    return b"".join([head, tail, *pieces])


def _seal(buf: bytearray, start: int) -> None:
    """Write the CRC of the batch that runs from ``start`` to the end of ``buf``."""
    crc = crc32c.crc32c(memoryview(buf)[start + _ATTRIBUTES_OFFSET :])
    struct.pack_into(">I", buf, start + _CRC_OFFSET, crc)


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
    max_ts = I64_MIN
    while pos < end:
        size, body = varint_slow(buf, pos, 5)
        record_end = body + size
        if record_end > limit and (kept or not keep_one):
            break
        ts_delta, at = varint_slow(buf, body + 1, 10)  # after the attributes byte
        last_delta, _ = varint_slow(buf, at, 5)
        max_ts = max(max_ts, wrap64(base_ts + ts_delta))
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
