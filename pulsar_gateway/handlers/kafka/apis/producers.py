"""DescribeProducers, ListTransactions and DescribeTransactions: what Kafka's
`kafka-transactions` tool asks about producers.

DescribeProducers lists each partition's idempotent producers as the partition's producer
state holds them (docs/offsets.md; the same state that makes retries exactly-once across
restarts): id, epoch, last sequence and the first offset of its open transaction there. The
gateway keeps no per-producer timestamp (-1). ListTransactions and DescribeTransactions
answer from the transaction coordinator's state (docs/transactions.md): a state filter Kafka
does not know is reported as unknown, an id never used is TRANSACTIONAL_ID_NOT_FOUND.
Rights, as Kafka asks them: `read` on the topic for DescribeProducers; ListTransactions
lists the ids the user may describe (every one with `describe` on the cluster);
DescribeTransactions needs `describe` on each id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
and leaves out the partitions of topics the user may not describe.
"""

from __future__ import annotations

import time
from typing import Any

from pulsar_gateway.handlers.kafka.authorization import (
    cluster_allowed,
    topic_allowed,
    transactional_id_allowed,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import PartitionLog
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, open_partition
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE, READ

TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


async def describe_producers(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    topics = []
    for topic in request["topics"]:
        record, code = await find_topic(context, topic["name"], auto_create=False, operation=READ)
        partitions = []
        for index in topic["partition_indexes"]:
            result: dict[str, Any] = {
                "partition_index": index,
                "error_code": code,
                "error_message": None,
                "active_producers": [],
            }
            partitions.append(result)
            log = await open_partition(context, record, code, index)
            if isinstance(log, int):
                result["error_code"] = log
                continue
            for producer_id in log.producer_ids():
                state = log.producer_state(producer_id)
                if state is None:
                    continue
                last = state.batches[-1].last_sequence if state.batches else -1
                result["active_producers"].append(
                    {
                        "producer_id": producer_id,
                        "producer_epoch": state.epoch,
                        "last_sequence": last,
                        "last_timestamp": -1,
                        "coordinator_epoch": -1,
                        "current_txn_start_offset": _open_start(log, producer_id),
                    }
                )
        topics.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def _open_start(log: PartitionLog, producer_id: int) -> int:
    start = log.open_transaction_start(producer_id)
    return -1 if start is None else start


async def list_transactions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    every = cluster_allowed(context, DESCRIBE, audit=False)
    states = request["state_filters"]
    unknown = [s for s in states if s not in TRANSACTION_STATES]
    producers = set(request["producer_id_filters"])
    longer_than = request.get("duration_filter", -1)
    now = int(time.time() * 1000)
    listed = []
    coordinator = context.transactions
    for state in [] if coordinator is None else coordinator.all():
        if not every and not transactional_id_allowed(
            context, state.transactional_id, DESCRIBE, audit=False
        ):
            continue
        if states and state.state not in states:
            continue
        if producers and state.producer_id not in producers:
            continue
        if longer_than >= 0 and (state.state != "Ongoing" or now - state.start_ms < longer_than):
            continue
        listed.append(
            {
                "transactional_id": state.transactional_id,
                "producer_id": state.producer_id,
                "transaction_state": state.state,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": unknown,
        "transaction_states": listed,
    }


async def describe_transactions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    coordinator = context.transactions
    answers = []
    for transactional_id in request["transactional_ids"]:
        allowed = transactional_id_allowed(context, transactional_id, DESCRIBE)
        state = None if coordinator is None or not allowed else coordinator.get(transactional_id)
        if state is None:
            answers.append(
                {
                    "error_code": (
                        ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                        if allowed
                        else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                    ),
                    "transactional_id": transactional_id,
                    "transaction_state": "",
                    "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        topics: dict[str, list[int]] = {}
        for topic, index in state.partitions:
            name = context.kafka_name(topic)
            if topic_allowed(context, name, DESCRIBE, audit=False):  # Kafka leaves them out
                topics.setdefault(name, []).append(index)
        answers.append(
            {
                "error_code": ErrorCode.NONE,
                "transactional_id": transactional_id,
                "transaction_state": state.state,
                "transaction_timeout_ms": state.timeout_ms,
                "transaction_start_time_ms": state.start_ms,
                "producer_id": state.producer_id,
                "producer_epoch": state.epoch,
                "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
            }
        )
    return {"throttle_time_ms": 0, "transaction_states": answers}
