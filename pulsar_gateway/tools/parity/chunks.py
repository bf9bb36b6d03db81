"""Records in chunks, for the in-order walk to compare many at once (in_order.py).

Compared one by one, a record cost the walk a tuple, a generator step and a comparison in
Python on each side; compared as a chunk, two lists of rows are equal or not in one
C-level `==` (docs/tools.md, "How parity compares"). A chunk is the offsets of its
records, as a `range` when they follow each other without a gap (which makes checking
where they landed O(1)), else as a list, and their rows, (key, value, headers,
timestamp), in the same order.

Kept apart from `sources.py` (which needs pyspark) so that the walk's readers can be
tested and timed without Spark.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from pulsar_gateway.tools.parity.records import Record, plain_headers

if TYPE_CHECKING:
    from confluent_kafka import Message

# (key, value, headers, timestamp): a record without its offset
Row = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]
Offsets = range | list[int]
Chunk = tuple[Offsets, list[Row]]

STALL_SECONDS = 60.0
CONSUME_BATCH = 10000
_second = itemgetter(1)


class ReadStalled(Exception):
    pass


def offsets_of(offsets: list[int]) -> Offsets:
    """A range when the offsets follow each other with no gap (the common case), else the
    list as it is."""
    if offsets and offsets[-1] - offsets[0] == len(offsets) - 1:
        contiguous = range(offsets[0], offsets[-1] + 1)
        if offsets == list(contiguous):
            return contiguous
    return offsets


def chunks_of(records: Iterable[Record], size: int) -> Iterator[Chunk]:
    """Records, `size` to a chunk."""
    offsets: list[int] = []
    rows: list[Row] = []
    for offset, key, value, headers, ts in records:
        offsets.append(offset)
        rows.append((key, value, headers, ts))
        if len(rows) >= size:
            yield offsets_of(offsets), rows
            offsets, rows = [], []
    if rows:
        yield offsets_of(offsets), rows


def one_by_one(chunks: Iterable[Chunk]) -> Iterator[Record]:
    """The chunks' records one by one, headers as plain (name, bytes) pairs (fingerprint.py
    digests them)."""
    for offsets, rows in chunks:
        for offset, (key, value, headers, ts) in zip(offsets, rows, strict=True):
            yield offset, key, value, plain_headers(headers), ts


def kafka_chunks(
    bootstrap: str, topic: str, partition: int, start: int, end: int
) -> Generator[Chunk, None, None]:
    """The records at offsets [start, end) of a Kafka-protocol cluster's partition, in
    offset order, one chunk per `consume` call. Each message's parts are taken with
    `map` over confluent-kafka's methods (no Python frame per message); headers are as
    it hands them over, except that a message without any has [] (the gateway's readers
    give []), so the walk compares them as they are and normalises only on a mismatch."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka import Message as KafkaMessage

    if start >= end:
        return
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pulsar-gateway-parity",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 16 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            # librdkafka fetches ahead until this much waits; a reader slower than the
            # cluster (every Python one) would hold it all, per partition read at once
            "queued.max.messages.kbytes": 32 * 1024,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        idle_since = time.monotonic()
        while position < end:
            # no more than are left: asked for more, the last call waited out its timeout
            # for messages past the end (a second per partition read)
            messages = consumer.consume(min(CONSUME_BATCH, end - position), timeout=1.0)
            if not messages:
                # control records (transaction markers) have no message: ask where we are
                at = consumer.position([TopicPartition(topic, partition)])[0].offset
                position = max(position, at)
                if time.monotonic() - idle_since > STALL_SECONDS and position < end:
                    raise ReadStalled(f"{topic}-{partition}: nothing past {position} < {end}")
                continue
            idle_since = time.monotonic()
            errors = list(map(KafkaMessage.error, messages))
            if any(errors):
                raise KafkaException(next(error for error in errors if error))
            found = list(map(KafkaMessage.offset, messages))
            if None in found:
                raise ValueError("a consumed message has no offset")
            offsets = cast(list[int], found)
            if max(offsets) >= end:
                kept = next(i for i, offset in enumerate(offsets) if offset >= end)
                offsets, messages = offsets[:kept], messages[:kept]
                position = end
            else:
                position = offsets[-1] + 1
            if offsets:
                yield offsets_of(offsets), _rows(messages)
    finally:
        consumer.close()


def _rows(messages: list[Message]) -> list[Row]:
    from confluent_kafka import Message as KafkaMessage

    headers: list[Any] = list(map(KafkaMessage.headers, messages))
    if None in headers:
        headers = [found if found is not None else [] for found in headers]
    stamps = map(_second, map(KafkaMessage.timestamp, messages))
    keys = map(KafkaMessage.key, messages)
    return list(zip(keys, map(KafkaMessage.value, messages), headers, stamps, strict=True))


@contextmanager
def no_collector() -> Iterator[None]:
    """The cyclic garbage collector off while parity reads: the readers' chunks hold tens
    of thousands of young tuples and lists, which made it run over and over and take a
    third of a reader's CPU (py-spy, docs/tools.md "How parity compares"). Nothing they
    make per record is part of a cycle, so reference counting frees it all the same."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
