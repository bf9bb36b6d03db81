"""InitProducerId: producer ids for idempotent producers, unique across restarts.

With a transactional id the transaction coordinator answers (transaction_coordinator.py): the
id keeps its producer id, each call bumps the epoch, fencing the previous producer and
aborting what it left open. Without a coordinator (no transaction store wired in) a
transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients report as fatal
instead of retrying forever.

An idempotent producer needs, as in Kafka, IDEMPOTENT_WRITE on the cluster or WRITE on some
topic; else CLUSTER_AUTHORIZATION_FAILED. A transactional one needs
WRITE on its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED): the call fences
the id's previous producer, so using an id is what must be granted.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import transactional_id_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import StorageError
from pulsar_gateway.handlers.kafka.transaction_coordinator import NotServed, fenced_code
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE, TOPIC, WRITE


def may_produce_idempotently(context: KafkaContext) -> bool:
    access = context.access
    if access.may(CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE) or access.may_any(TOPIC, WRITE):
        return True
    access.denied(CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE)
    return False


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    transactional_id = request.get("transactional_id")
    if transactional_id is not None:
        return await _transactional(context, header, request, transactional_id)
    if not may_produce_idempotently(context):
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
        producer_id = await context.late.within(
            context.producer_ids.next_id(),
            context.settings.coordinator_answer_seconds,
            -1,
            "a producer id",
        )
    except StorageError:
        producer_id = -2
    if producer_id < 0:  # busy (answered in time) or failed
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            if producer_id == -1
            else ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "producer_id": producer_id,
        "producer_epoch": 0,
    }


async def _transactional(
    context: KafkaContext, header: Any, request: dict[str, Any], transactional_id: str
) -> dict[str, Any]:
    coordinator = context.transactions
    if coordinator is None or not transactional_id_allowed(context, transactional_id, WRITE):
        code, producer_id, epoch = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1
    else:
        try:
            code, producer_id, epoch = await coordinator.init_producer_id(
                transactional_id,
                request["transaction_timeout_ms"],
                request.get("producer_id", -1),
                request.get("producer_epoch", -1),
                fenced_code(header),
            )
        except StorageError:
            code, producer_id, epoch = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        except NotServed:  # another cluster member coordinates it (docs/cluster.md)
            code, producer_id, epoch = ErrorCode.NOT_COORDINATOR, -1, -1
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
