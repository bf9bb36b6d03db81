"""DescribeCluster: every live gateway of the cluster (docs/cluster.md) is a broker; the
one answering names itself the controller.

ListClientMetricsResources (KIP-714): the gateway keeps no client-metrics subscriptions
(it does not serve GetTelemetrySubscriptions, so clients push no telemetry), so the list
is empty, which is what a Kafka broker with none configured answers."""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE


async def describe_cluster(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    identity = context.identity
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
        "cluster_authorized_operations": -2147483648,
    }


async def list_client_metrics_resources(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    if not cluster_allowed(context, DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return {"throttle_time_ms": 0, "error_code": code, "client_metrics_resources": []}
    return {"throttle_time_ms": 0, "error_code": 0, "client_metrics_resources": []}
