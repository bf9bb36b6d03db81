"""Stored entry formats: how a produced Kafka record batch becomes Pulsar messages, and how
stored messages become Kafka records again. One implementation per format, as KoP's
EntryFormatter has; the Produce handler, Fetch, ListOffsets, migrate and parity all share
this one definition (docs/pulsar-mapping.md, "Entry formats").

- `pulsar` (the default): one Pulsar message per record, KoP's mapping (record_mapping.py);
  Pulsar clients read these topics natively.
- `kafka`: one Pulsar message per record batch, stored as the producer sent it (still
  compressed), marked with `__kafka.batch` and the record count that the partition log
  numbers it by. Produce and Fetch then cost per batch, not per record; Pulsar consumers
  see raw batches, so the format is chosen per topic (`pulsar.entry.format`).
A log may hold both (a topic switched format, or a Pulsar producer wrote to it): every
stored message says which format wrote it, so reading never needs the topic's setting.

Fetch compresses the batches it builds from `pulsar`-format messages as the topic's
`compression.type` says, as a Kafka broker serves what it stored: a codec by name, or
`producer` (the default), the codec the record was produced with, which the `pulsar`
format remembers per record in `__kafka.codec` (absent: uncompressed, as a Pulsar
producer's messages are).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol, TypedDict

from pulsar_gateway.gateway.messages import (
    RECORDS,
    LogEntry,
    OutMessage,
    StoredMessage,
    ends_no_batch,
)
from pulsar_gateway.kafka_codec import compression as codecs
from pulsar_gateway.kafka_codec.control_batch import TXN, parse_txn_value
from pulsar_gateway.kafka_codec.protocol.wire_types import BlobParts
from pulsar_gateway.kafka_codec.record_batch import (
    ATTR_CODEC_MASK,
    HEADER_SIZE,
    DecodedBatch,
    decode_batches,
    encode_batch,
    rewrite_base_offset,
    stamp_log_append_time,
    truncate_batch,
)
from pulsar_gateway.kafka_codec.record_mapping import (
    CODEC,
    Header,
    headers_of,
    key_of,
    timestamp_of,
    to_message,
)

BATCH = "__kafka.batch"
# `BATCH`'s value on a batch a read from storage built from a whole Pulsar entry of
# `pulsar`-format records (storage/kafka/read_batches.py; stored and kept batches say "2"):
# served as it is unless the topic wants a codec or LogAppendTime, then built again
READ_FROM_ENTRY = "entry"
# compression.type (a topic config) -> the codec Fetch serves; None: the producer's
FETCH_CODECS: dict[str, int | None] = {
    "producer": None,
    "uncompressed": codecs.NONE,
    "gzip": codecs.GZIP,
    "snappy": codecs.SNAPPY,
    "lz4": codecs.LZ4,
    "zstd": codecs.ZSTD,
}
FORMAT_CONFIG = "pulsar.entry.format"
# No byte limit: what encode_entries assumes when Fetch gives none.
UNLIMITED = 1 << 62


class StoredRecord(NamedTuple):
    """One Kafka record read back from the log."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp: int


class EntryFormat(Protocol):
    name: str

    def encode(self, batch: DecodedBatch, append_time: int | None = None) -> Sequence[OutMessage]:
        """The messages that store one produced batch, in order; with ``append_time`` every
        record takes that timestamp (a `message.timestamp.type=LogAppendTime` topic)."""
        ...

    def wrote(self, message: StoredMessage) -> bool:
        """Whether this format wrote `message` (messages of plain Pulsar producers read as
        the `pulsar` format)."""
        ...

    def records(self, entry: LogEntry) -> Iterator[StoredRecord]:
        """Every record an entry holds, with its offset."""
        ...


