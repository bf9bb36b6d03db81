"""InitProducerId: producer ids for idempotent producers, unique across restarts.

Transactions are not served yet: a transactional id gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients report as fatal instead of
retrying forever.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec import errors

NEXT_ID_KEY = "kafka-producer-id/next"
_lock = asyncio.Lock()


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    if request.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    previous = request.get("producer_id", -1)
    if previous >= 0:
        # a producer bumping its epoch after an error keeps its id
        return {
            "throttle_time_ms": 0,
            "error_code": errors.NONE,
            "producer_id": previous,
            "producer_epoch": (request.get("producer_epoch", 0) + 1) % 32767,
        }
    metadata = context.topics.metadata
    async with _lock:
        producer_id = int(metadata.get(NEXT_ID_KEY, 1000))
        await metadata.put(NEXT_ID_KEY, producer_id + 1)
    return {
        "throttle_time_ms": 0,
        "error_code": errors.NONE,
        "producer_id": producer_id,
        "producer_epoch": 0,
    }
