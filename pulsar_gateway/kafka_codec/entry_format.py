"""Partition log entries <-> Kafka record batches, for both entry formats.

- `pulsar` format: one Pulsar message per record (KoP's mapping, record_mapping.py);
  Pulsar clients read these topics natively.
- `kafka` format: one Pulsar message per record batch, stored as the producer sent it
  (still compressed), marked with `__kafka.batch` and the record count the partition
  log numbers it by. Produce and Fetch then cost per batch, not per record; Pulsar
  consumers see raw batches, so the format is chosen per topic.
A log may hold both (a topic switched format, or a Pulsar producer wrote to it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pulsar_gateway.gateway.messages import RECORDS, LogEntry, OutMessage, StoredMessage
from pulsar_gateway.kafka_codec.record_batch import (
    DecodedBatch,
    decode_batches,
    encode_batch,
    rewrite_base_offset,
)
from pulsar_gateway.kafka_codec.record_mapping import headers_of, key_of, timestamp_of

BATCH = "__kafka.batch"
FORMAT_CONFIG = "pulsar.entry.format"
FORMATS = ("pulsar", "kafka")


def is_batch(message: StoredMessage) -> bool:
    return BATCH in message.properties


def batch_message(batch: DecodedBatch) -> OutMessage:
    """A produced batch as one Pulsar message, bytes as sent."""
    return OutMessage(
        bytes(batch.raw),
        None,
        {BATCH: "2", RECORDS: str(batch.record_count)},
        batch.max_timestamp if batch.max_timestamp > 0 else 0,
    )


def encode_entries(entries: Sequence[LogEntry]) -> tuple[bytearray, int]:
    """Fetch's records bytes for these entries, and how many records they hold.

    Runs of one-record messages become one batch each; stored batches are served
    as they are, re-based at their offset (the base offset precedes the CRC)."""
    out = bytearray()
    count = 0
    run: list[LogEntry] = []

    def flush() -> None:
        if run:
            base = run[0].offset
            records = [
                (
                    e.offset - base,
                    timestamp_of(e.message),
                    key_of(e.message),
                    e.message.payload,
                    headers_of(e.message),
                )
                for e in run
            ]
            encode_batch(base, records, out=out)
            run.clear()

    for entry in entries:
        if is_batch(entry.message):
            flush()
            rewrite_base_offset(entry.message.payload or b"", entry.offset, out=out)
            count += int(entry.message.properties[RECORDS])
        else:
            run.append(entry)
            count += 1
    flush()
    return out, count


def record_times(entry: LogEntry) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of an entry (ListOffsets by time)."""
    for offset, _key, _value, _headers, stamp in records_of(entry):
        yield offset, stamp


def records_of(
    entry: LogEntry,
) -> Iterator[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]:
    """(offset, key, value, headers, timestamp) of each record of an entry."""
    message = entry.message
    if not is_batch(message):
        yield (
            entry.offset,
            key_of(message),
            message.payload,
            headers_of(message),
            timestamp_of(message),
        )
        return
    for batch in decode_batches(message.payload or b"", verify_crc=False):
        for record in batch.records:
            stamp = batch.max_timestamp if batch.timestamp_type else record.timestamp
            yield (
                entry.offset + record.offset_delta,
                record.key,
                record.value,
                record.headers,
                stamp,
            )
