"""DescribeClientQuotas and AlterClientQuotas, honestly: the gateway enforces no client quotas.

`kafka-configs --describe --entity-type users|clients|ips` and AdminClient's quota calls get
Kafka's answers for a cluster with no quota set: DescribeClientQuotas lists nothing, and
AlterClientQuotas refuses each entry with POLICY_VIOLATION saying quotas are not enforced
here, so nobody believes a limit is in force that is not (a stored but ignored quota would
be worse). Entity types and quota keys are still checked as Kafka checks them
(INVALID_REQUEST), and both need the cluster right Kafka asks for (docs/security.md).
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import ALTER, DESCRIBE

ENTITY_TYPES = ("user", "client-id", "ip")
QUOTA_KEYS = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
)
NOT_ENFORCED = "client quotas are not enforced by this gateway; none is stored"


async def describe(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    answer = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None}
    if not cluster_allowed(context, DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return {
            **answer,
            "error_code": code,
            "error_message": "Authorization failed.",
            "entries": None,
        }
    for component in request["components"]:
        if component["entity_type"] not in ENTITY_TYPES:
            message = f"Unknown entity type {component['entity_type']!r}"
            return {
                **answer,
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": message,
                "entries": None,
            }
    return {**answer, "entries": []}


async def alter(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    allowed = cluster_allowed(context, ALTER)
    entries = []
    for entry in request["entries"]:
        code, message = ErrorCode.POLICY_VIOLATION, NOT_ENFORCED
        unknown_type = [
            e["entity_type"] for e in entry["entity"] if e["entity_type"] not in ENTITY_TYPES
        ]
        unknown_key = [op["key"] for op in entry["ops"] if op["key"] not in QUOTA_KEYS]
        if not allowed:
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
        elif unknown_type:
            code, message = ErrorCode.INVALID_REQUEST, f"Unknown entity type {unknown_type[0]!r}"
        elif unknown_key:
            code, message = ErrorCode.INVALID_REQUEST, f"Unknown quota key {unknown_key[0]!r}"
        entries.append({"error_code": code, "error_message": message, "entity": entry["entity"]})
    return {"throttle_time_ms": 0, "entries": entries}
