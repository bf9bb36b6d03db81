"""The share group offsets admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets) on the in-memory storage twin, beside share consumers spoken to
through the same dispatcher."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.kafka.port import ShareState
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Rights, RightsTable
from tests.unit.test_kafka_apis import TOPIC
from tests.unit.test_share_group_apis import ACCEPT, Share, acquired

STORED = f"{TOPIC}-partition-0"


async def describe(
    share: Share, topics: list[tuple[str, list[int]]] | None, version: int = 1, group: str = "g"
) -> dict[str, Any]:
    wanted = None if topics is None else [{"topic_name": t, "partitions": p} for t, p in topics]
    body = {"groups": [{"group_id": group, "topics": wanted}]}
    answer = await share.broker.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, body)
    (described,) = answer["groups"]
    return described


def partitions(described: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, lag, error code); lag -2 where the version has none."""
    return {
        (topic["topic_name"], part["partition_index"]): (
            part["start_offset"],
            part.get("lag", -2),
            part["error_code"],
        )
        for topic in described["topics"]
        for part in topic["partitions"]
    }


async def alter(share: Share, group: str, offsets: dict[tuple[str, int], int]) -> dict[str, Any]:
    topics: dict[str, list[dict[str, int]]] = {}
    for (topic, index), start in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": index, "start_offset": start})
    body = {
        "group_id": group,
        "topics": [{"topic_name": t, "partitions": p} for t, p in topics.items()],
    }
    return await share.broker.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body)


def altered(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (topic["topic_name"], part["partition_index"]): part["error_code"]
        for topic in answer["responses"]
        for part in topic["partitions"]
    }


async def delete(share: Share, group: str, topics: list[str]) -> dict[str, Any]:
    body = {"group_id": group, "topics": [{"topic_name": t} for t in topics]}
    return await share.broker.call(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, body)


async def half_read() -> tuple[Share, Any]:
    """Five records; member m1 accepted offsets 0 and 2 and holds 1."""
    share = Share()
    topic_id = await share.topic([b"r%d" % i for i in range(5)])
    await share.join("m1")
    assert acquired(await share.fetch("m1", topic_id)) == [(0, 2, 1)]
    await share.acknowledge("m1", topic_id, [(0, 0, ACCEPT), (2, 2, ACCEPT)])
    return share, topic_id


