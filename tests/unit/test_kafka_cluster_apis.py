"""The Kafka APIs in a cluster (docs/cluster.md), on the in-memory storage: brokers and
leaders in Metadata, coordinators in FindCoordinator, NOT_LEADER_OR_FOLLOWER and
NOT_COORDINATOR for what another member serves."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from harness.cluster_view import FixedView, member
from harness.kafka_memory_store import memory_storage
from pulsar_gateway.gateway.cluster.view import group_key, partition_key, txn_key
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.context import BrokerIdentity, KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.port import CommittedOffset
from pulsar_gateway.handlers.kafka.requests import answer
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import Record, encode_batch

ME, OTHER = member("a", 1, 9101), member("b", 2, 9102)
TOPIC = "orders"


class Member:
    """One cluster member's Kafka context on memory storage, spoken to in request bytes."""

    def __init__(self) -> None:
        self.view = FixedView(ME, [OTHER])
        storage = dataclasses.replace(memory_storage(), cluster=self.view)
        self.context = KafkaContext(
            KafkaSection(default_partitions=12),
            storage,
            BrokerIdentity(ME.node_id, "a.test", 9101, "cluster-x"),
            GroupCoordinator(storage.offsets),
        )
        # as the listener wires it (server.py)
        self.context.groups.serves = self.context.serves_group
        self.view.on_change(self.context.groups.drop_unserved)
        self.correlation = 0

    async def call(self, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation += 1
        frame = memoryview(protocol.encode_request(api, version, self.correlation, "t", body)[4:])
        response = await answer(self.context, protocol.parse_request_header(frame), frame)
        assert response is not None
        return protocol.decode_response(api, version, memoryview(response)[4:])

    def mine(self, partitions: range) -> tuple[int, int]:
        """A partition this member serves and one the other serves."""
        owners = {p: self.view.owner(partition_key(TOPIC, p)) for p in partitions}
        return (
            next(p for p, m in owners.items() if m == ME),
            next(p for p, m in owners.items() if m == OTHER),
        )

    async def produce(self, partition: int) -> dict[str, Any]:
        batch = encode_batch(0, [Record(0, 1000, b"k", b"v", [])])
        body = {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}
            ],
        }
        response = await self.call(ApiKey.PRODUCE, 9, body)
        return response["responses"][0]["partition_responses"][0]

    async def metadata(self) -> dict[str, Any]:
        body = {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": True}
        return await self.call(ApiKey.METADATA, 12, body)


def run(scenario: Any) -> None:
    asyncio.run(scenario())


def group_owned_by(view: FixedView, owner: Any) -> str:
    return next(f"g{i}" for i in range(1000) if view.owner(group_key(f"g{i}")) == owner)


def test_metadata_lists_every_member_and_leads_each_partition_by_its_owner() -> None:
    async def scenario() -> None:
        node = Member()
        response = await node.metadata()
        brokers = {(b["node_id"], b["host"], b["port"]) for b in response["brokers"]}
        assert brokers == {(1, "a.test", 9101), (2, "b.test", 9102)}
        partitions = response["topics"][0]["partitions"]
        assert len(partitions) == 12
        for row in partitions:
            owner = node.view.owner(partition_key(TOPIC, row["partition_index"]))
            assert row["leader_id"] == owner.node_id
            assert row["replica_nodes"] == row["isr_nodes"] == [owner.node_id]
        assert {row["leader_id"] for row in partitions} == {1, 2}

    run(scenario)


def test_find_coordinator_names_the_owner_of_group_and_transaction_keys() -> None:
    async def scenario() -> None:
        node = Member()
        keys = [f"k{i}" for i in range(8)]
        for key_type, key_of in ((0, group_key), (1, txn_key)):
            body = {"key_type": key_type, "coordinator_keys": keys}
            response = await node.call(ApiKey.FIND_COORDINATOR, 4, body)
            for answered in response["coordinators"]:
                owner = node.view.owner(key_of(answered["key"]))
                assert (answered["node_id"], answered["port"]) == (
                    owner.node_id,
                    owner.kafka_port,
                )
            assert {c["node_id"] for c in response["coordinators"]} == {1, 2}
        group = group_owned_by(node.view, OTHER)
        single = await node.call(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        assert (single["node_id"], single["host"]) == (2, "b.test")

    run(scenario)


def test_partitions_another_member_serves_answer_not_leader() -> None:
    async def scenario() -> None:
        node = Member()
        await node.metadata()  # creates the topic
        mine, theirs = node.mine(range(12))
        assert (await node.produce(mine))["error_code"] == ErrorCode.NONE
        refused = await node.produce(theirs)
        assert refused["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        record = node.context.topics.get(node.context.pulsar_name(TOPIC))
        log = await node.context.topics.partition_of(record, theirs)
        assert log.next_offset == 0  # nothing stored
        listed = await node.call(
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                            for p in (mine, theirs)
                        ],
                    }
                ],
            },
        )
        codes = [p["error_code"] for p in listed["topics"][0]["partitions"]]
        assert codes == [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER]
        fetch = await node.call(
            ApiKey.FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": TOPIC,
                        "partitions": [
                            {
                                "partition": theirs,
                                "current_leader_epoch": -1,
                                "fetch_offset": 0,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        code = fetch["responses"][0]["partitions"][0]["error_code"]
        assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        deleted = await node.call(
            ApiKey.DELETE_RECORDS,
            2,
            {
                "topics": [
                    {"name": TOPIC, "partitions": [{"partition_index": theirs, "offset": 0}]}
                ],
                "timeout_ms": 1000,
            },
        )
        code = deleted["topics"][0]["partitions"][0]["error_code"]
        assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        epochs = await node.call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": TOPIC,
                        "partitions": [
                            {"partition": theirs, "current_leader_epoch": -1, "leader_epoch": 0}
                        ],
                    }
                ],
            },
        )
        code = epochs["topics"][0]["partitions"][0]["error_code"]
        assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario)


