"""CreateTopics, DeleteTopics, CreatePartitions.

Replication factors and replica assignments are checked as a one-broker Kafka checks them,
then ignored: Pulsar (BookKeeper) decides replication. New topics are also held to the
gateway's partition limits (`kafka.max_partitions_per_topic`, `kafka.max_partitions_total`)
and their configs to Kafka's rules (configs.py). A deleted topic is gone at once for every
API; on the embedded broker, which cannot delete stored messages, its Pulsar topics wait for
reclamation and a topic created again under the name starts empty on fresh ones
(docs/pulsar-mapping.md, 'Deleting topics').
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from pulsar_gateway.gateway.topic_names import InvalidTopicName, validate_kafka_name
from pulsar_gateway.handlers.kafka.apis.configs import topic_configs, validate_configs
from pulsar_gateway.handlers.kafka.authorization import may_create_topic, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import (
    InvalidPartitions,
    StorageError,
    TopicExists,
    UnknownTopic,
)
from pulsar_gateway.handlers.kafka.topic_lookup import reserved_refusal, topic_uuid, topic_with_id
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import ALTER, DELETE, DESCRIBE

AUTHORIZATION_FAILED = "Authorization failed."  # Kafka's text for a refused topic

log = logging.getLogger("gateway.kafka.admin")


async def create_topics(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    named = Counter(topic["name"] for topic in request["topics"])
    repeated = {name for name, times in named.items() if times > 1}
    # the partition count before this request, plus what it has created (or, validate_only,
    # would have) so far: what kafka.max_partitions_total is checked against
    total = context.topics.total_partitions()
    for topic in request["topics"]:
        name = topic["name"]
        result: dict[str, Any] = {
            "name": name,
            "error_code": 0,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
            "topic_id": topic_uuid(None),
        }
        results.append(result)
        if name in repeated:
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"Create topics request contains multiple entries for topic {name}.",
            )
            continue
        partitions = topic["num_partitions"]
        if partitions == -1:
            partitions = len(topic["assignments"]) or context.settings.default_partitions
        configs = {item["name"]: item["value"] for item in topic.get("configs", [])}
        try:
            validate_kafka_name(name)
        except InvalidTopicName as exc:
            result.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc))
            continue
        refusal = reserved_refusal(context, name)
        if refusal is not None:
            result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=refusal)
            continue
        if not may_create_topic(context, name):
            result.update(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=AUTHORIZATION_FAILED
            )
            continue
        full = context.pulsar_name(name)
        if context.topics.get(full) is not None:
            result.update(
                error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
                error_message=f"Topic '{name}' already exists.",
            )
            continue
        refused = _shape_problem(context, topic, partitions) or _limit_problem(
            context, partitions, total
        )
        if refused is None and (problem := validate_configs(configs)):
            refused = ErrorCode.INVALID_CONFIG, problem
        if refused is not None:
            result.update(error_code=refused[0], error_message=refused[1])
            continue
        if request.get("validate_only"):
            total += partitions
            result.update(num_partitions=partitions, replication_factor=1)  # nothing created
            continue
        try:
            record = await context.topics.create(full, partitions, configs)
        except TopicExists:
            result.update(
                error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
                error_message=f"Topic '{name}' already exists.",
            )
            continue
        except StorageError as exc:
            result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))
            continue
        total += partitions
        result.update(
            num_partitions=partitions,
            replication_factor=1,
            topic_id=topic_uuid(record),
            configs=[
                {
                    "name": key,
                    "value": value,
                    "read_only": False,
                    "config_source": 5,
                    "is_sensitive": False,
                }
                for key, value in topic_configs(record, context.settings).items()
            ],
        )
    return {"throttle_time_ms": 0, "topics": results}


def _shape_problem(
    context: KafkaContext, topic: dict[str, Any], partitions: int
) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a new topic's partitions, replication factor and assignment, with
    its codes and words. The gateway is one broker (node `kafka.node_id`), as Metadata says:
    Pulsar replicates underneath, so a factor above 1 is refused as a one-broker Kafka would."""
    factor = topic["replication_factor"]
    assignments = topic["assignments"]
    node = context.identity.node_id
    if assignments:
        if topic["num_partitions"] != -1 or factor != -1:
            return (
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set."
                " Both cannot be used at the same time.",
            )
        indexes = sorted(item["partition_index"] for item in assignments)
        if indexes != list(range(len(indexes))):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        for item in assignments:
            if not item["broker_ids"] or any(broker != node for broker in item["broker_ids"]):
                return (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Unknown broker(s) in the assignment of partition {item['partition_index']}:"
                    f" {item['broker_ids']} (the only broker is {node})",
                )
        return None
    if partitions < 1:
        return (
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if factor != -1 and factor < 1:
        return (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if factor > 1:
        return (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {factor} time(s): The target replication factor"
            f" of {factor} cannot be reached because only 1 broker(s) are registered.",
        )
    return None


def _limit_problem(
    context: KafkaContext, count: int, total: int, current: int = 0
) -> tuple[ErrorCode, str] | None:
    """The gateway's own partition limits (Kafka has none; a count in the millions freezes
    Metadata and restarts): `count` partitions for one topic that has `current`, when all
    topics have `total`."""
    settings = context.settings
    if count > settings.max_partitions_per_topic:
        return (
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {count} is above the gateway's limit of"
            f" {settings.max_partitions_per_topic} per topic (kafka.max_partitions_per_topic).",
        )
    after = total + count - current
    if after > settings.max_partitions_total:
        return (
            ErrorCode.POLICY_VIOLATION,
            f"{count - current} more partitions would make {after} in all, above the gateway's"
            f" limit of {settings.max_partitions_total} (kafka.max_partitions_total).",
        )
    return None


async def delete_topics(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    """v6+ name topics by name or by topic id (KIP-516); earlier versions by name only. A
    topic asked for by id that the user may not describe is refused without its name."""
    if header.api_version >= 6:
        wanted = [(item["name"], item["topic_id"]) for item in request["topics"]]
    else:
        wanted = [(name, None) for name in request.get("topic_names", [])]
    results = []
    message: str | None  # _delete_one's message is None on success
    for name, topic_id in wanted:
        record = None
        if name is None and topic_id is not None:
            record = topic_with_id(context, topic_id)
            name = context.kafka_name(record.name) if record is not None else None
            if name is not None and not topic_allowed(context, name, DESCRIBE):
                # as Kafka: a topic asked for by id that the user may not describe is
                # refused without its name
                refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                results.append(_deleted(None, topic_id, None, refused, AUTHORIZATION_FAILED))
                continue
        if name is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}"
        elif (refusal := reserved_refusal(context, name)) is not None:
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, refusal
        elif not topic_allowed(context, name, DELETE):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED
        else:
            record = record or context.topics.get(context.pulsar_name(name))
            code, message = await _delete_one(context, name)
        results.append(_deleted(name, topic_id, record, code, message))
    return {"throttle_time_ms": 0, "responses": results}


def _deleted(
    name: str | None, topic_id: Any, record: Any, code: int, message: str | None
) -> dict[str, Any]:
    return {
        "name": name,
        "error_code": code,
        "error_message": message,
        "topic_id": topic_uuid(record) if topic_id is None else topic_id,
    }


async def _delete_one(context: KafkaContext, name: str) -> tuple[ErrorCode, str | None]:
    try:
        await context.topics.delete(context.pulsar_name(name))
    except UnknownTopic:
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        )
    except StorageError as exc:
        return ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)
    return ErrorCode.NONE, None


async def create_partitions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    total = context.topics.total_partitions()  # as in create_topics
    for topic in request["topics"]:
        name = topic["name"]
        code, message = ErrorCode.NONE, None
        full = context.pulsar_name(name)
        record = context.topics.get(full)
        if not topic_allowed(context, name, ALTER):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED
        elif record is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
        elif topic["count"] <= record.partitions:
            code = ErrorCode.INVALID_PARTITIONS
            message = (
                f"Topic currently has {record.partitions} partitions, {topic['count']}"
                " would not be an increase."
            )
        elif refused := _limit_problem(context, topic["count"], total, record.partitions):
            code, message = refused
        else:
            try:
                if not request.get("validate_only"):
                    await context.topics.add_partitions(full, topic["count"])
                total += topic["count"] - record.partitions
            except (InvalidPartitions, UnknownTopic, StorageError) as exc:
                code, message = ErrorCode.INVALID_PARTITIONS, str(exc)
        results.append({"name": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
