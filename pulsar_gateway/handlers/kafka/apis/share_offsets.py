"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets: the admin
APIs for where a share group stands on each partition (KIP-932; `kafka-share-groups
--describe --offsets`, `--reset-offsets`, `--delete-offsets`).

A share group's position on a partition is its share-partition start offset: every record
below it is settled (docs/share-groups.md). Describe answers it, from this gateway's copy
or the stored state, -1 for a partition the group never read, and from version 1 the lag:
the records from the start to the partition's end that are not settled yet (-1 when the
partition is served by another cluster member). Alter sets a start offset: the share
partition starts afresh there, nothing in flight and no delivery counted, and the group's
Pulsar subscription follows it. Delete drops the group's state of every partition of a
topic, so the group starts there again as `share.auto.offset.reset` says. Alter and delete
need the group empty (NON_EMPTY_GROUP), as in Kafka, so no member holds records of a state
that changes under it.

Rights, as Kafka asks them: describe needs DESCRIBE on the group and each topic; alter READ
on both; delete DELETE on the group and READ on each topic.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.apis.share_groups import NOT_OFFERED, taken_by_other_protocol
from pulsar_gateway.handlers.kafka.authorization import group_allowed, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import StorageError, TopicRecord
from pulsar_gateway.handlers.kafka.share_groups import ShareGroups
from pulsar_gateway.handlers.kafka.share_partition import settled_within
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, open_partition, topic_uuid
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DELETE, DESCRIBE, READ

UNKNOWN = -1  # a start offset or lag not known
LEADER_EPOCH = 0  # as Metadata answers it


def _group_refusal(
    context: KafkaContext, groups: ShareGroups | None, group_id: str, operation: str
) -> tuple[int, str | None]:
    """Why the request may not touch the group, as (error code, message); NONE if it may."""
    if groups is None:
        return ErrorCode.UNSUPPORTED_VERSION, NOT_OFFERED
    if not group_allowed(context, group_id, operation):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed."
    if not context.serves_group(group_id):
        return ErrorCode.NOT_COORDINATOR, None
    if taken_by_other_protocol(context, group_id):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    return ErrorCode.NONE, None


def _emptiness(groups: ShareGroups, group_id: str) -> tuple[int, str | None]:
    if groups.has_members(group_id):
        return ErrorCode.NON_EMPTY_GROUP, f"The share group {group_id} has active members."
    return ErrorCode.NONE, None


# ---- DescribeShareGroupOffsets ------------------------------------------------------------


async def _described_partition(
    context: KafkaContext,
    groups: ShareGroups,
    group_id: str,
    record: TopicRecord,
    index: int,
    with_lag: bool,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "partition_index": index,
        "start_offset": UNKNOWN,
        "leader_epoch": LEADER_EPOCH,
        "lag": UNKNOWN,
        "error_code": ErrorCode.NONE,
        "error_message": None,
    }
    if not 0 <= index < record.partitions:
        entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, leader_epoch=UNKNOWN)
        return entry
    state = groups.state_of_partition((group_id, record.stored_name, index), record.topic_id)
    if state is None:
        return entry
    entry["start_offset"] = state.start
    if with_lag:
        log = await open_partition(context, record, ErrorCode.NONE, index)
        if not isinstance(log, int):
            end = log.last_stable_offset if groups.read_committed(group_id) else log.next_offset
            start = max(state.start, log.log_start)
            settled = settled_within(state) if start == state.start else 0
            entry["lag"] = max(0, end - start - settled)
    return entry


def _stored_topics(
    context: KafkaContext, groups: ShareGroups, group_id: str
) -> list[tuple[TopicRecord, list[int]]]:
    """Every topic (that the user may describe) with a partition the group has read, and
    those partitions: what a describe with null topics answers."""
    out = []
    for record in context.topics.list():
        name = context.kafka_name(record.name)
        if not topic_allowed(context, name, DESCRIBE, audit=False):
            continue
        read = [
            index
            for index in range(record.partitions)
            if groups.state_of_partition((group_id, record.stored_name, index), record.topic_id)
            is not None
        ]
        if read:
            out.append((record, read))
    return sorted(out, key=lambda pair: pair[0].name)