def test_a_member_whose_lease_is_stale_serves_nothing() -> None:
    async def scenario() -> None:
        node = Member()
        await node.metadata()
        mine, _ = node.mine(range(12))
        node.view.set_members([OTHER], serving=False)
        refused = await node.produce(mine)
        assert refused["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario)


def join_body(group: str, member_id: str = "") -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "reason": None,
    }


def test_group_apis_for_a_group_another_member_coordinates_answer_not_coordinator() -> None:
    async def scenario() -> None:
        node = Member()
        group = group_owned_by(node.view, OTHER)
        joined = await node.call(ApiKey.JOIN_GROUP, 9, join_body(group))
        assert joined["error_code"] == ErrorCode.NOT_COORDINATOR
        member_body = {"group_id": group, "generation_id": 1, "member_id": "m"}
        beat = await node.call(ApiKey.HEARTBEAT, 4, {**member_body, "group_instance_id": None})
        assert beat["error_code"] == ErrorCode.NOT_COORDINATOR
        synced = await node.call(
            ApiKey.SYNC_GROUP,
            5,
            {
                **member_body,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [],
            },
        )
        assert synced["error_code"] == ErrorCode.NOT_COORDINATOR
        left = await node.call(
            ApiKey.LEAVE_GROUP,
            5,
            {"group_id": group, "members": [{"member_id": "m", "group_instance_id": None}]},
        )
        assert left["error_code"] == ErrorCode.NOT_COORDINATOR
        committed = await node.call(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 5,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        codes = {p["error_code"] for t in committed["topics"] for p in t["partitions"]}
        assert codes == {ErrorCode.NOT_COORDINATOR}
        assert not node.context.offsets.has_offsets(group)  # nothing stored
        fetched = await node.call(
            ApiKey.OFFSET_FETCH,
            8,
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
        )
        assert fetched["groups"][0]["error_code"] == ErrorCode.NOT_COORDINATOR
        described = await node.call(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
        )
        assert described["groups"][0]["error_code"] == ErrorCode.NOT_COORDINATOR
        deleted = await node.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
        assert deleted["results"][0]["error_code"] == ErrorCode.NOT_COORDINATOR
        offsets_deleted = await node.call(
            ApiKey.OFFSET_DELETE,
            0,
            {
                "group_id": group,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}],
            },
        )
        assert offsets_deleted["error_code"] == ErrorCode.NOT_COORDINATOR

    run(scenario)


def test_list_groups_lists_only_the_groups_this_member_coordinates() -> None:
    async def scenario() -> None:
        node = Member()
        ours, theirs = group_owned_by(node.view, ME), group_owned_by(node.view, OTHER)
        partition = "persistent://public/default/orders-partition-0"
        # both groups' commits are known here (a member follows the others' commits)
        for group in (ours, theirs):
            await node.context.offsets.commit(group, {partition: CommittedOffset(3)})
        listed = await node.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert [g["group_id"] for g in listed["groups"]] == [ours]

    run(scenario)


def test_a_group_that_moves_away_is_dropped_and_its_waiters_told() -> None:
    async def scenario() -> None:
        node = Member()
        group = group_owned_by(node.view, ME)
        first = await node.call(ApiKey.JOIN_GROUP, 9, join_body(group))
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        joined = await node.call(ApiKey.JOIN_GROUP, 9, join_body(group, first["member_id"]))
        assert joined["error_code"] == ErrorCode.NONE
        # a second member joining waits for the rebalance; then the group moves away
        waiting = asyncio.ensure_future(node.call(ApiKey.JOIN_GROUP, 3, join_body(group, "")))
        await asyncio.sleep(0)
        others = [OTHER]
        extra = next(
            m
            for m in (member(f"c{i}", 3 + i) for i in range(100))
            if FixedView(ME, [OTHER, m]).owner(group_key(group)) == m
        )
        others.append(extra)
        node.view.set_members(others)
        answered = await asyncio.wait_for(waiting, 5)
        assert answered["error_code"] == ErrorCode.NOT_COORDINATOR
        assert group not in node.context.groups.groups
        beat = await node.call(
            ApiKey.HEARTBEAT,
            4,
            {
                "group_id": group,
                "generation_id": joined["generation_id"],
                "member_id": first["member_id"],
                "group_instance_id": None,
            },
        )
        assert beat["error_code"] == ErrorCode.NOT_COORDINATOR

    run(scenario)
