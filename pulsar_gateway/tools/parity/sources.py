"""Spark Python data sources for parity, one Spark partition per Kafka partition.

- `parity_kafka`: any Kafka-protocol cluster (the source, or the gateway itself), an
  offset range per partition, read with confluent-kafka;
- `parity_pulsar`: the gateway's Pulsar topics, numbered exactly as the gateway numbers
  them (its resend filter, from its offset-index checkpoints; stored Kafka batches count
  their records), through the in-order reader with the defences of docs/backend.md
  ("Readers replay messages"). Read through the gateway's own Pulsar wire client by
  default (`pulsar_client` "native"): its flow control asks for entries by the bytes they
  hold, so a reader's memory stays flat whatever the topic's size, where pulsar-client's
  reader, counting a permit per entry on pulsar-lite, ran ahead by whole batched entries
  (docs/tools.md, "How parity compares"); "pulsar-client" reads through Pulsar's client.

Rows carry digests, never payloads (fingerprint.py), and leave as Arrow batches. The
readers under them (`kafka_records`, `pulsar_records`) yield the records themselves, in
offset order, to the in-order walk (in_order.py), which compares them as they stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator, Iterator, Mapping
from typing import Any, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pulsar_gateway.tools.parity.chunks import (
    Chunk,
    Row,
    kafka_chunks,
    no_collector,
    offsets_of,
    one_by_one,
)
from pulsar_gateway.tools.parity.fingerprint import fingerprint
from pulsar_gateway.tools.parity.records import Record

SCHEMA = (
    "topic string, partition int, offset long, key_hash long, value_hash long, "
    "headers_hash long, content long, ts long"
)
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key_hash", pa.int64()),
        ("value_hash", pa.int64()),
        ("headers_hash", pa.int64()),
        ("content", pa.int64()),
        ("ts", pa.int64()),
    ]
)
BATCH_ROWS = 20000
# the wire reader asks pulsar-lite for as many entries at once as this many bytes hold
# (wire.Consumer's `window_bytes`): the Kafka history reader's window, for the same reason
READ_WINDOW_BYTES = 256 * 1024
NATIVE = "native"


class _Rows:
    """Column buffers that turn into Arrow record batches."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offsets: list[int] = []
        self.keys: list[int | None] = []
        self.values: list[int] = []
        self.headers: list[int] = []
        self.contents: list[int] = []
        self.stamps: list[int] = []

    def add(
        self, offset: int, key: bytes | None, value: bytes | None, headers: Any, ts: int
    ) -> None:
        key_hash, value_hash, headers_hash, content = fingerprint(key, value, headers)
        self.offsets.append(offset)
        self.keys.append(key_hash)
        self.values.append(value_hash)
        self.headers.append(headers_hash)
        self.contents.append(content)
        self.stamps.append(ts)

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self) -> pa.RecordBatch:
        count = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * count, pa.string()),
                pa.array([self.partition] * count, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.keys, pa.int64()),
                pa.array(self.values, pa.int64()),
                pa.array(self.headers, pa.int64()),
                pa.array(self.contents, pa.int64()),
                pa.array(self.stamps, pa.int64()),
            ],
            schema=ARROW_SCHEMA,
        )
        self.__init__(self.topic, self.partition)  # type: ignore[misc]
        return batch


class _Range(InputPartition):
    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__(spec)
        self.spec = spec


class _RangesReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return [_Range(spec) for spec in json.loads(self.options["ranges"])]

    @staticmethod
    def spec(partition: InputPartition) -> dict[str, Any] | None:
        """The range a partition reads; None for the one partition Spark makes up when
        there are no ranges at all (a side that lacks every partition compared)."""
        return getattr(partition, "spec", None)


# ---- Kafka ----------------------------------------------------------------------------


class KafkaRangeSource(DataSource):
    """options: bootstrap; ranges: JSON [{topic, partition, start, end}]."""

    @classmethod
    def name(cls) -> str:
        return "parity_kafka"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaRangeReader(self.options)


