"""Produce: record batches in, stored in the topic's entry format, real base offsets out.

All partitions of a request are appended concurrently; the response waits until the
partition log has numbered what was appended, so the base offset returned is the one a
later Fetch shows (docs/offsets.md, invariant 3). Idempotent batches go through the
context's producer sequences, so a retried batch is stored once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NamedTuple

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import PartitionLog, StorageError, TopicRecord
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.kafka_codec.entry_format import ENTRY_FORMATS, FORMAT_CONFIG, EntryFormat
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_batch import (
    DecodedBatch,
    RecordBatchError,
    check_produce_batches,
    decode_batches,
)

log = logging.getLogger("gateway.kafka.produce")


class PartitionResult(NamedTuple):
    """One partition's answer."""

    error: ErrorCode
    base_offset: int = -1
    log_start: int = -1
    message: str | None = None


class Stored(NamedTuple):
    """What storing a partition's messages gave: a base offset, or the error instead."""

    error: ErrorCode
    base_offset: int = -1


async def handle(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any] | None:
    acks = request["acks"]
    jobs = []
    layout: list[tuple[str, list[int]]] = []
    for topic in request["topic_data"]:
        name = topic["name"]
        indexes = []
        for partition in topic["partition_data"]:
            indexes.append(partition["index"])
            if acks not in (0, 1, -1):
                jobs.append(_fail(ErrorCode.INVALID_REQUIRED_ACKS))
            elif request.get("transactional_id") is not None:
                jobs.append(_fail(ErrorCode.INVALID_REQUEST))
            else:
                jobs.append(
                    _append(
                        context, name, partition["index"], partition["records"], header.api_version
                    )
                )
        layout.append((name, indexes))
    results: list[PartitionResult] = await asyncio.gather(*jobs)
    if acks == 0:
        return None
    answers = iter(results)
    responses = []
    for name, indexes in layout:
        partitions = []
        for index in indexes:
            result = next(answers)
            partitions.append(
                {
                    "index": index,
                    "error_code": result.error,
                    "base_offset": result.base_offset,
                    "log_append_time_ms": -1,
                    "log_start_offset": result.log_start,
                    "record_errors": [],
                    "error_message": result.message,
                }
            )
        responses.append({"name": name, "partition_responses": partitions})
    return {"responses": responses, "throttle_time_ms": 0}


def entry_format(context: KafkaContext, record: TopicRecord) -> EntryFormat:
    """The topic's own `pulsar.entry.format`, else the gateway's default."""
    return ENTRY_FORMATS[record.configs.get(FORMAT_CONFIG) or context.settings.entry_format]


async def _fail(code: ErrorCode) -> PartitionResult:
    return PartitionResult(code)


async def _append(
    context: KafkaContext, name: str, index: int, records: Any, version: int
) -> PartitionResult:
    record, code = await find_topic(context, name, auto_create=True)
    if record is None:
        return PartitionResult(code)
    if not 0 <= index < record.partitions:
        return PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if records is None or len(records) == 0:
        return PartitionResult(ErrorCode.CORRUPT_MESSAGE, message="no records")
    try:
        batches = decode_batches(memoryview(records))
        check_produce_batches(batches, version)
    except RecordBatchError as exc:
        log.warning("rejected produce to %s-%d: %s", name, index, exc)
        return PartitionResult(ErrorCode(exc.code), message=str(exc))
    form = entry_format(context, record)
    messages = [message for batch in batches for message in form.encode(batch)]
    count = sum(batch.record_count for batch in batches)
    try:
        partition = await context.topics.partition_of(record, index)
    except StorageError as exc:
        return PartitionResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
    batch = batches[0]
    if batch.producer_id < 0:
        stored = await _store(partition, messages, name, index)
    else:
        stored = await _store_once(context, partition, messages, count, name, index, batch)
    if stored.error:
        return PartitionResult(stored.error)
    metrics.RECORDS_IN.labels(name).inc(count)
    metrics.BYTES_IN.labels(name).inc(sum(len(m.payload or b"") for m in messages))
    return PartitionResult(ErrorCode.NONE, stored.base_offset, partition.log_start)


async def _store(partition: PartitionLog, messages: list[Any], name: str, index: int) -> Stored:
    try:
        return Stored(ErrorCode.NONE, await partition.append(messages))
    except StorageError as exc:
        log.error("produce to %s-%d failed: %s", name, index, exc)
        return Stored(ErrorCode.KAFKA_STORAGE_ERROR)


async def _store_once(
    context: KafkaContext,
    partition: PartitionLog,
    messages: list[Any],
    records: int,
    name: str,
    index: int,
    batch: DecodedBatch,
) -> Stored:
    """Sequence numbers count records: in the `kafka` format a message holds many."""
    sequences = context.sequences
    check = sequences.check(
        batch.producer_id, batch.producer_epoch, partition.topic, batch.base_sequence, records
    )
    if check.code:
        return Stored(check.code)
    if check.duplicate is not None:
        try:
            return Stored(ErrorCode.NONE, await asyncio.shield(check.duplicate))
        except asyncio.CancelledError:
            return Stored(ErrorCode.KAFKA_STORAGE_ERROR)
    stored = await _store(partition, messages, name, index)
    sequences.settle(
        batch.producer_id,
        partition.topic,
        check.accepted,
        None if stored.error else stored.base_offset,
    )
    return stored