def test_describe_answers_the_start_the_lag_and_minus_one_where_the_group_never_read() -> None:
    async def scenario() -> None:
        share, _topic_id = await half_read()
        await share.broker.storage.topics.create(share.broker.context.pulsar_name("other"), 2)
        described = await describe(share, [("orders", [0, 5]), ("other", [1]), ("nope", [0])])
        assert described["error_code"] == ErrorCode.NONE
        # start 1 (offset 1 is held); lag: offsets 1, 3 and 4 are not settled
        assert partitions(described) == {
            ("orders", 0): (1, 3, ErrorCode.NONE),
            ("orders", 5): (-1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ("other", 1): (-1, -1, ErrorCode.NONE),
            ("nope", 0): (-1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        }
        # version 0 has no lag; null topics: every partition the group has read
        assert partitions(await describe(share, None, version=0)) == {
            ("orders", 0): (1, -2, ErrorCode.NONE)
        }
        unknown = await describe(share, None, group="never")
        assert unknown["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND

    asyncio.run(scenario())


def test_alter_needs_an_empty_group_and_the_group_starts_over_there() -> None:
    async def scenario() -> None:
        share, topic_id = await half_read()
        busy = await alter(share, "g", {("orders", 0): 4})
        assert busy["error_code"] == ErrorCode.NON_EMPTY_GROUP
        assert altered(busy) == {("orders", 0): ErrorCode.NON_EMPTY_GROUP}
        assert share.broker.storage.shares.load("g", STORED).start == 1  # unchanged
        await share.groups.leave("g", "m1")
        answer = await alter(share, "g", {("orders", 0): 4, ("orders", 3): 0, ("nope", 0): 0})
        assert answer["error_code"] == ErrorCode.NONE
        assert altered(answer) == {
            ("orders", 0): ErrorCode.NONE,
            ("orders", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert share.broker.storage.shares.load("g", STORED) == ShareState(4, 4)
        assert partitions(await describe(share, [("orders", [0])])) == {
            ("orders", 0): (4, 1, ErrorCode.NONE)
        }
        negative = await alter(share, "g", {("orders", 0): -3})
        assert altered(negative) == {("orders", 0): ErrorCode.INVALID_REQUEST}
        # a member joining now gets offset 4 only, as a first delivery
        share.epochs = {}
        await share.join("m2")
        assert acquired(await share.fetch("m2", topic_id)) == [(4, 4, 1)]

    asyncio.run(scenario())


def test_alter_positions_a_share_group_before_its_first_member() -> None:
    async def scenario() -> None:
        share, topic_id = await half_read()
        answer = await alter(share, "fresh", {("orders", 0): 3})
        assert altered(answer) == {("orders", 0): ErrorCode.NONE}
        assert partitions(await describe(share, None, group="fresh")) == {
            ("orders", 0): (3, 2, ErrorCode.NONE)
        }

    asyncio.run(scenario())


def test_delete_drops_the_state_and_the_group_starts_again_by_its_reset() -> None:
    async def scenario() -> None:
        share, topic_id = await half_read()
        busy = await delete(share, "g", ["orders"])
        assert busy["error_code"] == ErrorCode.NON_EMPTY_GROUP
        await share.groups.leave("g", "m1")
        answer = await delete(share, "g", ["orders", "nope"])
        assert answer["error_code"] == ErrorCode.NONE
        assert [(t["topic_name"], t["error_code"]) for t in answer["responses"]] == [
            ("orders", ErrorCode.NONE),
            ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert share.broker.storage.shares.load("g", STORED) is None
        described = await describe(share, [("orders", [0])])
        assert described["error_code"] == ErrorCode.NONE  # the group itself stays
        assert partitions(described) == {("orders", 0): (-1, -1, ErrorCode.NONE)}
        # share.auto.offset.reset=earliest: everything again, counted afresh
        share.epochs = {}
        await share.join("m2")
        assert acquired(await share.fetch("m2", topic_id)) == [(0, 2, 1)]
        missing = await delete(share, "never", ["orders"])
        assert missing["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND

    asyncio.run(scenario())


def test_rights_and_storage_failures_are_refused() -> None:
    async def scenario() -> None:
        share, _topic_id = await half_read()
        await share.groups.leave("g", "m1")
        context = share.broker.context
        rights = model.grant(Rights(), model.NAMESPACE, "public/default", ["all"])
        authorizer = Authorizer(RightsTable({"bob": rights}), superusers=[])
        share.broker.context = dataclasses.replace(
            context, authorizer=authorizer, access=authorizer.bound("kafka", "192.0.2.1:1", "bob")
        )
        assert (await describe(share, None))["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
        refused = await alter(share, "g", {("orders", 0): 0})
        assert refused["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert altered(refused) == {("orders", 0): ErrorCode.GROUP_AUTHORIZATION_FAILED}
        deleted = await delete(share, "g", ["orders"])
        assert deleted["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert share.broker.storage.shares.load("g", STORED).start == 1
        share.broker.context = context
        share.broker.storage.shares.broken = True
        down = await alter(share, "g", {("orders", 0): 0})
        assert altered(down) == {("orders", 0): ErrorCode.KAFKA_STORAGE_ERROR}
        assert (await delete(share, "g", ["orders"]))["responses"][0]["error_code"] == (
            ErrorCode.KAFKA_STORAGE_ERROR
        )
        share.broker.storage.shares.broken = False
        assert share.broker.storage.shares.load("g", STORED).start == 1

    asyncio.run(scenario())


def test_a_group_another_cluster_member_coordinates_is_not_answered_here() -> None:
    async def scenario() -> None:
        share, _topic_id = await half_read()
        await share.groups.leave("g", "m1")
        share.broker.context = dataclasses.replace(share.broker.context)
        share.broker.context.serves_group = lambda _group_id: False  # type: ignore[method-assign]
        assert (await describe(share, None))["error_code"] == ErrorCode.NOT_COORDINATOR
        assert (await alter(share, "g", {("orders", 0): 0}))["error_code"] == (
            ErrorCode.NOT_COORDINATOR
        )
        assert (await delete(share, "g", ["orders"]))["error_code"] == ErrorCode.NOT_COORDINATOR
        assert share.broker.storage.shares.load("g", STORED).start == 1

    asyncio.run(scenario())