class KafkaRangeReader(_RangesReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        spec = self.spec(partition)
        if spec is None:
            return
        yield from read_kafka_range(
            self.options["bootstrap"], spec["topic"], spec["partition"], spec["start"], spec["end"]
        )


def read_kafka_range(
    bootstrap: str, topic: str, partition: int, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    yield from _batches(topic, partition, kafka_records(bootstrap, topic, partition, start, end))


def kafka_records(
    bootstrap: str, topic: str, partition: int, start: int, end: int
) -> Iterator[Record]:
    """The records at offsets [start, end) of a Kafka-protocol cluster's partition, in
    offset order, as (offset, key, value, headers, timestamp)."""
    return one_by_one(kafka_chunks(bootstrap, topic, partition, start, end))


# ---- Pulsar ---------------------------------------------------------------------------


class PulsarPartitionSource(DataSource):
    """options: service_url, pulsar_client ("native" or "pulsar-client"); ranges: JSON
    [{topic, partition, pulsar_topic, start, end, checkpoint_offset, checkpoint_id,
    resends}] (see job.py for where they come from)."""

    @classmethod
    def name(cls) -> str:
        return "parity_pulsar"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return PulsarPartitionReader(self.options)


class PulsarPartitionReader(_RangesReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        spec = self.spec(partition)
        if spec is not None:
            client = self.options.get("pulsar_client", NATIVE)
            yield from read_pulsar_range(self.options["service_url"], spec, client)


def read_pulsar_range(
    service_url: str, spec: dict[str, Any], client: str = NATIVE
) -> Iterator[pa.RecordBatch]:
    records = pulsar_records(service_url, spec, client)
    yield from _batches(spec["topic"], int(spec["partition"]), records)


def pulsar_records(
    service_url: str, spec: dict[str, Any], client: str = NATIVE
) -> Iterator[Record]:
    """`pulsar_chunks`' records one by one."""
    return one_by_one(pulsar_chunks(service_url, spec, client))


def pulsar_chunks(
    service_url: str, spec: dict[str, Any], client: str = NATIVE
) -> Generator[Chunk, None, None]:
    """Number the partition's messages from a checkpoint as the gateway's tailer does
    and yield the records at offsets [start, end), in offset order, a batched entry's
    records as one chunk (chunks.py). `client`: "native" (the wire client, memory bounded
    by its window) or "pulsar-client"."""
    from pulsar_gateway.gateway.backend.native_writer import NATIVE as NATIVE_CLIENT
    from pulsar_gateway.gateway.backend.native_writer import PULSAR_CLIENT
    from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
    from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
    from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
    from pulsar_gateway.gateway.messages import LogEntry, records_in
    from pulsar_gateway.kafka_codec.entry_format import records_of
    from pulsar_gateway.storage.kafka.entry_records import EntryRecords

    start, end = int(spec["start"]), int(spec["end"])
    if start >= end:
        return
    loop = asyncio.new_event_loop()
    native = client == NATIVE
    backend = PulsarBackend(service_url, client=NATIVE_CLIENT if native else PULSAR_CLIENT)
    checkpoint = spec.get("checkpoint_id")
    first = tuple(checkpoint) if checkpoint else EARLIEST
    offset = int(spec.get("checkpoint_offset") or 0)
    resends = ResendFilter(spec.get("resends") or {})
    # the wire reader hands a plain batched entry over as one item and its records made in
    # one pass (storage/kafka/entry_records.py); pulsar-client's reader, message by message
    whole = EntryRecords() if native else None

    async def open_stream() -> Any:
        await backend.start()
        topic = spec["pulsar_topic"]
        if native:
            return await backend.open_log_reader(
                topic,
                first,  # type: ignore[arg-type]
                window_bytes=READ_WINDOW_BYTES,
            )
        return await backend.open_reader(topic, first)  # type: ignore[arg-type]

    try:
        stream = loop.run_until_complete(open_stream())
        while offset < end:
            batch = loop.run_until_complete(
                stream.read_batch(5000, timeout=10, expect_more=True, whole=whole)
            )
            if not batch:
                break  # Pulsar holds fewer messages than the gateway numbered: they show as missing
            for message in batch:
                made = None if whole is None else whole.take(message)
                if resends.original_offset(message, offset) is not None:
                    continue
                count = records_in(message)
                if offset + count <= start:
                    pass
                elif made is not None:
                    # the entry's records are at offset, offset + 1, ...: keep [start, end)
                    low, high = max(start, offset), min(end, offset + len(made))
                    if low < high:
                        yield range(low, high), cast(list[Row], made[low - offset : high - offset])
                else:
                    offsets: list[int] = []
                    rows: list[Row] = []
                    for record in records_of(LogEntry(offset, message)):
                        if start <= record[0] < end:
                            offsets.append(record[0])
                            rows.append((record[1], record[2], list(record[3]), record[4]))
                    if rows:
                        yield offsets_of(offsets), rows
                offset += count
                if offset >= end:
                    break
        loop.run_until_complete(stream.close())
    finally:
        loop.run_until_complete(backend.close())
        loop.close()


def _batches(topic: str, partition: int, records: Iterator[Record]) -> Iterator[pa.RecordBatch]:
    """Records as digest rows, BATCH_ROWS to an Arrow batch (the collector off meanwhile,
    as for the walk: chunks.no_collector)."""
    rows = _Rows(topic, partition)
    with no_collector():
        for offset, key, value, headers, ts in records:
            rows.add(offset, key, value, headers, ts)
            if len(rows) >= BATCH_ROWS:
                yield rows.take()
        if len(rows):
            yield rows.take()
