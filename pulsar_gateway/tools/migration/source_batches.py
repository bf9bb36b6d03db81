"""One source partition as record batches ready to append to the gateway.

A batch is passed on as it is whenever it can be: it lies wholly inside the range being
copied, its records have consecutive offsets (no compaction gap), and it carries create
times. Only its producer fields are cleared (the copy is not the source's idempotent or
transactional producer, and the gateway would check those) and its CRC is written again.
Anything else, the part of a batch before the start or after the end, a compacted batch,
one stamped with log-append times, is decoded and written as a new batch of exactly the
records wanted. Small batches are gathered into one new batch too, so that the copy does
not pay a round trip per tiny source batch.

Fetches are read_committed: control batches and the batches of aborted transactions (from
the Fetch's aborted-transactions list, each active until its producer's next control batch)
are skipped, as a read_committed consumer skips them.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import crc32c

from pulsar_gateway.kafka_codec.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CompressionError,
    decompress,
)
from pulsar_gateway.kafka_codec.record_batch import (
    ATTR_CODEC_MASK,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    DecodedBatch,
    RecordBatchError,
    batch_headers,
    decode_batches,
    encode_batch,
    seal_records,
)
from pulsar_gateway.kafka_codec.record_codec import (
    VARINT_TABLE_SIZE,
    VARINTS,
    varint_slow,
    wrap64,
    zigzag_bytes,
)
from pulsar_gateway.tools.migration.errors import MigrationError
from pulsar_gateway.tools.migration.wire import KafkaWire

FETCH = 1
MAX_FETCH_BYTES = 16 * 1024 * 1024
MAX_PARTITION_FETCH_BYTES = 8 * 1024 * 1024
# A batch with fewer records than this is gathered with its neighbours into a new batch.
SMALL_BATCH_RECORDS = 500
# What one gathered (or re-encoded) batch holds at most.
GATHER_RECORDS = 20_000
GATHER_BYTES = 1024 * 1024
OFFSET_OUT_OF_RANGE = 1
_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_CRC = struct.Struct(">I")


@dataclass(frozen=True)
class Chunk:
    """Records to append as one batch: their source offsets, and the batch."""

    offsets: Sequence[int]
    batch: bytes


def passed_on(raw: memoryview) -> bytes:
    """The batch with its producer fields cleared, the transactional bit off and a new CRC."""
    out = bytearray(raw)
    out[0:8] = bytes(8)  # base offset: the gateway assigns it
    (attributes,) = _ATTRIBUTES.unpack_from(out, 21)
    _ATTRIBUTES.pack_into(out, 21, attributes & ~ATTR_TRANSACTIONAL)
    _PRODUCER.pack_into(out, 43, -1, -1, -1)
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


def whole_batches(records: memoryview) -> memoryview:
    """The complete batches at the front of a Fetch's records (a broker may cut the last)."""
    position = 0
    while len(records) - position >= 12:
        (length,) = _LENGTH.unpack_from(records, position + 8)
        end = position + 12 + length
        if length < 0 or end > len(records):
            break
        position = end
    return records[:position]


class _Gathered:
    """Records of several batches (or parts of batches) on their way into one new batch.

    Each record is moved as its bytes: only its head (length, timestamp delta, offset delta)
    is written again for the new batch; its key, value and headers are copied as they are
    (the gateway checks them). Decoding every record into objects and encoding them again
    was most of the migrate process's copying time (py-spy)."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.parts: list[bytes] = []
        self.base_ts = self.max_ts = 0
        self.size = 0
        self.codec = 0

    def add(self, batch: DecodedBatch, start: int, end: int) -> None:
        body = _records_body(batch)
        stamp = batch.max_timestamp if batch.attributes & ATTR_LOG_APPEND_TIME else None
        base_offset, base_ts = batch.base_offset, batch.base_timestamp
        offsets, parts = self.offsets, self.parts
        limit = len(body)
        pos = 0
        try:
            for _ in range(batch.record_count):
                size, pos = varint_slow(body, pos, 5)
                stop = pos + size
                if size < 6 or stop > limit:
                    raise RecordBatchError(f"record length {size} out of range")
                delta, at = varint_slow(body, pos + 1, 10)  # after the record's attributes
                offset_delta, at = varint_slow(body, at, 5)
                offset = base_offset + offset_delta
                if start <= offset < end:
                    ts = wrap64(base_ts + delta) if stamp is None else stamp
                    if not offsets:
                        self.base_ts = self.max_ts = ts
                    elif ts > self.max_ts:
                        self.max_ts = ts
                    head = b"\x00" + _zigzag(ts - self.base_ts) + _zigzag(len(offsets))
                    rest = body[at:stop]
                    parts.append(_zigzag(len(head) + len(rest)) + head)
                    parts.append(rest)
                    offsets.append(offset)
                pos = stop
        except IndexError:
            raise RecordBatchError("record runs past the end of the batch") from None
        if pos != limit:
            raise RecordBatchError(f"{limit - pos} bytes left over after the batch's records")
        self.size += len(batch.raw)
        self.codec = self.codec or batch.attributes & ATTR_CODEC_MASK

    @property
    def full(self) -> bool:
        return len(self.offsets) >= GATHER_RECORDS or self.size >= GATHER_BYTES

    def take(self) -> Chunk | None:
        if not self.offsets:
            return None
        batch = seal_records(self.parts, len(self.offsets), self.base_ts, self.max_ts, self.codec)
        chunk = Chunk(self.offsets, batch)
        self.__init__()  # type: ignore[misc]
        return chunk


def _records_body(batch: DecodedBatch) -> bytes:
    """The batch's records, inflated."""
    body = batch.raw[HEADER_SIZE:]
    codec = batch.attributes & ATTR_CODEC_MASK
    if not codec:
        return bytes(body)
    try:
        return decompress(codec, body, DEFAULT_MAX_DECOMPRESSED)
    except CompressionError as exc:
        raise RecordBatchError(str(exc), exc.code) from exc


