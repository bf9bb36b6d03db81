"""Transactional ids are authorized as Kafka does (issue 33): a user without WRITE on an id
cannot use it, so cannot fence another user's producer or touch its transaction; without
DESCRIBE it cannot find the id's coordinator or see its transaction. Before, any user who
could produce idempotently could take any transactional id over."""

from __future__ import annotations

import dataclasses
from typing import Any

from pulsar_gateway.handlers.authorization import Authorizer
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Rights, RightsTable
from tests.unit.test_kafka_apis import TOPIC, run
from tests.unit.test_kafka_transactions import TXN_ID, TxnBroker

REFUSED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _rights(*transactional_ids: str) -> Rights:
    rights = model.grant(Rights(), model.NAMESPACE, "public/default", ["all"])
    rights = model.grant(rights, model.GROUP, "*", ["read", "describe"])
    for pattern in transactional_ids:
        rights = model.grant(rights, model.TRANSACTIONAL_ID, pattern, ["write"])
    return rights


class Users(TxnBroker):
    """The transaction broker with connections bound by the table's rights: alice may use
    the ids `orders-*` (TXN_ID is one), bob may write the same topics but has no id."""

    def __init__(self) -> None:
        super().__init__()
        self.table = RightsTable({"alice": _rights("orders-*"), "bob": _rights("bob.*")})
        self.authorizer = Authorizer(self.table)
        self.login("alice")

    def login(self, user: str) -> None:
        access = self.authorizer.bound("kafka", "192.0.2.1:5000", user)
        self.context = dataclasses.replace(self.context, authorizer=self.authorizer, access=access)


async def _find(broker: Users, key: str) -> int:
    body = {"key_type": 1, "coordinator_keys": [key]}
    return (await broker.call(ApiKey.FIND_COORDINATOR, 4, body))["coordinators"][0]["error_code"]


async def _describe(broker: Users) -> dict[str, Any]:
    body = {"transactional_ids": [TXN_ID]}
    return (await broker.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, body))["transaction_states"][0]


async def _listed(broker: Users) -> list[str]:
    body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
    answer = await broker.call(ApiKey.LIST_TRANSACTIONS, 1, body)
    assert answer["error_code"] == ErrorCode.NONE
    return [state["transactional_id"] for state in answer["transaction_states"]]


def test_another_users_transactional_id_is_refused_and_its_producer_not_fenced() -> None:
    async def scenario() -> None:
        broker = Users()
        await broker.storage.topics.create(TOPIC, 1)
        alice = await broker.init()
        assert alice["error_code"] == ErrorCode.NONE
        assert await broker.add(alice) == ErrorCode.NONE
        assert (await broker.send(alice, [b"a1"]))["error_code"] == ErrorCode.NONE

        broker.login("bob")
        taken = await broker.init()
        assert (taken["error_code"], taken["producer_id"]) == (REFUSED, -1)
        assert await broker.add(alice) == REFUSED
        assert await broker.add_offsets(alice, "g") == REFUSED
        assert await broker.commit_offset(alice, "g", 1) == REFUSED
        produced = await broker.send(alice, [b"bob's"], sequence=1)
        assert produced["error_code"] == REFUSED
        assert await broker.end(alice, commit=False) == REFUSED
        assert await _find(broker, TXN_ID) == REFUSED
        refused = await _describe(broker)
        assert (refused["error_code"], refused["topics"], refused["producer_id"]) == (
            REFUSED,
            [],
            -1,
        )
        assert await _listed(broker) == []
        assert await _find(broker, "bob.tx") == ErrorCode.NONE  # its own ids are fine

        broker.login("alice")  # her producer was not fenced: her transaction goes on
        assert await _find(broker, TXN_ID) == ErrorCode.NONE
        described = await _describe(broker)
        assert described["error_code"] == ErrorCode.NONE
        assert described["topics"] == [{"topic": "orders", "partitions": [0]}]
        assert await _listed(broker) == [TXN_ID]
        assert await broker.end(alice, commit=True) == ErrorCode.NONE

        # granted, bob may use the id (and so fence alice, as Kafka lets WRITE do)
        await broker.table.set_rights("bob", _rights("bob.*", TXN_ID))
        broker.login("bob")
        assert (await broker.init())["error_code"] == ErrorCode.NONE

    run(scenario)


def test_described_transactions_leave_out_topics_the_user_may_not_describe() -> None:
    async def scenario() -> None:
        broker = Users()
        await broker.storage.topics.create(TOPIC, 1)
        alice = await broker.init()
        assert await broker.add(alice) == ErrorCode.NONE
        # carol may describe the id but not the topic's namespace
        carol = model.grant(Rights(), model.TRANSACTIONAL_ID, "orders-*", ["describe"])
        await broker.table.set_rights("carol", carol)
        broker.login("carol")
        described = await _describe(broker)
        assert described["error_code"] == ErrorCode.NONE
        assert described["topics"] == []

    run(scenario)
