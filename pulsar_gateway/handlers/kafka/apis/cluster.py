"""DescribeCluster: every live gateway of the cluster (docs/cluster.md) is a broker; the
one answering names itself the controller.

DescribeQuorum: there is no KRaft quorum behind the gateway (metadata lives in the metadata
store), so the honest answer is a quorum of one voter, this gateway, leading at epoch 0 of
the `__cluster_metadata` partition with an empty log. Any other partition is
UNKNOWN_TOPIC_OR_PARTITION, as a Kafka controller answers for a partition it does not run.

ListClientMetricsResources (KIP-714), which Kafka 4.1 renamed ListConfigResources
(KIP-1142): v0 lists client-metrics resources; the gateway keeps no client-metrics
subscriptions (it does not serve GetTelemetrySubscriptions, so clients push no telemetry),
so that list is empty, which is what a Kafka broker with none configured answers. v1 lists
the resources of the types asked for (none: every type it knows), each with its type:
topics (those the user may describe the configs of), brokers (the cluster's members),
groups (as ListGroups lists them) and client metrics (none)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pulsar_gateway.handlers.kafka.apis.groups import list_groups
from pulsar_gateway.handlers.kafka.authorization import (
    authorized_operations,
    cluster_allowed,
    topic_allowed,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import CLUSTER, CLUSTER_NAME, DESCRIBE, DESCRIBE_CONFIGS

# Kafka's config resource types (DescribeConfigs' ResourceType) that ListConfigResources v1
# lists; an empty request asks for all of them
TOPIC, BROKER, CLIENT_METRICS, GROUP = 2, 4, 16, 32
LISTED_TYPES = (TOPIC, BROKER, GROUP, CLIENT_METRICS)


async def describe_cluster(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    identity = context.identity
    asked = bool(request.get("include_cluster_authorized_operations"))  # KIP-430
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": identity.cluster_id,
        "controller_id": identity.node_id,
        "brokers": [
            {"broker_id": node, "host": host, "port": port, "rack": None}
            for node, host, port in context.brokers()
        ],
        "cluster_authorized_operations": authorized_operations(
            context, CLUSTER, CLUSTER_NAME, asked
        ),
    }


METADATA_TOPIC = "__cluster_metadata"
_NO_DIRECTORY = uuid.UUID(int=0)


def _quorum_partition(context: KafkaContext, topic: str, index: int) -> dict[str, Any]:
    node = context.identity.node_id
    if topic != METADATA_TOPIC or index != 0:
        return {
            "partition_index": index,
            "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "error_message": None,
            "leader_id": -1,
            "leader_epoch": -1,
            "high_watermark": -1,
            "current_voters": [],
            "observers": [],
        }
    voter = {
        "replica_id": node,
        "replica_directory_id": _NO_DIRECTORY,
        "log_end_offset": 0,
        "last_fetch_timestamp": -1,  # Kafka's value for the leader itself
        "last_caught_up_timestamp": int(time.time() * 1000),
    }
    return {
        "partition_index": 0,
        "error_code": 0,
        "error_message": None,
        "leader_id": node,
        "leader_epoch": 0,
        "high_watermark": 0,
        "current_voters": [voter],
        "observers": [],
    }


async def describe_quorum(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    """One voter, this gateway (see the module docstring); DESCRIBE on the cluster, as Kafka."""
    if not cluster_allowed(context, DESCRIBE):
        return {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "topics": [],
            "nodes": [],
        }
    identity = context.identity
    topics = [
        {
            "topic_name": topic["topic_name"],
            "partitions": [
                _quorum_partition(context, topic["topic_name"], p["partition_index"])
                for p in topic["partitions"]
            ],
        }
        for topic in request["topics"]
    ]
    listener = {"name": "CONTROLLER", "host": identity.host, "port": identity.port}
    return {
        "error_code": 0,
        "error_message": None,
        "topics": topics,
        "nodes": [{"node_id": identity.node_id, "listeners": [listener]}],
    }


async def list_client_metrics_resources(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "client_metrics_resources": [],
    }
    if not cluster_allowed(context, DESCRIBE):
        return {**answer, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    if header.api_version < 1:
        return answer  # client metrics only: none
    types = list(dict.fromkeys(request.get("resource_types") or LISTED_TYPES))
    if any(kind not in LISTED_TYPES for kind in types):
        return {**answer, "error_code": ErrorCode.INVALID_REQUEST}
    listed: list[dict[str, Any]] = []
    for kind in types:
        for name in await _resources_of(context, header, kind):
            listed.append({"name": name, "resource_type": kind})
    return {**answer, "client_metrics_resources": listed}


async def _resources_of(context: KafkaContext, header: Any, kind: int) -> list[str]:
    """The names of the config resources of one type."""
    if kind == TOPIC:
        names = (context.kafka_name(record.name) for record in context.topics.list())
        return sorted(n for n in names if topic_allowed(context, n, DESCRIBE_CONFIGS, audit=False))
    if kind == BROKER:
        return [str(node_id) for node_id, _host, _port in context.brokers()]
    if kind == GROUP:
        groups = await list_groups(context, header, {"states_filter": [], "types_filter": []})
        return sorted({group["group_id"] for group in groups["groups"]})
    return []  # client metrics: the gateway keeps none
