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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

from pulsar_gateway.gateway.messages import RECORDS, LogEntry, OutMessage, StoredMessage
from pulsar_gateway.kafka_codec.record_batch import (
    DecodedBatch,
    decode_batches,
    encode_batch,
    rewrite_base_offset,
)
from pulsar_gateway.kafka_codec.record_mapping import (
    Header,
    headers_of,
    key_of,
    timestamp_of,
    to_message,
)

BATCH = "__kafka.batch"
FORMAT_CONFIG = "pulsar.entry.format"


class StoredRecord(NamedTuple):
    """One Kafka record read back from the log."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp: int


class EntryFormat(Protocol):
    name: str

    def encode(self, batch: DecodedBatch) -> list[OutMessage]:
        """The messages that store one produced batch, in order."""
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

    def encode(self, batch: DecodedBatch) -> list[OutMessage]:
        return [to_message(r.key, r.value, r.timestamp, r.headers) for r in batch.records]

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

    def encode(self, batch: DecodedBatch) -> list[OutMessage]:
        """The batch as one Pulsar message, bytes as sent."""
        return [
            OutMessage(
                bytes(batch.raw),
                None,
                {BATCH: "2", RECORDS: str(batch.record_count)},
                batch.max_timestamp if batch.max_timestamp > 0 else 0,
            )
        ]

    def wrote(self, message: StoredMessage) -> bool:
        return BATCH in message.properties

    def records(self, entry: LogEntry) -> Iterator[StoredRecord]:
        for batch in decode_batches(entry.message.payload or b"", verify_crc=False):
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


def format_of(message: StoredMessage) -> EntryFormat:
    """The format that wrote a stored message."""
    return KAFKA if KAFKA.wrote(message) else PULSAR


def records_of(entry: LogEntry) -> Iterator[StoredRecord]:
    """Every record of a stored entry, whichever format wrote it."""
    return format_of(entry.message).records(entry)


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
        if KAFKA.wrote(entry.message):
            flush()
            rewrite_base_offset(entry.message.payload or b"", entry.offset, out=out)
            count += int(entry.message.properties[RECORDS])
        else:
            run.append(entry)
            count += 1
    flush()
    return out, count
