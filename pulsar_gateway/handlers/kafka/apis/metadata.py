"""Metadata: every partition is led by this gateway (node `kafka.node_id`).

As in Kafka, the list of all topics holds only those the user may describe, a topic named
but not describable is TOPIC_AUTHORIZATION_FAILED, and auto-creation needs CREATE."""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, topic_uuid
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    identity = context.identity
    requested = request.get("topics")
    # v0: an empty list means all topics; v1+: null means all, empty means none
    all_topics = requested is None or (header.api_version == 0 and not requested)
    allow_create = request.get("allow_auto_topic_creation", True)
    topics = []
    if all_topics:
        for record in context.topics.list():
            name = context.kafka_name(record.name)
            if topic_allowed(context, name, DESCRIBE, audit=False):
                topics.append(_describe(context, name, record, ErrorCode.NONE))
    else:
        for item in requested:
            name = item.get("name")
            if name is None:
                topics.append(
                    {
                        "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                        "name": None,
                        "topic_id": item.get("topic_id"),
                        "partitions": [],
                    }
                )
                continue
            record, code = await find_topic(context, name, allow_create)
            topics.append(_describe(context, name, record, code))
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {
                "node_id": identity.node_id,
                "host": identity.host,
                "port": identity.port,
                "rack": None,
            }
        ],
        "cluster_id": identity.cluster_id,
        "controller_id": identity.node_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


def _describe(context: KafkaContext, name: str, record: Any, code: int) -> dict[str, Any]:
    node = context.identity.node_id
    partitions = []
    if record is not None:
        partitions = [
            {
                "error_code": 0,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for index in range(record.partitions)
        ]
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_uuid(record),
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": -2147483648,
    }
