"""DeleteRecords: move a partition's log start offset up (Kafka's `kafka-delete-records`).

Offsets below the new start are gone for every Kafka client at once: ListOffsets earliest
answers the new start, Fetch below it is OFFSET_OUT_OF_RANGE (so a consumer with
auto.offset.reset=earliest skips to it), and the start survives restarts in the topic's
record. The Pulsar messages behind those offsets are not deleted by this call: Pulsar's
retention reclaims their space (the embedded broker keeps them; docs/pulsar-mapping.md,
'Deleting records'). Needs `delete` on the topic's namespace
(docs/security.md, 'Authorization'). Offset -1 means the high watermark, as on Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import StorageError, UnknownTopic
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, open_partition
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DELETE

log = logging.getLogger("gateway.kafka.admin")

HIGH_WATERMARK = -1


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    topics = []
    for topic in request["topics"]:
        record, code = await find_topic(context, topic["name"], auto_create=False, operation=DELETE)
        partitions = []
        for partition in topic["partitions"]:
            index, offset = partition["partition_index"], partition["offset"]
            result = {"partition_index": index, "low_watermark": -1, "error_code": code}
            partitions.append(result)
            partition_log = await open_partition(context, record, code, index)
            if isinstance(partition_log, int):
                result["error_code"] = partition_log
                continue
            assert record is not None  # opened, so the topic exists
            try:
                end = partition_log.next_offset
                wanted = end if offset == HIGH_WATERMARK else offset
                if not 0 <= wanted <= end:
                    result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                    continue
                start = await context.topics.delete_records(record.name, index, wanted)
            except UnknownTopic:
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            except StorageError as exc:
                log.warning("deleting records of %s/%d failed: %s", topic["name"], index, exc)
                result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                result["low_watermark"] = start
        topics.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