class PulsarEntryFormat:
    name = "pulsar"

    def encode(self, batch: DecodedBatch, append_time: int | None = None) -> Sequence[OutMessage]:
        if batch.messages is not None:  # decoded in the same pass (record_entry.py)
            if append_time is None:
                return batch.messages  # prebuilt, made only if something looks
            made = batch.messages.made()  # the codec marked already
            for message in made:
                message.event_time = append_time if append_time > 0 else 0
            return made
        out: list[OutMessage] = []
        append = out.append
        for _, timestamp, key, value, headers in batch.records:
            if append_time is not None:
                timestamp = append_time
            if not headers:
                # the common records, without to_message's call: nothing to map but the
                # time and a UTF-8 key (an empty key is none; any other goes the long way)
                if key is None:
                    append(OutMessage(value, None, None, timestamp if timestamp > 0 else 0))
                    continue
                if key:
                    try:
                        text = key.decode("utf-8")
                    except UnicodeDecodeError:
                        pass
                    else:
                        append(OutMessage(value, text, None, timestamp if timestamp > 0 else 0))
                        continue
            append(to_message(key, value, timestamp, headers))
        codec = batch.attributes & ATTR_CODEC_MASK
        if codec:
            for message in out:
                message.properties = {**(message.properties or {}), CODEC: str(codec)}
        return out

    def wrote(self, message: StoredMessage) -> bool:
        return BATCH not in message.properties

    def records(self, entry: LogEntry) -> Iterator[StoredRecord]:
        message = entry.message
        yield StoredRecord(
            entry.offset,
            key_of(message),
            message.payload,
            headers_of(message),
            timestamp_of(message),
        )


class KafkaEntryFormat:
    name = "kafka"

    def encode(self, batch: DecodedBatch, append_time: int | None = None) -> Sequence[OutMessage]:
        """The batch as one Pulsar message, bytes as sent (re-stamped as a Kafka broker
        would for LogAppendTime)."""
        if append_time is not None:
            raw, stamp = stamp_log_append_time(batch.raw, append_time), append_time
        else:
            raw, stamp = bytes(batch.raw), batch.max_timestamp
        return [
            OutMessage(
                raw,
                None,
                {BATCH: "2", RECORDS: str(batch.record_count)},
                stamp if stamp > 0 else 0,
            )
        ]

    def wrote(self, message: StoredMessage) -> bool:
        return BATCH in message.properties

    def records(self, entry: LogEntry) -> Iterator[StoredRecord]:
        for batch in decode_batches(entry.message.payload or b"", verify_crc=False):
            if batch.is_control:
                continue  # a transaction marker (control_batch.py): no record of the topic's
            for record in batch.records:
                stamp = batch.max_timestamp if batch.timestamp_type else record.timestamp
                yield StoredRecord(
                    entry.offset + record.offset_delta,
                    record.key,
                    record.value,
                    record.headers,
                    stamp,
                )


PULSAR = PulsarEntryFormat()
KAFKA = KafkaEntryFormat()
ENTRY_FORMATS: dict[str, EntryFormat] = {PULSAR.name: PULSAR, KAFKA.name: KAFKA}


def topic_format(configs: Mapping[str, str], default: str) -> EntryFormat:
    """A topic's entry format: its own `pulsar.entry.format`, else the gateway's
    `kafka.entry_format` (`default`). Fixed when the topic is created."""
    return ENTRY_FORMATS[configs.get(FORMAT_CONFIG) or default]


def format_of(message: StoredMessage) -> EntryFormat:
    """The format that wrote a stored message."""
    return KAFKA if KAFKA.wrote(message) else PULSAR


def records_of(entry: LogEntry) -> Iterator[StoredRecord]:
    """Every record of a stored entry, whichever format wrote it."""
    return format_of(entry.message).records(entry)


def encode_entries(
    entries: Sequence[LogEntry],
    max_bytes: int = UNLIMITED,
    min_one: bool = True,
    log_append_time: bool = False,
    codec: int | None = codecs.NONE,
) -> tuple[bytearray, int]:
    """`encode_entry_parts`, joined into one buffer."""
    records, count = encode_entry_parts(entries, max_bytes, min_one, log_append_time, codec)
    if isinstance(records, bytearray):
        return records, count
    out = bytearray()
    for part in records.parts:
        out += part
    return out, count


