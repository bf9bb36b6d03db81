"""The console's Kafka view on the in-memory Kafka storage and the real group coordinator:
what a user may see and do, and offsets reset as kafka-consumer-groups resets them."""

from __future__ import annotations

import asyncio

import pytest

from harness.kafka_memory_store import memory_storage
from pulsar_gateway.console.kafka_view import ConsoleError, KafkaView
from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.handlers.http_login import HttpCaller
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.port import CommittedOffset
from pulsar_gateway.security.rights import GROUP, NAMESPACE, NO_RIGHTS, RightsTable, grant

ORDERS = "persistent://public/default/orders"
PAYMENTS = "persistent://public/team/payments"


def setup() -> tuple[KafkaView, HttpCaller, HttpCaller, GroupCoordinator]:
    storage = memory_storage()
    coordinator = GroupCoordinator(storage.offsets)
    view = KafkaView(storage, coordinator, None, "public", "default", "pulsar", 10)
    rights = grant(NO_RIGHTS, NAMESPACE, "public/team", ["describe", "read"])
    rights = grant(rights, GROUP, "team-*", ["read"])
    authorizer = Authorizer(RightsTable({"alice": rights}))
    admin = HttpCaller("guest", authorizer.unrestricted("http", "127.0.0.1", "guest"))
    alice = HttpCaller("alice", authorizer.bound("http", "127.0.0.1", "alice"))
    return view, admin, alice, coordinator


async def with_topics(view: KafkaView) -> None:
    await view.storage.topics.create(ORDERS, 2)
    await view.storage.topics.create(PAYMENTS, 1)


def test_a_user_sees_only_topics_and_groups_it_may_describe() -> None:
    async def scenario() -> None:
        view, admin, alice, _ = setup()
        await with_topics(view)
        await view.storage.offsets.commit(
            "billing", {partition_topic(ORDERS, 0): CommittedOffset(1)}
        )
        await view.storage.offsets.commit(
            "team-pay", {partition_topic(PAYMENTS, 0): CommittedOffset(0)}
        )
        assert [t["name"] for t in view.topics(admin)] == ["orders", "public/team/payments"]
        assert [t["name"] for t in view.topics(alice)] == ["public/team/payments"]
        with pytest.raises(ConsoleError) as refused:
            await view.topic(alice, "orders")
        assert refused.value.status == 404
        assert view.group_ids(admin) == ["billing", "team-pay"]
        assert view.group_ids(alice) == ["team-pay"]
        with pytest.raises(ConsoleError):
            await view.group(alice, "billing")
        assert (await view.group(alice, "team-pay"))["offsets"][0]["topic"] == (
            "public/team/payments"
        )

    asyncio.run(scenario())


def test_creating_a_topic_is_checked() -> None:
    async def scenario() -> None:
        view, admin, alice, _ = setup()
        cases = [
            (alice, "mine", 1, 403),  # no create right
            (admin, "bad name", 1, 400),
            (admin, "zero", 0, 400),
            (admin, "big", 11, 400),  # over max_partitions_total (10)
        ]
        for caller, name, partitions, status in cases:
            with pytest.raises(ConsoleError) as refused:
                await view.create_topic(caller, name, partitions)
            assert refused.value.status == status, name
        assert await view.create_topic(admin, "fine", 2) == {"created": "fine", "partitions": 2}
        with pytest.raises(ConsoleError) as exists:
            await view.create_topic(admin, "fine", 2)
        assert exists.value.status == 409

    asyncio.run(scenario())


def test_offsets_reset_to_earliest_latest_and_time() -> None:
    async def scenario() -> None:
        view, admin, alice, _ = setup()
        await with_topics(view)
        record = view.storage.topics.get(ORDERS)
        assert record is not None
        for index in range(2):
            log = await view.storage.topics.partition_of(record, index)
            log.log_start, log.next_offset = 2 + index, 7 + index
        for to, expected in (("earliest", {0: 2, 1: 3}), ("latest", {0: 7, 1: 8})):
            done = await view.reset_offsets(admin, "g", "orders", to, 0)
            assert done["offsets"] == expected
            stored = view.storage.offsets.offsets("g")
            assert {i: stored[partition_topic(ORDERS, i)].offset for i in range(2)} == expected
        # no record at or after the time: the end of each partition
        done = await view.reset_offsets(admin, "g", "orders", "timestamp", 1)
        assert done["offsets"] == {0: 7, 1: 8}
        for caller, group, topic, to, status in [
            (alice, "g", "orders", "latest", 403),  # not her group
            (alice, "team-x", "orders", "latest", 404),  # not her topic
            (admin, "g", "orders", "sideways", 400),
        ]:
            with pytest.raises(ConsoleError) as refused:
                await view.reset_offsets(caller, group, topic, to, 0)
            assert refused.value.status == status, (group, topic, to)

    asyncio.run(scenario())


def test_a_group_with_members_is_not_reset() -> None:
    async def scenario() -> None:
        view, admin, _, coordinator = setup()
        await with_topics(view)
        joined = await coordinator.join(
            "busy", "", None, "c", "/h", 6000, 6000, "consumer", [("range", b"")], False
        )
        assert joined.error == 0
        with pytest.raises(ConsoleError) as refused:
            await view.reset_offsets(admin, "busy", "orders", "latest", 0)
        assert refused.value.status == 409
        assert view.storage.offsets.offsets("busy") == {}

    asyncio.run(scenario())
