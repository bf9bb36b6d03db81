"""Metadata and DescribeTopicPartitions: every live gateway of the cluster is a broker, and
each partition is led by the member that serves it (docs/cluster.md; alone, this gateway,
node `kafka.node_id`), at leader epoch 0, its only replica (Pulsar replicates underneath).

DescribeTopicPartitions (KIP-966, what Kafka 4's `kafka-topics --describe` sends) pages
through partitions: at most `response_partition_limit` per answer (2000 by default, as Kafka
caps it), in topic-name then partition order, with a cursor to the next one; an empty topic
list means every topic.

As in Kafka, the list of all topics holds only those the user may describe, a topic named
but not describable is TOPIC_AUTHORIZATION_FAILED (asked for by its id: without its name),
and auto-creation needs CREATE."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pulsar_gateway.handlers.kafka.authorization import (
    authorized_operations,
    topic_allowed,
    topic_operations,
)
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import TopicRecord
from pulsar_gateway.handlers.kafka.topic_lookup import (
    NO_TOPIC_ID,
    find_topic,
    topic_uuid,
    topic_with_id,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import CLUSTER, CLUSTER_NAME, DESCRIBE


async def handle(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    identity = context.identity
    requested = request.get("topics")
    # v0: an empty list means all topics; v1+: null means all, empty means none
    all_topics = requested is None or (header.api_version == 0 and not requested)
    allow_create = request.get("allow_auto_topic_creation", True)
    operations = bool(request.get("include_topic_authorized_operations"))  # v8+, KIP-430
    topics = _Topics()
    name: str | None  # listed (a name) or asked for (maybe by id only)
    record: TopicRecord | None
    code: int
    if all_topics:
        async for record in context.turns.paced(context.topics.list()):
            name = context.kafka_name(record.name)
            if topic_allowed(context, name, DESCRIBE, audit=False):
                topics.append(_describe(context, name, record, ErrorCode.NONE, operations))
    else:
        # per topic: a lookup, a check of rights and a description, ~20-60 us: paced, so
        # that 99,999 names do not hold the loop (loop_turns.py)
        async for item in context.turns.paced(requested or ()):  # not all: a list
            name = item.get("name")
            if name is None:  # v10+: a topic asked for by its id (KIP-516)
                known = topic_with_id(context, item.get("topic_id"))
                name = None if known is None else context.kafka_name(known.name)
                code = ErrorCode.UNKNOWN_TOPIC_ID
                if name is not None and not topic_allowed(context, name, DESCRIBE):
                    # as Kafka: refused without the name, which the user may not learn
                    name, code = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if name is None:
                    topics.append(
                        {
                            "error_code": code,
                            "name": None,
                            "topic_id": item.get("topic_id"),
                            "partitions": [],
                        }
                    )
                    continue
            record, code = await find_topic(context, name, allow_create)
            topics.append(_describe(context, name, record, code, operations))
    asked = bool(request.get("include_cluster_authorized_operations"))  # v8-10
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": node, "host": host, "port": port, "rack": None}
            for node, host, port in context.brokers()
        ],
        "cluster_id": identity.cluster_id,
        "controller_id": identity.node_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            context, CLUSTER, CLUSTER_NAME, asked
        ),
    }


def _describe(
    context: KafkaContext, name: str, record: Any, code: int, operations: bool = False
) -> dict[str, Any] | tuple[str, int]:
    """A topic's row; for a topic that is not there (or not the user's), only its name and
    error, which `_Topics` turns into the row when the answer is encoded."""
    if record is None:
        return (name, code)
    row = _row(name, code, topic_uuid(record))
    row["partitions"] = _partitions(context, record.name, range(record.partitions))
    if operations and code == ErrorCode.NONE:
        row["topic_authorized_operations"] = topic_operations(context, name, True)
    return row


def _row(name: str, code: int, topic_id: Any = NO_TOPIC_ID) -> dict[str, Any]:
    # a topic that is not there shares its empty partitions and id with all the others
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": -2147483648,
    }


class _Topics(list):  # type: ignore[type-arg]
    """A Metadata answer's topics: the rows of topics that exist, and a (name, error) pair
    for each that does not, made a row only as the encoder reaches it (iteration and
    indexing give rows). A Metadata naming 99,999 absent topics held 99,999 rows of 136
    bytes while it was encoded (27 MB of small objects besides the request's own), and
    the allocator keeps that high-water mark: the hostile-clients test's resident memory
    ended 20-26% above where it started. A list, so that the listener sees how many
    entries the answer has (requests.py encodes a big one off the event loop); building
    a row takes nothing from the gateway's state, so that encoding may run on a thread."""

    def __iter__(self) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        for item in list.__iter__(self):
            yield _row(*item) if isinstance(item, tuple) else item

    def __getitem__(self, index: Any) -> Any:
        item = list.__getitem__(self, index)
        if isinstance(index, slice):
            return [_row(*one) if isinstance(one, tuple) else one for one in item]
        return _row(*item) if isinstance(item, tuple) else item


def _partitions(context: KafkaContext, topic: str, indexes: Iterable[int]) -> list[dict[str, Any]]:
    """One row per partition: led by the member serving it, its only replica, in sync,
    epoch 0."""
    rows = []
    for index in indexes:
        node = context.leader_of(topic, index)
        rows.append(
            {
                "error_code": 0,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
        )
    return rows


PARTITION_LIMIT = 2000  # Kafka's max.request.partition.size.limit default


async def describe_topic_partitions(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    asked = request.get("response_partition_limit") or PARTITION_LIMIT
    budget = max(1, min(asked, PARTITION_LIMIT))
    described: list[tuple[str, TopicRecord | None, int]] = []
    record: TopicRecord | None
    if not request["topics"]:
        async for record in context.turns.paced(context.topics.list()):
            name = context.kafka_name(record.name)
            if topic_allowed(context, name, DESCRIBE, audit=False):
                described.append((name, record, ErrorCode.NONE))
    else:
        names = sorted({item["name"] for item in request["topics"]})
        async for name in context.turns.paced(names):
            record, code = await find_topic(context, name, auto_create=False)
            described.append((name, record, code))
    described.sort(key=lambda item: item[0])
    cursor = request.get("cursor")
    at_topic, at_partition = ("", 0) if cursor is None else (cursor["topic_name"], 0)
    if cursor is not None:
        at_partition = cursor["partition_index"]
        if at_topic not in {name for name, _, _ in described}:
            # Kafka refuses a cursor outside the request the same way, topic by topic
            return {
                "throttle_time_ms": 0,
                "topics": [
                    _paged(context, name, None, ErrorCode.INVALID_REQUEST, [])
                    for name, _, _ in described
                ],
                "next_cursor": None,
            }
    topics: list[dict[str, Any]] = []
    for name, record, code in described:
        if name < at_topic:
            continue
        first = at_partition if name == at_topic else 0
        count = record.partitions if record is not None else 0
        indexes = list(range(first, count))
        if budget == 0 and indexes:
            return {
                "throttle_time_ms": 0,
                "topics": topics,
                "next_cursor": {"topic_name": name, "partition_index": first},
            }
        taken, rest = indexes[:budget], indexes[budget:]
        budget -= len(taken)
        topics.append(_paged(context, name, record, code, taken))
        if rest:
            return {
                "throttle_time_ms": 0,
                "topics": topics,
                "next_cursor": {"topic_name": name, "partition_index": rest[0]},
            }
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": None}


def _paged(
    context: KafkaContext, name: str, record: TopicRecord | None, code: int, indexes: list[int]
) -> dict[str, Any]:
    topic = _row(name, code, topic_uuid(record))
    topic["partitions"] = [
        {**row, "eligible_leader_replicas": None, "last_known_elr": None}
        for row in _partitions(context, record.name if record else "", indexes)
    ]
    return topic