def encode_entry_parts(
    entries: Sequence[LogEntry],
    max_bytes: int = UNLIMITED,
    min_one: bool = True,
    log_append_time: bool = False,
    codec: int | None = codecs.NONE,
) -> tuple[bytearray | BlobParts, int]:
    """Fetch's records bytes for these entries, and how many records they hold.

    Runs of one-record messages become one batch each (a transactional producer's records a
    transactional batch of their own, with its producer id and epoch); stored batches are
    served as they are, re-based at their offset (the base offset precedes the CRC).

    The bytes stay within ``max_bytes`` as a Kafka broker's do: whole batches (for a run of
    one-record messages, whole records) while they fit, then nothing more; with ``min_one``
    (the first partition of a response with data, KIP-74) the first batch or record comes
    back even when it alone is larger, so a consumer always makes progress.
    ``log_append_time`` (a LogAppendTime topic) marks the batches so, one per append time.
    ``codec`` compresses the batches built from one-record messages (None: each record's
    producer codec, one batch per run of equal codecs); stored batches keep their own.

    A stored batch is not copied: it goes in as it is held, behind a re-based copy of its
    first 16 bytes (`BlobParts`, which the response encoder writes piece by piece); the
    batches built from runs are bytearrays between. With no stored batch, one bytearray.
    """
    parts: list[bytes | bytearray | memoryview] = []
    done = 0  # the bytes in `parts`
    out = bytearray()  # the batches built since the last stored batch
    count = 0
    run: list[LogEntry] = []
    for entry in entries:
        message = entry.message
        stored_batch = KAFKA.wrote(message)
        if run and (
            stored_batch
            or (log_append_time and timestamp_of(run[0].message) != timestamp_of(message))
            or (codec is None and _codec_of(run[0]) != _codec_of(entry))
            or run[0].message.properties.get(TXN) != message.properties.get(TXN)
        ):
            kept, whole = _encode_run(
                run, out, max_bytes - done, min_one and not done, log_append_time, codec
            )
            count += kept
            if not whole:
                return _joined(parts, done, out), count
            run = []
        if not stored_batch:
            run.append(entry)
            continue
        payload = message.payload or b""
        if message.properties[BATCH] == READ_FROM_ENTRY and (
            log_append_time or codec not in (None, codecs.NONE)
        ):
            payload = _rebuilt(payload, entry.offset, log_append_time, codec or codecs.NONE)
        if done + len(out) + len(payload) > max_bytes and (done or out or not min_one):
            return _joined(parts, done, out), count
        if out:
            parts.append(out)
            done += len(out)
            out = bytearray()
        view = memoryview(payload)
        parts.append(rewrite_base_offset(view[:HEADER_SIZE], entry.offset))
        parts.append(view[HEADER_SIZE:])
        done += len(view)
        count += int(message.properties[RECORDS])
    if run:
        count += _encode_run(
            run, out, max_bytes - done, min_one and not done, log_append_time, codec
        )[0]
    return _joined(parts, done, out), count


def _joined(
    parts: list[bytes | bytearray | memoryview], done: int, out: bytearray
) -> bytearray | BlobParts:
    """`encode_entry_parts`'s answer: `out` alone when nothing went before it."""
    if not parts:
        return out
    if out:
        parts.append(out)
    return BlobParts(parts, done + len(out))


def _rebuilt(batch: bytes, base: int, log_append_time: bool, codec: int) -> bytes:
    """A batch read from a Pulsar entry (uncompressed, CreateTime) as the topic serves its
    `pulsar`-format records: in `codec`, marked LogAppendTime when the topic is, with its
    idempotent producer's id, epoch and base sequence (read_batches.py) and its
    transaction's mark kept."""
    [decoded] = decode_batches(batch, verify_crc=False)
    records = [
        (record.offset_delta, record.timestamp, record.key, record.value, record.headers)
        for record in decoded.records
    ]
    return bytes(
        encode_batch(
            base,
            records,
            codec,
            timestamp_type=1 if log_append_time else 0,
            producer_id=decoded.producer_id,
            producer_epoch=decoded.producer_epoch,
            base_sequence=decoded.base_sequence,
            is_transactional=decoded.is_transactional,
        )
    )


_STORED_CODECS = {str(c): c for c in (codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD)}


def _codec_of(entry: LogEntry) -> int:
    """The producer's codec of a `pulsar`-format record (a property any Pulsar producer
    could set: anything but a known codec reads as uncompressed)."""
    return _STORED_CODECS.get(entry.message.properties.get(CODEC, ""), codecs.NONE)