async def describe_offsets(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    groups = context.share_groups
    with_lag = header.api_version >= 1
    pace = context.turns.pace()  # thousands of partitions must not hold the loop
    described = []
    for wanted in request["groups"]:
        group_id = wanted["group_id"]
        code, message = _group_refusal(context, groups, group_id, DESCRIBE)
        if not code and groups is not None and not groups.knows(group_id):
            code, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        entry: dict[str, Any] = {
            "group_id": group_id,
            "topics": [],
            "error_code": code,
            "error_message": message,
        }
        described.append(entry)
        if code or groups is None:
            continue
        if wanted["topics"] is None:
            chosen = _stored_topics(context, groups, group_id)
            asked: list[tuple[str, TopicRecord | None, int, list[int]]] = [
                (context.kafka_name(record.name), record, ErrorCode.NONE, read)
                for record, read in chosen
            ]
        else:
            asked = []
            for topic in wanted["topics"]:
                record, found = await find_topic(context, topic["topic_name"], False, DESCRIBE)
                asked.append((topic["topic_name"], record, found, list(topic["partitions"])))
        for name, record, found, indexes in asked:
            partitions = []
            for index in indexes:
                await pace.step()
                if record is None:
                    partitions.append(_refused_partition(index, found))
                else:
                    partitions.append(
                        await _described_partition(
                            context, groups, group_id, record, index, with_lag
                        )
                    )
            entry["topics"].append(
                {"topic_name": name, "topic_id": topic_uuid(record), "partitions": partitions}
            )
    return {"throttle_time_ms": 0, "groups": described}


def _refused_partition(index: int, code: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "start_offset": UNKNOWN,
        "leader_epoch": UNKNOWN,
        "lag": UNKNOWN,
        "error_code": code,
        "error_message": None,
    }


# ---- AlterShareGroupOffsets ---------------------------------------------------------------


async def alter_offsets(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    groups = context.share_groups
    group_id = request["group_id"]
    code, message = _group_refusal(context, groups, group_id, READ)
    if not code and groups is not None:
        code, message = _emptiness(groups, group_id)
    responses = []
    for topic in request["topics"]:
        record, found = None, code
        if not code:
            record, found = await find_topic(context, topic["topic_name"], False, READ)
        partitions = []
        for part in topic["partitions"]:
            index, start = part["partition_index"], part["start_offset"]
            result: dict[str, Any] = {
                "partition_index": index,
                "error_code": found,
                "error_message": message if code else None,
            }
            partitions.append(result)
            if record is None or groups is None:
                continue
            if not 0 <= index < record.partitions:
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif start < 0:
                result.update(
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"The start offset {start} is negative.",
                )
            else:
                try:
                    await groups.reset((group_id, record.stored_name, index), start)
                except StorageError as exc:
                    result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
        responses.append(
            {
                "topic_name": topic["topic_name"],
                "topic_id": topic_uuid(record),
                "partitions": partitions,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "responses": responses,
    }


# ---- DeleteShareGroupOffsets --------------------------------------------------------------


async def delete_offsets(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    groups = context.share_groups
    group_id = request["group_id"]
    code, message = _group_refusal(context, groups, group_id, DELETE)
    if not code and groups is not None and not groups.knows(group_id):
        code, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if not code and groups is not None:
        code, message = _emptiness(groups, group_id)
    answer: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "responses": [],
    }
    if code or groups is None:
        return answer
    for topic in request["topics"]:
        record, found = await find_topic(context, topic["topic_name"], False, READ)
        result: dict[str, Any] = {
            "topic_name": topic["topic_name"],
            "topic_id": topic_uuid(record),
            "error_code": found,
            "error_message": None,
        }
        answer["responses"].append(result)
        if record is None:
            continue
        try:
            for index in range(record.partitions):
                key = (group_id, record.stored_name, index)
                if groups.state_of_partition(key, record.topic_id) is not None:
                    await groups.forget(key)
        except StorageError as exc:
            result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
    return answer
