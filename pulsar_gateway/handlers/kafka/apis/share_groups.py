"""ShareGroupHeartbeat and ShareGroupDescribe: KIP-932's share group membership
(share_groups.py holds it). Assignments travel by topic id, as in KIP-848; every member
is assigned every partition of the topics it subscribes to that exist and it may describe.

Rights, as Kafka asks them: the heartbeat needs READ on the group, the describe DESCRIBE.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import group_allowed, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.share_groups import ASSIGNOR, LEAVE_EPOCH, ShareGroups
from pulsar_gateway.handlers.kafka.topic_lookup import topic_uuid
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE, READ

NO_OPERATIONS = -2147483648
NOT_OFFERED = "share groups are not offered by this gateway's storage"


def coordinator(context: KafkaContext) -> ShareGroups | None:
    return context.share_groups


def assignment(context: KafkaContext, topics: tuple[str, ...] | list[str]) -> list[Any]:
    """(topic name, topic id, partitions) of each subscribed topic that exists and that the
    connection's user may describe."""
    out = []
    for name in sorted(topics):
        record = context.topics.get(context.pulsar_name(name))
        if record is None or not topic_allowed(context, name, DESCRIBE, audit=False):
            continue
        out.append((name, topic_uuid(record), list(range(record.partitions))))
    return out


async def heartbeat(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    group_id = request["group_id"]
    answer: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }

    def refused(code: int, message: str | None = None) -> dict[str, Any]:
        return {**answer, "error_code": code, "error_message": message}

    groups = coordinator(context)
    if groups is None:
        return refused(ErrorCode.UNSUPPORTED_VERSION, NOT_OFFERED)
    if not group_allowed(context, group_id, READ):
        return refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    if not context.serves_group(group_id):
        return refused(ErrorCode.NOT_COORDINATOR)
    if not request["member_id"]:
        return refused(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if taken_by_other_protocol(context, group_id):
        return refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if request["member_epoch"] == LEAVE_EPOCH:
        result = await groups.leave(group_id, request["member_id"])
    else:
        result = groups.heartbeat(
            group_id,
            request["member_id"],
            request["member_epoch"],
            request.get("subscribed_topic_names"),
            request.get("rack_id"),
            header.client_id or "",
            context.access.peer.rsplit(":", 1)[0] if context.access.peer else "",
        )
    if result.error:
        return refused(result.error, result.message)
    given = None
    if result.epoch != LEAVE_EPOCH:
        given = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": partitions}
                for _name, topic_id, partitions in assignment(context, result.topics)
            ]
        }
    return {
        **answer,
        "member_id": result.member_id,
        "member_epoch": result.epoch,
        "heartbeat_interval_ms": groups.heartbeat_interval_ms(group_id),
        "assignment": given,
    }


def taken_by_other_protocol(context: KafkaContext, group_id: str) -> bool:
    """A group id with classic or `consumer` members is not a share group."""
    classic = context.groups.describe(group_id) if context.groups is not None else None
    if classic is not None and classic.members:
        return True
    consumer = context.consumer_groups.describe(group_id) if context.consumer_groups else None
    return consumer is not None and bool(consumer.members)


async def describe(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    groups = coordinator(context)
    described = []
    for group_id in request["group_ids"]:
        entry: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": "Dead",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": ASSIGNOR,
            "members": [],
            "authorized_operations": NO_OPERATIONS,
        }
        group = groups.describe(group_id) if groups is not None else None
        if groups is None:
            entry.update(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=NOT_OFFERED)
        elif not group_allowed(context, group_id, DESCRIBE):
            entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif not context.serves_group(group_id):
            entry["error_code"] = ErrorCode.NOT_COORDINATOR
        elif group is None and groups.knows(group_id):  # only stored state: no members
            entry.update(group_state="Empty", group_epoch=0, assignment_epoch=0)
        elif group is None:
            entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            entry["error_message"] = f"Group {group_id} not found."
        else:
            entry.update(
                group_state=group.state,
                group_epoch=group.epoch,
                assignment_epoch=group.epoch,
                members=[
                    {
                        "member_id": member.member_id,
                        "rack_id": member.rack_id,
                        "member_epoch": member.epoch,
                        "client_id": member.client_id,
                        "client_host": member.client_host,
                        "subscribed_topic_names": member.subscribed,
                        "assignment": {
                            "topic_partitions": [
                                {"topic_id": topic_id, "topic_name": name, "partitions": parts}
                                for name, topic_id, parts in assignment(context, member.subscribed)
                            ]
                        },
                    }
                    for member in group.members.values()
                ],
            )
        described.append(entry)
    return {"throttle_time_ms": 0, "groups": described}
