"""The replica and leadership APIs, answered as a one-broker Kafka cluster answers them.

Every partition has one replica, led by this gateway at leader epoch 0 (Metadata says so);
Pulsar (BookKeeper) does the replication underneath, out of Kafka's sight. So a preferred or
unclean election is never needed (ELECTION_NOT_NEEDED), no reassignment is ever in progress,
a reassignment to this broker alone changes nothing and one to any other broker is
INVALID_REPLICA_ASSIGNMENT, and OffsetForLeaderEpoch, which consumers send to check for log
truncation after a leader change, finds epoch 0 ending at the log end. Each answer is final,
so tools report it instead of retrying.

Log directories: all data is in Pulsar, shown as the one log dir `LOG_DIR` holding every
partition. Sizes are not known to the gateway (Pulsar keeps them, and the embedded broker
does not report them), so partition sizes and the dir's bytes are -1, Kafka's "unknown";
moving a replica to that dir changes nothing and to any other is LOG_DIR_NOT_FOUND.

Rights, as Kafka asks them: elections, reassignments and log dir moves need `alter` on the
cluster, listing reassignments and log dirs `describe` on it (CLUSTER_AUTHORIZATION_FAILED);
OffsetForLeaderEpoch `describe` on the topic.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pulsar_gateway.handlers.kafka.authorization import cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import TopicRecord
from pulsar_gateway.handlers.kafka.topic_lookup import find_topic, open_partition
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import ALTER, DESCRIBE

LEADER_EPOCH = 0


async def _partition_error(context: KafkaContext, topic: str, index: int) -> int:
    """NONE for a partition that exists, else the error naming why not."""
    record, code = await find_topic(context, topic, auto_create=False)
    if record is None:
        return code
    return (
        ErrorCode.NONE if 0 <= index < record.partitions else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


async def elect_leaders(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    allowed = cluster_allowed(context, ALTER)
    for topic in request.get("topic_partitions") or []:  # null: every partition, none needed
        partitions = []
        for index in topic["partitions"]:
            code = await _partition_error(context, topic["topic"], index)
            if not allowed:
                code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            elif code == ErrorCode.NONE:
                code = ErrorCode.ELECTION_NOT_NEEDED
            partitions.append(
                {
                    "partition_id": index,
                    "error_code": code,
                    "error_message": "Leader election not needed for topic partition"
                    if code == ErrorCode.ELECTION_NOT_NEEDED
                    else None,
                }
            )
        results.append({"topic": topic["topic"], "partition_result": partitions})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "replica_election_results": results,
    }


async def list_partition_reassignments(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    """Nothing is ever being reassigned."""
    allowed = cluster_allowed(context, DESCRIBE)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "error_message": None,
        "topics": [],
    }


async def alter_partition_reassignments(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    node = context.identity.node_id
    if not cluster_allowed(context, ALTER):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
            "responses": [],
        }
    responses = []
    for topic in request["topics"]:
        partitions = []
        for partition in topic["partitions"]:
            index, replicas = partition["partition_index"], partition["replicas"]
            code = await _partition_error(context, topic["name"], index)
            message = None
            if code == ErrorCode.NONE and replicas is None:
                code, message = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "no reassignment to cancel"
            elif code == ErrorCode.NONE and list(replicas) != [node]:
                code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                message = f"this cluster has one broker ({node}); Pulsar replicates the data"
            partitions.append(
                {"partition_index": index, "error_code": code, "error_message": message}
            )
        responses.append({"name": topic["name"], "partitions": partitions})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": responses,
    }


async def offset_for_leader_epoch(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    topics = []
    for topic in request["topics"]:
        record, code = await find_topic(context, topic["topic"], auto_create=False)
        partitions = [await _epoch_end(context, record, code, p) for p in topic["partitions"]]
        topics.append({"topic": topic["topic"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


async def _epoch_end(
    context: KafkaContext, record: TopicRecord | None, code: int, partition: dict[str, Any]
) -> dict[str, Any]:
    index = partition["partition"]
    result = {"error_code": code, "partition": index, "leader_epoch": -1, "end_offset": -1}
    if record is None:
        return result
    if not 0 <= index < record.partitions:
        result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return result
    current = partition.get("current_leader_epoch", -1)
    if current > LEADER_EPOCH:
        result["error_code"] = ErrorCode.UNKNOWN_LEADER_EPOCH
        return result
    if 0 <= current < LEADER_EPOCH:
        result["error_code"] = ErrorCode.FENCED_LEADER_EPOCH
        return result
    if partition["leader_epoch"] > LEADER_EPOCH:
        return result  # an epoch this log never had: undefined, as Kafka answers
    log = await open_partition(context, record, code, index)
    if isinstance(log, int):
        result["error_code"] = log
        return result
    result.update(leader_epoch=LEADER_EPOCH, end_offset=log.next_offset)
    return result


LOG_DIR = "pulsar"
UNKNOWN_SIZE = -1


async def describe_log_dirs(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    if not cluster_allowed(context, DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "results": [],
        }
    wanted = request.get("topics")  # null: every partition
    topics: list[tuple[str, Iterable[int]]] = []
    record: TopicRecord | None
    if wanted is None:
        for record in context.topics.list():
            topics.append((context.kafka_name(record.name), range(record.partitions)))
    else:
        for item in wanted:
            record, _code = await find_topic(context, item["topic"], auto_create=False)
            if record is not None:  # Kafka leaves out what this broker does not hold
                held = [i for i in item["partitions"] if 0 <= i < record.partitions]
                topics.append((item["topic"], held))
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "results": [
            {
                "error_code": ErrorCode.NONE,
                "log_dir": LOG_DIR,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {
                                "partition_index": index,
                                "partition_size": UNKNOWN_SIZE,
                                "offset_lag": 0,
                                "is_future_key": False,
                            }
                            for index in indexes
                        ],
                    }
                    for name, indexes in topics
                ],
                "total_bytes": UNKNOWN_SIZE,
                "usable_bytes": UNKNOWN_SIZE,
            }
        ],
    }


async def alter_replica_log_dirs(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    allowed = cluster_allowed(context, ALTER)
    for log_dir in request["dirs"]:
        for topic in log_dir["topics"]:
            partitions = []
            for index in topic["partitions"]:
                code = await _partition_error(context, topic["name"], index)
                if not allowed:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif code == ErrorCode.NONE and log_dir["path"] != LOG_DIR:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                partitions.append({"partition_index": index, "error_code": code})
            results.append({"topic_name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "results": results}
