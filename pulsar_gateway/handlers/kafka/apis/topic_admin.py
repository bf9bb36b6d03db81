"""CreateTopics, DeleteTopics, CreatePartitions.

Replication factor and replica assignments are accepted and ignored: Pulsar (BookKeeper)
decides replication. Deleting on the embedded broker hides the data but cannot free it.
"""

from __future__ import annotations

import logging
from typing import Any

from pulsar_gateway.gateway.topic_names import InvalidTopicName, validate_kafka_name
from pulsar_gateway.handlers.kafka.apis.configs import topic_configs, validate_configs
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import (
    InvalidPartitions,
    StorageError,
    TopicExists,
    UnknownTopic,
)
from pulsar_gateway.handlers.kafka.topic_lookup import topic_uuid
from pulsar_gateway.kafka_codec.errors import ErrorCode

log = logging.getLogger("gateway.kafka.admin")


async def create_topics(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
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
        partitions = topic["num_partitions"]
        if partitions == -1:
            partitions = context.settings.default_partitions
        configs = {item["name"]: item["value"] for item in topic.get("configs", [])}
        try:
            validate_kafka_name(name)
        except InvalidTopicName as exc:
            result.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc))
            continue
        if partitions < 1:
            result.update(
                error_code=ErrorCode.INVALID_PARTITIONS,
                error_message="number of partitions must be larger than 0",
            )
            continue
        problem = validate_configs(configs)
        if problem:
            result.update(error_code=ErrorCode.INVALID_CONFIG, error_message=problem)
            continue
        full = context.pulsar_name(name)
        if context.topics.get(full) is not None:
            result.update(
                error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
                error_message=f"Topic '{name}' already exists.",
            )
            continue
        if request.get("validate_only"):
            result.update(num_partitions=partitions, replication_factor=1)
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
                for key, value in topic_configs(record, context.settings.entry_format).items()
            ],
        )
    return {"throttle_time_ms": 0, "topics": results}


async def delete_topics(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    for name in request.get("topic_names", []):
        code, message = ErrorCode.NONE, None
        try:
            await context.topics.delete(context.pulsar_name(name))
        except UnknownTopic:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            message = "This server does not host this topic-partition."
        except StorageError as exc:
            code, message = ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)
        results.append(
            {
                "name": name,
                "error_code": code,
                "error_message": message,
                "topic_id": topic_uuid(None),
            }
        )
    return {"throttle_time_ms": 0, "responses": results}


async def create_partitions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    for topic in request["topics"]:
        name = topic["name"]
        code, message = ErrorCode.NONE, None
        full = context.pulsar_name(name)
        record = context.topics.get(full)
        if record is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
        elif topic["count"] <= record.partitions:
            code = ErrorCode.INVALID_PARTITIONS
            message = (
                f"Topic currently has {record.partitions} partitions, {topic['count']}"
                " would not be an increase."
            )
        elif not request.get("validate_only"):
            try:
                await context.topics.add_partitions(full, topic["count"])
            except (InvalidPartitions, UnknownTopic, StorageError) as exc:
                code, message = ErrorCode.INVALID_PARTITIONS, str(exc)
        results.append({"name": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