def _encode_run(
    run: Sequence[LogEntry],
    out: bytearray,
    max_bytes: int,
    min_one: bool,
    log_append_time: bool,
    codec: int | None = codecs.NONE,
) -> tuple[int, bool]:
    """One batch of one-record messages appended to ``out``, cut to ``max_bytes``: (records
    kept, whether all of them were). A compressed batch keeps the records whose
    uncompressed encoding fits (compression shrinks it, bar a few bytes of framing)."""
    codec = _codec_of(run[0]) if codec is None else codec
    if codec != codecs.NONE:
        return _encode_compressed_run(run, out, max_bytes, min_one, log_append_time, codec)
    start = len(out)
    records = _run_records(run)  # once: a cut batch is encoded again from the same records
    encode_batch(
        run[0].offset,
        records,
        out=out,
        timestamp_type=1 if log_append_time else 0,
        **_producer_of(run),
    )
    if len(out) <= max_bytes:
        return len(run), True
    fits = truncate_batch(out, start, max_bytes)
    whole = _whole_prefix(run, fits) or (_first_whole(run) if min_one and start == 0 else 0)
    if whole != fits:  # the cut fell inside a batch the gateway wrote: cut at its start
        del out[start:]
    if whole != fits and whole:
        encode_batch(
            run[0].offset,
            records[:whole],
            out=out,
            timestamp_type=1 if log_append_time else 0,
            **_producer_of(run),
        )
    return whole, False


def _whole_prefix(run: Sequence[LogEntry], count: int) -> int:
    """The most of the first `count` entries of `run` that end no batch in its middle: a
    fetch hands out a Kafka batch the gateway stored as one message per record whole or not
    at all (docs/offsets.md, "A batch is numbered whole")."""
    while count and ends_no_batch(run[count - 1].message):
        count -= 1
    return count


def _first_whole(run: Sequence[LogEntry]) -> int:
    """How many entries the first batch of `run` has (KIP-74: a fetch's first batch comes
    whole even when it alone is over the limit)."""
    for count, entry in enumerate(run, 1):
        if not ends_no_batch(entry.message):
            return count
    return len(run)


class _ProducerFields(TypedDict, total=False):
    """`encode_batch`'s producer arguments, as `_producer_of` finds them."""

    producer_id: int
    producer_epoch: int
    is_transactional: bool


def _producer_of(run: Sequence[LogEntry]) -> _ProducerFields:
    """The batch fields of a run's producer: a transactional producer's id and epoch (its
    records carry them, control_batch.py), none for any other."""
    producer = run[0].message.properties.get(TXN)
    parsed = None if producer is None else parse_txn_value(producer)
    if parsed is None:
        return {}
    return {"producer_id": parsed[0], "producer_epoch": parsed[1], "is_transactional": True}


def _run_records(
    run: Sequence[LogEntry],
) -> list[tuple[int, int, bytes | None, bytes | None, list[Header]]]:
    base = run[0].offset
    return [
        (
            e.offset - base,
            timestamp_of(e.message),
            key_of(e.message),
            e.message.payload,
            headers_of(e.message),
        )
        for e in run
    ]


def _encode_compressed_run(
    run: Sequence[LogEntry],
    out: bytearray,
    max_bytes: int,
    min_one: bool,
    log_append_time: bool,
    codec: int,
) -> tuple[int, bool]:
    records = _run_records(run)
    timestamp_type = 1 if log_append_time else 0
    kept = len(run)
    if len(out) + _plain_size_bound(records) > max_bytes:
        # maybe too large: encode it plain to see which records fit (profiled: the plain
        # pass costs as much as compressing, so it is skipped when the bound says it fits)
        plain = encode_batch(run[0].offset, records, timestamp_type=timestamp_type)
        if len(out) + len(plain) > max_bytes:
            kept = truncate_batch(plain, 0, max_bytes - len(out))
            kept = _whole_prefix(run, kept) or (_first_whole(run) if min_one and not out else 0)
            if not kept:
                return 0, False
    encode_batch(
        run[0].offset,
        records[:kept],
        codec,
        out=out,
        timestamp_type=timestamp_type,
        **_producer_of(run),
    )
    return kept, kept == len(run)


_BATCH_HEADER_BYTES = 61
_RECORD_FIXED_BOUND = 40  # varints of length, deltas, key/value lengths and attributes
_HEADER_FIXED_BOUND = 10  # a header's two length varints


def _plain_size_bound(
    records: Sequence[tuple[int, int, bytes | None, bytes | None, list[Header]]],
) -> int:
    """At least the size of these records' uncompressed batch."""
    size = _BATCH_HEADER_BYTES
    for _delta, _ts, key, value, headers in records:
        size += _RECORD_FIXED_BOUND + len(key or b"") + len(value or b"")
        for name, data in headers:
            size += _HEADER_FIXED_BOUND + len(name.encode()) + len(data or b"")
    return size
