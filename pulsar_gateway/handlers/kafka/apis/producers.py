"""DescribeProducers, ListTransactions and DescribeTransactions: what Kafka's
`kafka-transactions` tool asks about producers.

DescribeProducers lists each partition's idempotent producers as the partition's producer
state holds them (docs/offsets.md; the same state that makes retries exactly-once across
restarts): id, epoch and last sequence. The gateway keeps no per-producer timestamp (-1)
and no transactions. Transactions are not served, so no transactional id exists:
ListTransactions lists none (a state filter Kafka does not know is reported as unknown) and
DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND for each id. Rights: `read` on the
topic (Kafka: READ) and `describe` on the cluster for the listing.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.authorization import cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
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
                        "current_txn_start_offset": -1,
                    }
                )
        topics.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def list_transactions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    code = (
        ErrorCode.NONE
        if cluster_allowed(context, DESCRIBE)
        else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    )
    unknown = [s for s in request["state_filters"] if s not in TRANSACTION_STATES]
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "unknown_state_filters": unknown,
        "transaction_states": [],
    }


async def describe_transactions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "transaction_states": [
            {
                "error_code": ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                "transactional_id": transactional_id,
                "transaction_state": "",
                "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
            for transactional_id in request["transactional_ids"]
        ],
    }
