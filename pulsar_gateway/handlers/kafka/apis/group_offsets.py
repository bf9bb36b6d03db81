"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets of Kafka groups.

Commits are fenced by the coordinator (generation, member, static instance), stored
durably through the group offset store before the answer, and then mirrored onto the
group's Pulsar subscriptions in the background.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pulsar_gateway.gateway.topic_names import (
    UnknownPartition,
    partition_topic,
    split_partition_topic,
)
from pulsar_gateway.handlers.kafka.apis.groups import coordinator_of
from pulsar_gateway.handlers.kafka.authorization import group_allowed, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import CommittedOffset, StorageError
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.handlers.loop_turns import Pace
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DELETE, DESCRIBE, READ

MAX_METADATA = 4096


async def offset_commit(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    group_id = request["group_id"]
    consumer_groups = context.consumer_groups
    if not group_allowed(context, group_id, READ):
        group_code: int = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif (
        consumer_groups is not None
        and context.serves_group(group_id)
        and consumer_groups.has_members(group_id)
    ):
        # a KIP-848 group: the member epoch is checked (v9 names a stale one as such)
        group_code = consumer_groups.validate_commit(
            group_id,
            request.get("member_id", ""),
            request.get("generation_id_or_member_epoch", -1),
            ErrorCode.STALE_MEMBER_EPOCH
            if header.api_version >= 9
            else ErrorCode.ILLEGAL_GENERATION,
        )
    else:
        group_code = coordinator_of(context).validate_commit(
            group_id,
            request.get("generation_id_or_member_epoch", -1),
            request.get("member_id", ""),
            request.get("group_instance_id"),
        )
    answers: list[tuple[str, list[dict[str, Any]]]] = []
    entries: dict[str, CommittedOffset] = {}
    stored_at: list[dict[str, Any]] = []
    for topic in request["topics"]:
        topic_code: int  # find_topic's codes are ints
        record, topic_code = None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not group_code:
            record, topic_code = await find_topic(context, topic["name"], False, READ)
        partitions = []
        for partition in topic["partitions"]:
            index = partition["partition_index"]
            result = {"partition_index": index, "error_code": group_code}
            metadata = partition.get("committed_metadata") or ""
            if group_code:
                pass
            elif topic_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                result["error_code"] = topic_code
            elif record is None or not 0 <= index < record.partitions:
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata) > MAX_METADATA:
                result["error_code"] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                entries[partition_topic(record.name, index)] = CommittedOffset(
                    partition["committed_offset"],
                    metadata,
                    max(partition.get("commit_timestamp", -1), 0),
                    partition.get("committed_leader_epoch", -1),
                )
                stored_at.append(result)
            partitions.append(result)
        answers.append((topic["name"], partitions))
    if entries:
        try:
            code = await context.late.within(
                _committed(context, group_id, entries),
                context.settings.coordinator_answer_seconds,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                "an offset commit",
            )
        except StorageError:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        for result in stored_at:
            result["error_code"] = code
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in answers],
    }


async def _committed(
    context: KafkaContext, group_id: str, entries: dict[str, CommittedOffset]
) -> ErrorCode:
    await context.offsets.commit(group_id, entries)
    return ErrorCode.NONE


async def _fetch_group(
    context: KafkaContext, group_id: str, topics: list[dict[str, Any]] | None, pace: Pace
) -> tuple[int, list[dict[str, Any]]]:
    store = context.offsets
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, []
    if not group_allowed(context, group_id, DESCRIBE):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    if not context.serves_group(group_id):
        return ErrorCode.NOT_COORDINATOR, []
    wanted: dict[str, list[int]] = defaultdict(list)
    if topics is None:  # every topic of the group the user may describe, as Kafka
        for pulsar_partition in store.offsets(group_id):
            await pace.step()
            try:
                name, index = split_partition_topic(pulsar_partition)
            except UnknownPartition:
                continue
            kafka_name = context.kafka_name(name)
            if topic_allowed(context, kafka_name, DESCRIBE, audit=False):
                wanted[kafka_name].append(index)
    else:
        for topic in topics:
            wanted[topic["name"]].extend(topic["partition_indexes"])
    out = []
    for kafka_name, indexes in wanted.items():
        pulsar_name = context.pulsar_name(kafka_name)
        allowed = topics is None or topic_allowed(context, kafka_name, DESCRIBE)
        partitions = []
        for index in sorted(indexes):
            await pace.step()
            entry = store.get(group_id, partition_topic(pulsar_name, index)) if allowed else None
            partitions.append(
                {
                    "partition_index": index,
                    "committed_offset": entry.offset if entry else -1,
                    "committed_leader_epoch": entry.leader_epoch if entry else -1,
                    "metadata": entry.metadata if entry else "",
                    "error_code": (
                        ErrorCode.NONE if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    ),
                }
            )
        out.append({"name": kafka_name, "partitions": partitions})
    return ErrorCode.NONE, out


async def offset_fetch(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    pace = context.turns.pace()  # thousands of partitions must not hold the loop
    if header.api_version >= 8:
        groups = []
        for group in request["groups"]:
            await pace.step()
            code, topics = await _fetch_group(context, group["group_id"], group.get("topics"), pace)
            groups.append({"group_id": group["group_id"], "topics": topics, "error_code": code})
        return {"throttle_time_ms": 0, "groups": groups}
    code, topics = await _fetch_group(context, request["group_id"], request.get("topics"), pace)
    if code and header.api_version < 2:
        topics = [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": index,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": code,
                    }
                    for index in topic["partition_indexes"]
                ],
            }
            for topic in request.get("topics") or []
        ]
    return {"throttle_time_ms": 0, "topics": topics, "error_code": code}


async def offset_delete(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    group_id = request["group_id"]
    if group_id and not group_allowed(context, group_id, DELETE):
        return {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "throttle_time_ms": 0,
            "topics": [],
        }
    if group_id and not context.serves_group(group_id):
        return {"error_code": ErrorCode.NOT_COORDINATOR, "throttle_time_ms": 0, "topics": []}
    group = coordinator_of(context).describe(group_id) if group_id else None
    if group is None:
        code: int = ErrorCode.INVALID_GROUP_ID if not group_id else ErrorCode.GROUP_ID_NOT_FOUND
        return {"error_code": code, "throttle_time_ms": 0, "topics": []}
    subscribed = group.subscribed_topics() or set()
    store = context.offsets
    answers = []
    doomed: list[str] = []
    for topic in request["topics"]:
        record, topic_code = await find_topic(context, topic["name"], False, READ)
        partitions = []
        for partition in topic["partitions"]:
            index = partition["partition_index"]
            if topic_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                code = topic_code
            elif record is None or not 0 <= index < record.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif topic["name"] in subscribed:
                code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                code = ErrorCode.NONE
                doomed.append(partition_topic(record.name, index))
            partitions.append({"partition_index": index, "error_code": code})
        answers.append({"name": topic["name"], "partitions": partitions})
    if doomed:
        await store.delete(group_id, doomed)
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0, "topics": answers}
