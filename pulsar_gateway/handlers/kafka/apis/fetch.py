"""Fetch: records from any offset, long-polled up to max_wait for min_bytes.

Each partition's answer is record batches built from the stored entries
(stored_records.py): stored batches as sent, one-record messages re-encoded. Fetch
sessions are not kept: session id 0 tells clients to send full requests.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import OffsetOutOfRange, PartitionLog, StorageError
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.kafka_codec.entry_format import encode_entries
from pulsar_gateway.kafka_codec.errors import ErrorCode


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + max(0, request["max_wait_ms"]) / 1000
    min_bytes = request["min_bytes"]
    max_bytes = request.get("max_bytes", 0x7FFFFFFF)
    wanted: list[tuple[str, list[dict[str, Any]]]] = []
    logs: dict[tuple[str, int], PartitionLog | int] = {}
    for topic in request["topics"]:
        name = topic["topic"]
        wanted.append((name, topic["partitions"]))
        record, code = await find_topic(context, name, auto_create=False)
        for partition in topic["partitions"]:
            index = partition["partition"]
            if record is None:
                logs[(name, index)] = code
            elif not 0 <= index < record.partitions:
                logs[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    logs[(name, index)] = await context.topics.partition_of(record, index)
                except StorageError:
                    logs[(name, index)] = ErrorCode.KAFKA_STORAGE_ERROR
    while True:
        body, total = await _collect(wanted, logs, max_bytes)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or remaining <= 0 or _has_errors(body):
            return body
        waits = [log.data_future() for log in logs.values() if not isinstance(log, int)]
        if not waits:
            return body
        await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        for future in waits:
            future.cancel()


def _has_errors(body: dict[str, Any]) -> bool:
    return any(p["error_code"] for t in body["responses"] for p in t["partitions"])


async def _collect(
    wanted: list[tuple[str, list[dict[str, Any]]]],
    logs: dict[tuple[str, int], PartitionLog | int],
    max_bytes: int,
) -> tuple[dict[str, Any], int]:
    total = 0
    responses = []
    for name, partitions in wanted:
        out = []
        for partition in partitions:
            index = partition["partition"]
            log = logs[(name, index)]
            if isinstance(log, int):
                out.append(_partition(index, log, -1, -1, b""))
                continue
            budget = min(partition["partition_max_bytes"], max(max_bytes - total, 0))
            offset = partition["fetch_offset"]
            records = b""  # empty, never null: librdkafka 2.0.2 rejects a null record set
            code = ErrorCode.NONE
            if budget > 0 or total == 0:
                try:
                    messages = await log.read(offset, max(budget, 1))
                except OffsetOutOfRange:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                    messages = []
                except StorageError:
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                    messages = []
                if messages:
                    records, count = encode_entries(messages)
                    total += len(records)
                    metrics.RECORDS_OUT.labels(name).inc(count)
                    metrics.BYTES_OUT.labels(name).inc(len(records))
            out.append(_partition(index, code, log.next_offset, log.log_start, records))
        responses.append({"topic": name, "partitions": out})
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
    return body, total


def _partition(index: int, code: int, high: int, start: int, records: Any) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": high,
        "last_stable_offset": high,
        "log_start_offset": start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
