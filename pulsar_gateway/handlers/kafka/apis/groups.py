"""Group APIs of the classic protocol: FindCoordinator, Join, Sync, Heartbeat, Leave,
ListGroups, DescribeGroups and DeleteGroups. A group's coordinator is the cluster member
that serves its key (docs/cluster.md); the others answer NOT_COORDINATOR.

FindCoordinator for a transactional id names its coordinator too (transaction_coordinator.py),
to a user who may DESCRIBE the id.

Rights, as Kafka asks them (authorization.py): FindCoordinator and DescribeGroups need
DESCRIBE on the group, Join/Sync/Heartbeat/Leave READ, DeleteGroups DELETE; ListGroups
lists every group to a user with DESCRIBE on the cluster, else the groups it may
describe."""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import (
    authorized_operations,
    cluster_allowed,
    group_allowed,
    transactional_id_allowed,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.group_model import STABLE
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DELETE, DESCRIBE, GROUP, READ

GROUP_KEY, TRANSACTION_KEY = 0, 1
NO_OPERATIONS = -2147483648


def coordinator_of(context: KafkaContext) -> GroupCoordinator:
    assert context.groups is not None, "the Kafka listener starts a group coordinator"
    return context.groups


async def find_coordinator(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    key_type = request.get("key_type", GROUP_KEY)

    def answer(key: str) -> dict[str, Any]:
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            code, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
        elif not key:
            code, message = ErrorCode.INVALID_REQUEST, "empty coordinator key"
        elif key_type == GROUP_KEY and not group_allowed(context, key, DESCRIBE):
            code, message = ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed."
        elif key_type == TRANSACTION_KEY and not transactional_id_allowed(context, key, DESCRIBE):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            message = "Authorization failed."
        else:
            code, message = ErrorCode.NONE, None
        found = code == ErrorCode.NONE
        node, host, port = context.coordinator_of(key, key_type == TRANSACTION_KEY)
        return {
            "key": key,
            "node_id": node if found else -1,
            "host": host if found else "",
            "port": port if found else -1,
            "error_code": code,
            "error_message": message,
        }

    if header.api_version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [answer(key) for key in request["coordinator_keys"]],
        }
    single = answer(request["key"])
    del single["key"]
    return {"throttle_time_ms": 0, **single}


async def join_group(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    if not group_allowed(context, request["group_id"], READ):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if version >= 7 else "",
            "leader": "",
            "skip_assignment": False,
            "member_id": request["member_id"],
            "members": [],
        }
    shares = context.share_groups
    if (
        context.consumer_groups is not None
        and context.consumer_groups.has_members(request["group_id"])
    ) or (shares is not None and shares.has_members(request["group_id"])):
        # a KIP-848 consumer group (consumer_groups.py) or a share group (share_groups.py):
        # classic members cannot join it
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if version >= 7 else "",
            "leader": "",
            "skip_assignment": False,
            "member_id": request["member_id"],
            "members": [],
        }
    session_ms = request["session_timeout_ms"]
    rebalance_ms = request.get("rebalance_timeout_ms", -1)
    if rebalance_ms is None or rebalance_ms < 0:
        rebalance_ms = session_ms
    result = await coordinator_of(context).join(
        request["group_id"],
        request["member_id"],
        request.get("group_instance_id"),
        header.client_id or "",
        "/127.0.0.1",
        session_ms,
        rebalance_ms,
        request["protocol_type"],
        [(p["name"], bytes(p["metadata"])) for p in request["protocols"]],
        require_known_member=version >= 4,
    )
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "skip_assignment": False,
        "member_id": result.member_id,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
            for member_id, instance_id, metadata in result.members
        ],
    }


