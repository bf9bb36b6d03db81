"""AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn: a transactional
producer's requests to its coordinator (transaction_coordinator.py holds the state machine).

AddPartitionsToTxn is served in the clients' form (v0-3, one transactional id per request);
v4+ is the brokers' batched form, which only Kafka brokers send. A fenced producer gets
PRODUCER_FENCED from the versions that know it (KIP-588) and INVALID_PRODUCER_EPOCH before.
Rights, as Kafka asks them: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and WRITE on each topic added, READ on the group.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.kafka.authorization import group_allowed, transactional_id_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import CommittedOffset, StorageError
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic
from pulsar_gateway.handlers.kafka.transaction_coordinator import NotServed, fenced_code
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import READ, WRITE


def _may_use(context: KafkaContext, transactional_id: str) -> bool:
    return transactional_id_allowed(context, transactional_id, WRITE)


async def _guarded(job: Awaitable[ErrorCode]) -> ErrorCode:
    """A coordinator call's code; COORDINATOR_NOT_AVAILABLE (retried by clients) when the
    store failed, the state then being as it was or prepared for a retry to finish;
    NOT_COORDINATOR when another cluster member coordinates the id."""
    try:
        return ErrorCode(await job)
    except StorageError:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    except NotServed:
        return ErrorCode.NOT_COORDINATOR


async def add_partitions_to_txn(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    topics = request["v3_and_below_topics"]
    txn = context.transactions
    wanted: list[tuple[str, int]] = []
    results: list[tuple[str, dict[int, ErrorCode]]] = []
    failed = False
    allowed = _may_use(context, request["v3_and_below_transactional_id"])
    for topic in topics:
        codes: dict[int, ErrorCode] = {}
        code: int  # find_topic's codes are ints
        record, code = None, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if allowed:  # topics are not even looked up for an id the user may not use
            record, code = await find_topic(context, topic["name"], False, operation=WRITE)
        for index in topic["partitions"]:
            if txn is None or not allowed:
                codes[index] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif record is None:
                codes[index] = ErrorCode(code)
            elif not 0 <= index < record.partitions:
                codes[index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                codes[index] = ErrorCode.NONE
                wanted.append((record.name, index))
                continue
            failed = True
        results.append((topic["name"], codes))
    if failed or txn is None:
        # Kafka adds none when any fails; the others are OPERATION_NOT_ATTEMPTED
        for _, codes in results:
            for index, code in codes.items():
                if code == ErrorCode.NONE:
                    codes[index] = ErrorCode.OPERATION_NOT_ATTEMPTED
    else:
        outcome = await _guarded(
            txn.add_partitions(
                request["v3_and_below_transactional_id"],
                request["v3_and_below_producer_id"],
                request["v3_and_below_producer_epoch"],
                wanted,
                fenced_code(header),
            ),
        )
        for _, codes in results:
            for index in codes:
                codes[index] = outcome
    return {
        "throttle_time_ms": 0,
        "results_by_topic_v3_and_below": [
            {
                "name": name,
                "results_by_partition": [
                    {"partition_index": index, "partition_error_code": code}
                    for index, code in codes.items()
                ],
            }
            for name, codes in results
        ],
    }


async def add_offsets_to_txn(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    txn = context.transactions
    group_id = request["group_id"]
    if txn is None or not _may_use(context, request["transactional_id"]):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not group_allowed(context, group_id, READ):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        code = await _guarded(
            txn.add_offsets(
                request["transactional_id"],
                request["producer_id"],
                request["producer_epoch"],
                group_id,
                fenced_code(header),
            ),
        )
    return {"throttle_time_ms": 0, "error_code": code}


async def txn_offset_commit(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    txn = context.transactions
    group_id = request["group_id"]
    if txn is None or not _may_use(context, request["transactional_id"]):
        group_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not group_allowed(context, group_id, READ):
        group_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        group_code = ErrorCode.NONE
    entries: dict[str, CommittedOffset] = {}
    answers: list[tuple[str, list[dict[str, Any]]]] = []
    for topic in request["topics"]:
        topic_code: int  # find_topic's codes are ints
        record, topic_code = None, ErrorCode.NONE
        if not group_code:
            record, topic_code = await find_topic(context, topic["name"], False, READ)
        partitions = []
        for partition in topic["partitions"]:
            index = partition["partition_index"]
            result = {"partition_index": index, "error_code": group_code}
            if not group_code and record is None:
                result["error_code"] = topic_code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not group_code and record is not None:
                if not 0 <= index < record.partitions:
                    result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    entries[partition_topic(record.name, index)] = CommittedOffset(
                        partition["committed_offset"],
                        partition.get("committed_metadata") or "",
                        0,
                        partition.get("committed_leader_epoch", -1),
                    )
            partitions.append(result)
        answers.append((topic["name"], partitions))
    if entries and txn is not None:
        code = await _guarded(
            txn.commit_offsets(
                request["transactional_id"],
                request["producer_id"],
                request["producer_epoch"],
                group_id,
                entries,
                fenced_code(header),
            ),
        )
        for _, partitions in answers:
            for result in partitions:
                if result["error_code"] == ErrorCode.NONE:
                    result["error_code"] = code
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in answers],
    }


async def end_txn(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    txn = context.transactions
    if txn is None or not _may_use(context, request["transactional_id"]):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        code = await _guarded(
            txn.end(
                request["transactional_id"],
                request["producer_id"],
                request["producer_epoch"],
                bool(request["committed"]),
                fenced_code(header),
            ),
        )
    return {"throttle_time_ms": 0, "error_code": code}
