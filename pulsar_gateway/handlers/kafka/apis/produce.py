"""Produce: record batches in, one Pulsar message per record (or per batch, for topics
in the `kafka` entry format: stored_records.py), real base offsets out.

All partitions of a request are appended concurrently; the response waits until
each partition's tailer has numbered the first appended message, so the base
offset returned is the one a later Fetch will show (DESIGN.md invariant 3).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.backend.pulsar_backend import BackendError
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.kafka_codec import errors
from pulsar_gateway.kafka_codec.entry_format import FORMAT_CONFIG, batch_message
from pulsar_gateway.kafka_codec.record_batch import (
    RecordBatchError,
    check_produce_batches,
    decode_batches,
)
from pulsar_gateway.kafka_codec.record_mapping import to_message

log = logging.getLogger("gateway.kafka.produce")

SEQUENCES = ProducerSequences()


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
                jobs.append(_fail(errors.INVALID_REQUIRED_ACKS))
            elif request.get("transactional_id") is not None:
                jobs.append(_fail(errors.INVALID_REQUEST))
            else:
                jobs.append(
                    _append(
                        context, name, partition["index"], partition["records"], header.api_version
                    )
                )
        layout.append((name, indexes))
    results = await asyncio.gather(*jobs)
    if acks == 0:
        return None
    responses = []
    position = 0
    for name, indexes in layout:
        partitions = []
        for index in indexes:
            code, base, log_start, message = results[position]
            position += 1
            partitions.append(
                {
                    "index": index,
                    "error_code": code,
                    "base_offset": base,
                    "log_append_time_ms": -1,
                    "log_start_offset": log_start,
                    "record_errors": [],
                    "error_message": message,
                }
            )
        responses.append({"name": name, "partition_responses": partitions})
    return {"responses": responses, "throttle_time_ms": 0}


def entry_format(context: KafkaContext, record: Any) -> str:
    """The topic's own `pulsar.entry.format`, else the gateway's default."""
    return str(record.configs.get(FORMAT_CONFIG) or context.settings.entry_format)


async def _fail(code: int) -> tuple[int, int, int, str | None]:
    return code, -1, -1, None


async def _append(
    context: KafkaContext, name: str, index: int, records: Any, version: int
) -> tuple[int, int, int, str | None]:
    record, code = await find_topic(context, name, auto_create=True)
    if record is None:
        return code, -1, -1, None
    if not 0 <= index < record.partitions:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None
    if records is None or len(records) == 0:
        return errors.CORRUPT_MESSAGE, -1, -1, "no records"
    try:
        batches = decode_batches(memoryview(records))
        check_produce_batches(batches, version)
    except RecordBatchError as exc:
        log.warning("rejected produce to %s-%d: %s", name, index, exc)
        return exc.code, -1, -1, str(exc)
    messages = []
    size = 0
    count = 0
    as_batches = entry_format(context, record) == "kafka"
    for batch in batches:
        count += batch.record_count
        if as_batches:
            messages.append(batch_message(batch))
            size += len(batch.raw)
            continue
        for item in batch.records:
            messages.append(to_message(item.key, item.value, item.timestamp, item.headers))
            size += len(item.value or b"")
    try:
        partition = await context.topics.partition_of(record, index)
    except BackendError as exc:
        return errors.KAFKA_STORAGE_ERROR, -1, -1, str(exc)
    batch = batches[0]
    if batch.producer_id < 0:
        base = await _store(partition, messages, name, index)
    else:
        base = await _store_once(partition, messages, count, name, index, batch)
    if base < 0:
        return -base, -1, -1, None
    metrics.RECORDS_IN.labels(name).inc(count)
    metrics.BYTES_IN.labels(name).inc(size)
    return errors.NONE, base, partition.log_start, None


async def _store(partition: Any, messages: list[Any], name: str, index: int) -> int:
    """The base offset, or minus an error code."""
    try:
        return await partition.append(messages)
    except BackendError as exc:
        log.error("produce to %s-%d failed: %s", name, index, exc)
        return -errors.KAFKA_STORAGE_ERROR


async def _store_once(
    partition: Any, messages: list[Any], records: int, name: str, index: int, batch: Any
) -> int:
    """Sequence numbers count records: in the `kafka` format a message holds many."""
    check = SEQUENCES.check(
        batch.producer_id, batch.producer_epoch, partition.topic, batch.base_sequence, records
    )
    if check.code:
        return -check.code
    if check.duplicate is not None:
        try:
            return await asyncio.shield(check.duplicate)
        except asyncio.CancelledError:
            return -errors.KAFKA_STORAGE_ERROR
    base = await _store(partition, messages, name, index)
    SEQUENCES.settle(
        batch.producer_id, partition.topic, check.accepted, base if base >= 0 else None
    )
    return base
