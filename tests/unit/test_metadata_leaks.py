"""Nothing of another tenant's topics reaches a user who may not describe them (issue 33): a
KIP-848 subscription naming or matching them is assigned nothing of them, Metadata and
DeleteTopics by topic id answer without the name. Before, the heartbeat's assignment
carried the other tenant's topic ids and partition counts, and Metadata by id then gave
the names."""

from __future__ import annotations

import uuid
from typing import Any

from pulsar_gateway.handlers.kafka.consumer_groups import ConsumerGroups
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security import rights as model
from tests.unit.test_authorization import A_TOPIC, B_TOPIC, Guarded
from tests.unit.test_kafka_apis import run

GROUP = "a-shared"  # alice may read groups a-*


def _heartbeat(member: str, epoch: int, topics: list[str] | None, regex: str | None = None):
    return {
        "group_id": GROUP,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": regex,
        "server_assignor": None,
        "topic_partitions": None,
    }


async def _ready() -> tuple[Guarded, dict[str, str]]:
    broker = Guarded("root")
    broker.context.consumer_groups = ConsumerGroups()
    ids = {}
    for name, partitions in ((A_TOPIC, 2), (B_TOPIC, 3)):
        record = await broker.storage.topics.create(broker.context.pulsar_name(name), partitions)
        ids[name] = str(uuid.UUID(record.topic_id))
    return broker, ids


def _assigned(answer: dict[str, Any]) -> dict[str, list[int]]:
    rows = (answer["assignment"] or {}).get("topic_partitions") or []
    return {str(row["topic_id"]): row["partitions"] for row in rows}


def test_a_consumer_subscription_gets_nothing_of_topics_it_may_not_describe() -> None:
    async def scenario() -> None:
        broker, ids = await _ready()
        broker.login("alice")
        named = await broker.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat("m-a", 0, [A_TOPIC, B_TOPIC])
        )
        assert named["error_code"] == ErrorCode.NONE
        assert _assigned(named) == {ids[A_TOPIC]: [0, 1]}
        matched = await broker.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat("m-r", 0, None, regex="team-.*")
        )
        assert ids[B_TOPIC] not in str(matched)
        # a member of another user in the same group gets its own topic, and alice's
        # heartbeats do not take it away
        await broker.table.set_rights(
            "bob",
            model.grant(
                model.grant(model.Rights(), model.NAMESPACE, "team-b/orders", ["read"]),
                model.GROUP,
                "a-*",
                ["read"],
            ),
        )
        broker.login("bob")
        bob = await broker.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat("m-b", 0, [B_TOPIC]))
        assert _assigned(bob) == {ids[B_TOPIC]: [0, 1, 2]}
        broker.login("alice")
        again = await broker.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _heartbeat("m-a", named["member_epoch"], None)
        )
        assert again["error_code"] == ErrorCode.NONE
        group = broker.context.consumer_groups.describe(GROUP)
        assert group is not None and group.target["m-b"] == {B_TOPIC: {0, 1, 2}}
        # describing the group would name bob's topic to alice: refused, as Kafka does
        described = await broker.call(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [GROUP], "include_authorized_operations": False},
        )
        (entry,) = described["groups"]
        assert entry["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert entry["members"] == [] and B_TOPIC not in str(described)

    run(scenario)


def test_metadata_and_delete_topics_by_id_do_not_name_what_the_user_may_not_describe() -> None:
    async def scenario() -> None:
        broker, ids = await _ready()
        broker.login("alice")
        unknown = str(uuid.uuid4())
        asked = [{"topic_id": uuid.UUID(ids[n]), "name": None} for n in (A_TOPIC, B_TOPIC)]
        asked.append({"topic_id": uuid.UUID(unknown), "name": None})
        answer = await broker.call(
            ApiKey.METADATA,
            12,
            {
                "topics": asked,
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        found = [(t["error_code"], t["name"], str(t["topic_id"])) for t in answer["topics"]]
        assert found == [
            (ErrorCode.NONE, A_TOPIC, ids[A_TOPIC]),
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, ids[B_TOPIC]),
            (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown),
        ]
        deleted = await broker.call(
            ApiKey.DELETE_TOPICS,
            6,
            {"topics": [{"name": None, "topic_id": uuid.UUID(ids[B_TOPIC])}], "timeout_ms": 1000},
        )
        (result,) = deleted["responses"]
        assert (result["error_code"], result["name"]) == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            None,
        )
        assert B_TOPIC not in str(deleted)
        assert broker.context.topics.get(broker.context.pulsar_name(B_TOPIC)) is not None

    run(scenario)
