"""InitProducerId: producer ids for idempotent producers, unique across restarts.

Transactions are not served yet: a transactional id gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients report as fatal instead of
retrying forever.

An idempotent producer needs, as in Kafka, IDEMPOTENT_WRITE on the cluster or WRITE on
some topic (here: some namespace); else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import CLUSTER_NAME
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import StorageError
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import CLUSTER, IDEMPOTENT_WRITE, NAMESPACE, WRITE


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    if request.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    access = context.access
    if not (
        access.may(CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE) or access.may_any(NAMESPACE, WRITE)
    ):
        access.denied(CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    previous = request.get("producer_id", -1)
    if previous >= 0:
        # a producer bumping its epoch after an error keeps its id
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "producer_id": previous,
            "producer_epoch": (request.get("producer_epoch", 0) + 1) % 32767,
        }
    try:
        producer_id = await context.producer_ids.next_id()
    except StorageError:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "producer_id": producer_id,
        "producer_epoch": 0,
    }
