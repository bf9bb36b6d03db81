"""Finding (and auto-creating) the topic a request names, with Kafka's error codes."""

from __future__ import annotations

import logging
import uuid

from pulsar_gateway.gateway.reserved_names import namespace_of
from pulsar_gateway.gateway.topic_names import InvalidTopicName, validate_kafka_name
from pulsar_gateway.handlers.kafka.authorization import may_create_topic, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import PartitionLog, StorageError, TopicExists, TopicRecord
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE

log = logging.getLogger("gateway.kafka")  # rate-limited: a per-request warning


def reserved_refusal(context: KafkaContext, kafka_name: str) -> str | None:
    """Why `kafka_name` may not be used, when it maps into a namespace the gateway keeps for
    its own state (`public/__gateway/metadata` is the metadata log itself); else None.

    Answered with TOPIC_AUTHORIZATION_FAILED, as Kafka answers a topic the principal may not
    touch, whether or not such a Pulsar topic exists."""
    namespace = namespace_of(context.pulsar_name(kafka_name))
    if context.storage.reserved.holds(namespace):
        return context.storage.reserved.refusal(f"topic '{kafka_name}'", namespace)
    return None


async def find_topic(
    context: KafkaContext, kafka_name: str, auto_create: bool, operation: str = DESCRIBE
) -> tuple[TopicRecord | None, int]:
    """(record, error code) for a name the connection's user wants to `operation` on;
    creates it when configured and the user may create it (else, as Kafka,
    TOPIC_AUTHORIZATION_FAILED)."""
    try:
        validate_kafka_name(kafka_name)
    except InvalidTopicName:
        return None, ErrorCode.INVALID_TOPIC_EXCEPTION
    if reserved_refusal(context, kafka_name) is not None:
        return None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if not topic_allowed(context, kafka_name, operation):
        return None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    name = context.pulsar_name(kafka_name)
    record = context.topics.get(name)
    if record is not None:
        return record, ErrorCode.NONE
    if not (auto_create and context.settings.auto_create_topics):
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not may_create_topic(context, kafka_name):
        return None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    settings = context.settings
    if context.topics.total_partitions() + settings.default_partitions > (
        settings.max_partitions_total
    ):
        # auto-creation counts against kafka.max_partitions_total as CreateTopics does, or a
        # client naming ever new topics would grow the partition count without bound
        log.warning(
            "not auto-creating a topic: %d more partitions would pass"
            " kafka.max_partitions_total (%d)",
            settings.default_partitions,
            settings.max_partitions_total,
        )
        return None, ErrorCode.POLICY_VIOLATION
    try:
        record = await context.topics.create(name, context.settings.default_partitions)
    except TopicExists:
        record = context.topics.get(name)
    return record, ErrorCode.NONE


NO_TOPIC_ID = uuid.UUID(int=0)  # one object for every answer without a topic id


def topic_uuid(record: TopicRecord | None) -> uuid.UUID:
    if record is None or not record.topic_id:
        return NO_TOPIC_ID
    return uuid.UUID(record.topic_id)


def topic_with_id(context: KafkaContext, topic_id: uuid.UUID | None) -> TopicRecord | None:
    """The topic whose Kafka topic id (KIP-516) is `topic_id`, if any."""
    if topic_id is None or topic_id == uuid.UUID(int=0):
        return None
    return next((r for r in context.topics.list() if topic_uuid(r) == topic_id), None)


async def open_partition(
    context: KafkaContext, record: TopicRecord | None, code: int, index: int
) -> PartitionLog | int:
    """Partition `index` of a topic `find_topic` answered (record, code), opened; else the
    error code a partition-level answer gives: the topic's own, UNKNOWN_TOPIC_OR_PARTITION
    for an index it does not have, NOT_LEADER_OR_FOLLOWER for one another cluster member
    serves, KAFKA_STORAGE_ERROR when it cannot be opened."""
    if record is None:
        return code
    if not 0 <= index < record.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not context.serves_partition(record.name, index):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER  # another cluster member serves it
    try:
        return await context.topics.partition_of(record, index)
    except StorageError:
        return ErrorCode.KAFKA_STORAGE_ERROR