async def sync_group(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    if not group_allowed(context, request["group_id"], READ):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    result = await coordinator_of(context).sync(
        request["group_id"],
        request["generation_id"],
        request["member_id"],
        request.get("group_instance_id"),
        request.get("protocol_type"),
        request.get("protocol_name"),
        {a["member_id"]: bytes(a["assignment"]) for a in request["assignments"]},
    )
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


async def heartbeat(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    if not group_allowed(context, request["group_id"], READ):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    code = coordinator_of(context).heartbeat(
        request["group_id"],
        request["generation_id"],
        request["member_id"],
        request.get("group_instance_id"),
    )
    return {"throttle_time_ms": 0, "error_code": code}


async def leave_group(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    if header.api_version >= 3:
        leaving = [(m["member_id"], m.get("group_instance_id")) for m in request["members"]]
    else:
        leaving = [(request["member_id"], None)]
    if group_allowed(context, request["group_id"], READ):
        top, codes = coordinator_of(context).leave(request["group_id"], leaving)
    else:
        top, codes = ErrorCode.GROUP_AUTHORIZATION_FAILED, [ErrorCode.NONE] * len(leaving)
    if header.api_version < 3:
        return {"throttle_time_ms": 0, "error_code": top or codes[0]}
    return {
        "throttle_time_ms": 0,
        "error_code": top,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
            for (member_id, instance_id), code in zip(leaving, codes, strict=True)
        ],
    }


async def list_groups(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    coordinator = coordinator_of(context)
    states = {state.lower() for state in request.get("states_filter") or []}
    types = {kind.lower() for kind in request.get("types_filter") or []}
    every = cluster_allowed(context, DESCRIBE, audit=False)
    listed = []
    consumer_groups = context.consumer_groups
    pace = context.turns.pace()  # thousands of groups must not hold the loop
    if not types or "classic" in types:
        for group_id in coordinator.known_group_ids():
            await pace.step()
            if not (every or group_allowed(context, group_id, DESCRIBE, audit=False)):
                continue
            if consumer_groups is not None and consumer_groups.has_members(group_id):
                continue  # listed below, as the consumer group it is
            group = coordinator.describe(group_id)
            if group is None or (states and group.state.lower() not in states):
                continue
            listed.append(
                {
                    "group_id": group_id,
                    "protocol_type": group.protocol_type or "",
                    "group_state": group.state,
                    "group_type": "classic",
                }
            )
    if consumer_groups is not None and (not types or "consumer" in types):
        for group_id in consumer_groups.group_ids():
            await pace.step()
            if not context.serves_group(group_id) or not (
                every or group_allowed(context, group_id, DESCRIBE, audit=False)
            ):
                continue
            consumer = consumer_groups.describe(group_id)
            if consumer is None or (states and consumer.state.lower() not in states):
                continue
            listed.append(
                {
                    "group_id": group_id,
                    "protocol_type": "consumer",
                    "group_state": consumer.state,
                    "group_type": "consumer",
                }
            )
    shares = context.share_groups
    if shares is not None and (not types or "share" in types):
        for group_id in shares.group_ids():
            await pace.step()
            if not context.serves_group(group_id) or not (
                every or group_allowed(context, group_id, DESCRIBE, audit=False)
            ):
                continue
            state = shares.state_of(group_id)
            if states and state.lower() not in states:
                continue
            listed.append(
                {
                    "group_id": group_id,
                    "protocol_type": "share",
                    "group_state": state,
                    "group_type": "share",
                }
            )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": listed}


async def describe_groups(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    coordinator = coordinator_of(context)
    described = []
    async for group_id in context.turns.paced(request["groups"]):
        entry: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "group_id": group_id,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": NO_OPERATIONS,
        }
        allowed = bool(group_id) and group_allowed(context, group_id, DESCRIBE)
        served = allowed and context.serves_group(group_id)
        group = coordinator.describe(group_id) if served else None
        if not group_id:
            entry["error_code"] = ErrorCode.INVALID_GROUP_ID
        elif not allowed:
            entry["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif not served:
            entry["error_code"] = ErrorCode.NOT_COORDINATOR
        elif context.consumer_groups is not None and context.consumer_groups.has_members(group_id):
            # Kafka 4's answer for a KIP-848 group: ConsumerGroupDescribe describes it
            entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
        elif group is not None:
            stable = group.state == STABLE
            entry.update(
                group_state=group.state,
                protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=[
                    {
                        "member_id": member.member_id,
                        "group_instance_id": member.instance_id,
                        "client_id": member.client_id,
                        "client_host": member.client_host,
                        "member_metadata": (
                            member.metadata_for(group.protocol_name) if stable else b""
                        ),
                        "member_assignment": member.assignment if stable else b"",
                    }
                    for member in group.members.values()
                ],
            )
        if allowed:  # v3+, KIP-430
            asked = bool(request.get("include_authorized_operations"))
            entry["authorized_operations"] = authorized_operations(context, GROUP, group_id, asked)
        described.append(entry)
    return {"throttle_time_ms": 0, "groups": described}


async def delete_groups(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    coordinator = coordinator_of(context)
    results = []
    for group_id in request["groups_names"]:
        consumer_groups = context.consumer_groups
        if not group_allowed(context, group_id, DELETE):
            code: int = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif consumer_groups is not None and consumer_groups.has_members(group_id):
            code = ErrorCode.NON_EMPTY_GROUP
        elif context.share_groups is not None and context.share_groups.knows(group_id):
            code = await context.share_groups.delete_group(group_id)
        else:
            code = await coordinator.delete_group(group_id)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}