def _zigzag(value: int) -> bytes:
    """A record field's zigzag varint."""
    u = (value << 1) ^ (value >> 63)
    return VARINTS[u] if 0 <= u < VARINT_TABLE_SIZE else zigzag_bytes(value)


def chunks_of(
    batches: list[DecodedBatch],
    position: int,
    end: int,
    aborted: list[tuple[int, int]],
    aborting: set[int],
) -> tuple[list[Chunk], int]:
    """What of `batches` to copy from `position` up to `end`, and the position after them.

    `aborted` is the Fetch's (first offset, producer id) list, sorted, consumed as batches
    pass it; `aborting` the producers whose aborted transaction is under way."""
    chunks: list[Chunk] = []
    gathered = _Gathered()
    for batch in batches:
        last = batch.base_offset + batch.last_offset_delta
        if last < position:
            continue
        if batch.base_offset >= end:
            break
        while aborted and aborted[0][0] <= last:
            aborting.add(aborted.pop(0)[1])
        if batch.is_control:
            aborting.discard(batch.producer_id)
        elif not (batch.is_transactional and batch.producer_id in aborting):
            whole = (
                batch.base_offset >= position
                and last < end
                and batch.record_count == batch.last_offset_delta + 1
                and not batch.attributes & ATTR_LOG_APPEND_TIME
            )
            if whole and batch.record_count >= SMALL_BATCH_RECORDS:
                if (done := gathered.take()) is not None:
                    chunks.append(done)
                offsets = range(batch.base_offset, last + 1)
                chunks.append(Chunk(offsets, passed_on(batch.raw)))
            else:
                gathered.add(batch, position, end)
                if gathered.full and (done := gathered.take()) is not None:
                    chunks.append(done)
        position = min(last + 1, end)
    if (done := gathered.take()) is not None:
        chunks.append(done)
    return chunks, position


def rest_of(chunk: Chunk, skip: int) -> Chunk:
    """`chunk` without its first `skip` records (written by an interrupted earlier run)."""
    decoded = decode_batches(chunk.batch, records=True)[0]
    kept = [
        (index, r.timestamp, r.key, r.value, r.headers)
        for index, r in enumerate(decoded.records[skip:])
    ]
    batch = encode_batch(0, kept, decoded.attributes & ATTR_CODEC_MASK)
    return Chunk(list(chunk.offsets)[skip:], bytes(batch))


async def read_chunks(
    wire: KafkaWire, topic: str, partition: int, start: int, end: int
) -> AsyncIterator[list[Chunk]]:
    """The committed records of one partition from `start` up to `end`, as chunks."""
    version = await wire.version(FETCH, 4, 12)
    position = start
    aborting: set[int] = set()
    while position < end:
        answer = await wire.call(
            FETCH,
            version,
            {
                "replica_id": -1,
                "max_wait_ms": 500,
                "min_bytes": 1,
                "max_bytes": MAX_FETCH_BYTES,
                "isolation_level": 1,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": partition,
                                "fetch_offset": position,
                                "log_start_offset": -1,
                                "current_leader_epoch": -1,
                                "partition_max_bytes": MAX_PARTITION_FETCH_BYTES,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        if answer.get("error_code"):
            raise MigrationError(f"fetching {topic}-{partition}: error {answer['error_code']}")
        (found,) = answer["responses"][0]["partitions"]
        if found["error_code"]:
            raise MigrationError(
                f"fetching {topic}-{partition} at {position}: error {found['error_code']}"
            )
        records = memoryview(found["records"] or b"")
        try:
            batches = batch_headers(whole_batches(records))
        except RecordBatchError as exc:
            raise MigrationError(f"{topic}-{partition} at {position}: {exc}") from exc
        if not batches:
            if min(found["high_watermark"], found["last_stable_offset"]) >= end or (
                found["last_stable_offset"] < 0 and found["high_watermark"] >= end
            ):
                return  # a compacted tail: nothing is left below the end
            continue  # an open transaction holds the stable offset back: ask again
        aborted = sorted(
            (item["first_offset"], item["producer_id"])
            for item in found.get("aborted_transactions") or []
        )
        chunks, position = chunks_of(batches, position, end, aborted, aborting)
        if chunks:
            yield chunks
