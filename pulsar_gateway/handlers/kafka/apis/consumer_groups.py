"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848's `consumer` group protocol
(consumer_groups.py holds the state machine). Assignments travel by topic id; the
coordinator works in Kafka topic names, and this module translates.

Rights, as Kafka asks them: the heartbeat needs READ on the group, ConsumerGroupDescribe
DESCRIBE on it. A member is assigned only topics its user may describe (a subscription
naming or matching others gets nothing of them: no name, id or partition count), and a
describe that would name a topic the caller may not describe is refused with
TOPIC_AUTHORIZATION_FAILED, as Kafka refuses it. A group id that has classic members is not
a consumer group (GROUP_ID_NOT_FOUND, Kafka's answer), and JoinGroup refuses a group that
has consumer members (groups.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from pulsar_gateway.handlers.kafka.authorization import (
    authorized_operations,
    group_allowed,
    topic_allowed,
)
from pulsar_gateway.handlers.kafka.consumer_groups import (
    ASSIGNOR,
    SERVER_ASSIGNORS,
    Assignment,
    ConsumerGroups,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.topic_lookup import topic_uuid
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE, GROUP, READ

NO_OPERATIONS = -2147483648


class _Catalog:
    """The topic store in Kafka names, for the coordinator; topic ids both ways."""

    def __init__(self, context: KafkaContext) -> None:
        self.context = context

    def may_describe(self, name: str) -> bool:
        return topic_allowed(self.context, name, DESCRIBE, audit=False)

    def partitions(self, name: str) -> int | None:
        record = self.context.topics.get(self.context.pulsar_name(name))
        return None if record is None else record.partitions

    def names(self) -> Iterable[str]:
        return [self.context.kafka_name(record.name) for record in self.context.topics.list()]

    def topic_id(self, name: str) -> uuid.UUID:
        return topic_uuid(self.context.topics.get(self.context.pulsar_name(name)))

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        wanted = str(topic_id)
        for record in self.context.topics.list():
            if record.topic_id and str(uuid.UUID(record.topic_id)) == wanted:
                name = self.context.kafka_name(record.name)
                return name if self.may_describe(name) else None
        return None


def _coordinator(context: KafkaContext) -> ConsumerGroups:
    assert context.consumer_groups is not None, "the Kafka listener starts one"
    return context.consumer_groups


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

    if not group_allowed(context, group_id, READ):
        return refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    if not context.serves_group(group_id):
        return refused(ErrorCode.NOT_COORDINATOR)
    if header.api_version >= 1 and not request["member_id"]:
        return refused(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    assignor = request.get("server_assignor")
    if assignor is not None and assignor not in SERVER_ASSIGNORS:
        return refused(ErrorCode.UNSUPPORTED_ASSIGNOR, f"Assignor {assignor} is not supported.")
    if context.groups is not None:
        classic = context.groups.describe(group_id)
        if classic is not None and classic.members:
            return refused(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
            )
    if context.share_groups is not None and context.share_groups.has_members(group_id):
        return refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    catalog = _Catalog(context)
    owned = None
    if request["topic_partitions"] is not None:
        owned = {}
        for entry in request["topic_partitions"]:
            name = catalog.name_of(entry["topic_id"])
            if name is not None:
                owned[name] = set(entry["partitions"])
    result = _coordinator(context).heartbeat(
        group_id,
        request["member_id"],
        request["member_epoch"],
        catalog=catalog,
        instance_id=request.get("instance_id"),
        rack_id=request.get("rack_id"),
        rebalance_timeout_ms=request.get("rebalance_timeout_ms", -1),
        subscribed=request.get("subscribed_topic_names"),
        regex=request.get("subscribed_topic_regex"),
        owned=owned,
        client_id=header.client_id or "",
        client_host=context.access.peer.rsplit(":", 1)[0] if context.access.peer else "",
        may_describe=catalog.may_describe,
        server_assignor=assignor,
    )
    if result.error:
        return refused(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": _by_id(result.assignment, catalog)}
    return {
        **answer,
        "member_id": result.member_id,
        "member_epoch": result.epoch,
        "heartbeat_interval_ms": _coordinator(context).heartbeat_interval_ms,
        "assignment": assignment,
    }


def _by_id(assignment: Assignment, catalog: _Catalog) -> list[dict[str, Any]]:
    return [
        {"topic_id": catalog.topic_id(topic), "partitions": sorted(parts)}
        for topic, parts in sorted(assignment.items())
    ]


def _described(assignment: Assignment, catalog: _Catalog) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_id": catalog.topic_id(topic), "topic_name": topic, "partitions": sorted(parts)}
            for topic, parts in sorted(assignment.items())
        ]
    }


async def describe(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    catalog = _Catalog(context)
    described = []
    async for group_id in context.turns.paced(request["group_ids"]):
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
        group = _coordinator(context).describe(group_id)
        if not group_allowed(context, group_id, DESCRIBE):
            entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif not context.serves_group(group_id):
            entry["error_code"] = ErrorCode.NOT_COORDINATOR
        elif group is None or not group.members:
            entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            entry["error_message"] = f"Group {group_id} not found."
        elif not all(catalog.may_describe(name) for name in _topics_named(group)):
            entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            entry["error_message"] = (
                "The group has described topic(s) that the client is not authorized to describe."
            )
        else:
            entry.update(
                group_state=group.state,
                group_epoch=group.epoch,
                assignor_name=group.assignor,
                assignment_epoch=group.assignment_epoch,
                members=[
                    {
                        "member_id": member.member_id,
                        "instance_id": member.instance_id,
                        "rack_id": member.rack_id,
                        "member_epoch": member.epoch,
                        "client_id": member.client_id,
                        "client_host": member.client_host,
                        "subscribed_topic_names": member.subscribed,
                        "subscribed_topic_regex": member.regex,
                        "assignment": _described(member.assigned, catalog),
                        "target_assignment": _described(
                            group.target.get(member.member_id, {}), catalog
                        ),
                    }
                    for member in group.members.values()
                ],
            )
            asked = bool(request.get("include_authorized_operations"))  # KIP-430
            entry["authorized_operations"] = authorized_operations(context, GROUP, group_id, asked)
        described.append(entry)
    return {"throttle_time_ms": 0, "groups": described}


def _topics_named(group: Any) -> set[str]:
    """Every topic a describe of the group would name: subscriptions and assignments."""
    names: set[str] = set()
    for member in group.members.values():
        names.update(member.subscribed)
        names.update(member.assigned)
        names.update(group.target.get(member.member_id, {}))
    return names
