"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), or the first offset at a time.

v8's earliest-local (-4) is the log start: nothing is tiered away from the "local" log, which
is all in Pulsar. v9's latest-tiered (-5) is -1: no offset was ever tiered to remote storage.
v10's timeout applies to remote lookups, which never happen here. Under read_committed
(isolation level 1, v2+) latest is the last stable offset, as Kafka answers it."""

from __future__ import annotations

from typing import Any

from pulsar_gateway.gateway.messages import records_in
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import PartitionLog, StorageError
from pulsar_gateway.handlers.kafka.read_committed import READ_COMMITTED
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.kafka_codec.entry_format import records_of
from pulsar_gateway.kafka_codec.errors import ErrorCode

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    committed = request.get("isolation_level", 0) == READ_COMMITTED
    topics = []
    pace = context.turns.pace()  # thousands of partitions must not hold the loop
    for topic in request["topics"]:
        await pace.step()
        record, code = await find_topic(context, topic["name"], auto_create=False)
        partitions = []
        for partition in topic["partitions"]:
            await pace.step()
            index = partition["partition_index"]
            result = {
                "partition_index": index,
                "error_code": code,
                "old_style_offsets": [],
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": 0,
            }
            if record is not None and not 0 <= index < record.partitions:
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif record is not None and not context.serves_partition(record.name, index):
                result["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif record is not None:
                try:
                    log = await context.topics.partition_of(record, index)
                    offset, timestamp = await _lookup(log, partition["timestamp"], committed)
                except StorageError:
                    result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                else:
                    result.update(offset=offset, timestamp=timestamp, old_style_offsets=[offset])
            partitions.append(result)
        topics.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _lookup(log: PartitionLog, wanted: int, committed: bool) -> tuple[int, int]:
    if wanted == LATEST:
        return (log.last_stable_offset if committed else log.next_offset), -1
    if wanted in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start, -1
    if wanted == LATEST_TIERED:
        return -1, -1
    if wanted == MAX_TIMESTAMP:
        return await _max_timestamp(log)
    return await _first_at(log, wanted)


async def _first_at(log: PartitionLog, wanted: int) -> tuple[int, int]:
    """First offset whose timestamp is >= wanted; the end offset (-1 ts) when none is.

    A forward scan: timestamps in a partition are not ordered, so Kafka's own answer is
    also "first record at or after", found by its time index.
    """
    offset = log.log_start
    while offset < log.next_offset:
        entries = await log.read(offset, 1 << 20)
        for entry in entries:
            for record in records_of(entry):
                if record.offset >= offset and record.timestamp >= wanted:
                    return record.offset, record.timestamp
            offset = max(offset, entry.offset + records_in(entry.message))
    return -1, -1


async def _max_timestamp(log: PartitionLog) -> tuple[int, int]:
    best_offset, best_time = -1, -1
    offset = log.log_start
    while offset < log.next_offset:
        for entry in await log.read(offset, 1 << 20):
            for record in records_of(entry):
                if record.offset >= offset and record.timestamp > best_time:
                    best_offset, best_time = record.offset, record.timestamp
            offset = max(offset, entry.offset + records_in(entry.message))
    return best_offset, best_time
