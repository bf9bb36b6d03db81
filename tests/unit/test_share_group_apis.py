"""Share group APIs (KIP-932) on the in-memory storage twin: request bytes through the one
dispatcher, a clock the test moves, no broker."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pulsar_gateway.gateway.messages import RECORDS, LogEntry, StoredMessage
from pulsar_gateway.handlers.kafka.apis.share_fetch import _present
from pulsar_gateway.handlers.kafka.consumer_groups import ConsumerGroups
from pulsar_gateway.handlers.kafka.share_groups import ShareGroups, ShareSettings
from pulsar_gateway.handlers.kafka.topic_lookup import topic_uuid
from pulsar_gateway.kafka_codec.control_batch import MARKER, TXN
from pulsar_gateway.kafka_codec.entry_format import BATCH
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import decode_batches, encode_batch
from tests.unit.test_kafka_apis import TOPIC, Broker

ACCEPT, RELEASE, REJECT = 1, 2, 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Share:
    """A broker with share groups, and one share consumer's view of the wire."""

    def __init__(self, **settings: Any) -> None:
        self.broker = Broker()
        self.clock = Clock()
        options = {"auto_offset_reset": "earliest", "record_lock_ms": 10000, **settings}
        self.groups = ShareGroups(self.broker.storage.shares, ShareSettings(**options), self.clock)
        self.broker.context.share_groups = self.groups
        assert self.broker.storage.group_configs is not None
        self.groups.group_configs = self.broker.storage.group_configs.get
        self.epochs: dict[str, int] = {}

    async def topic(self, values: list[bytes]) -> uuid.UUID:
        await self.broker.storage.topics.create(TOPIC, 1)
        await self.broker.produce("orders", values)
        return topic_uuid(self.broker.storage.topics.get(TOPIC))

    async def join(self, member: str) -> dict[str, Any]:
        body = {
            "group_id": "g",
            "member_id": member,
            "member_epoch": 0,
            "rack_id": None,
            "subscribed_topic_names": ["orders"],
        }
        return await self.broker.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, body)

    async def fetch(
        self, member: str, topic_id: uuid.UUID, acks: list[tuple[int, int, int]] = ()
    ) -> dict[str, Any]:
        epoch = self.epochs.get(member, 0)
        self.epochs[member] = epoch + 1
        body = {
            "group_id": "g",
            "member_id": member,
            "share_session_epoch": epoch,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 3,
            "batch_size": 3,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": f, "last_offset": la, "acknowledge_types": [k]}
                                for f, la, k in acks
                            ],
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }
        return await self.broker.call(ApiKey.SHARE_FETCH, 1, body)

    async def acknowledge(
        self, member: str, topic_id: uuid.UUID, acks: list[tuple[int, int, int]]
    ) -> dict[str, Any]:
        epoch = self.epochs[member]
        self.epochs[member] = epoch + 1
        body = {
            "group_id": "g",
            "member_id": member,
            "share_session_epoch": epoch,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": f, "last_offset": la, "acknowledge_types": [k]}
                                for f, la, k in acks
                            ],
                        }
                    ],
                }
            ],
        }
        return await self.broker.call(ApiKey.SHARE_ACKNOWLEDGE, 1, body)


def acquired(response: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [
        (a["first_offset"], a["last_offset"], a["delivery_count"])
        for topic in response["responses"]
        for part in topic["partitions"]
        for a in part["acquired_records"]
    ]


def values(response: dict[str, Any]) -> list[bytes]:
    out = []
    for topic in response["responses"]:
        for part in topic["partitions"]:
            for batch in decode_batches(part["records"] or b""):
                out.extend(record.value for record in batch.records)
    return out


def test_heartbeat_assigns_every_member_the_partition_and_describe_lists_them() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"a"])
        first, second = await share.join("m1"), await share.join("m2")
        for answer in (first, second):
            assert answer["error_code"] == ErrorCode.NONE
            assert answer["assignment"]["topic_partitions"] == [
                {"topic_id": topic_id, "partitions": [0]}
            ]
        assert second["member_epoch"] == 2
        body = {"group_ids": ["g", "nope"], "include_authorized_operations": False}
        described = await share.broker.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, body)
        group, missing = described["groups"]
        assert group["group_state"] == "Stable"
        assert sorted(m["member_id"] for m in group["members"]) == ["m1", "m2"]
        assert missing["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        stale = {
            "group_id": "g",
            "member_id": "m1",
            "member_epoch": 7,
            "rack_id": None,
            "subscribed_topic_names": None,
        }
        fenced = await share.broker.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, stale)
        assert fenced["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH

    asyncio.run(scenario())


def test_two_members_split_records_and_a_lapsed_lock_redelivers() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"r%d" % i for i in range(5)])
        await share.join("m1")
        await share.join("m2")
        one = await share.fetch("m1", topic_id)
        two = await share.fetch("m2", topic_id)
        assert acquired(one) == [(0, 2, 1)] and acquired(two) == [(3, 4, 1)]
        assert one["acquisition_lock_timeout_ms"] == 10000
        assert values(two)[-2:] == [b"r3", b"r4"]
        done = await share.fetch("m1", topic_id, acks=[(0, 2, ACCEPT)])
        assert acquired(done) == []
        share.clock.now += 10.0  # m2 never acknowledged: its lock lapses
        again = await share.fetch("m1", topic_id)
        assert acquired(again) == [(3, 4, 2)]
        assert share.groups.partitions[("g", TOPIC, 0)].start == 3

    asyncio.run(scenario())


def test_release_redelivers_reject_does_not_and_the_state_is_stored() -> None:
    async def scenario() -> None:
        share = Share(delivery_count_limit=2)
        topic_id = await share.topic([b"x", b"y", b"z"])
        await share.join("m1")
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 2, 1)]
        answer = await share.acknowledge("m1", topic_id, [(0, 0, RELEASE), (1, 1, REJECT)])
        assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 0, 2)]
        await share.acknowledge("m1", topic_id, [(0, 0, RELEASE)])  # its last delivery
        assert acquired(await share.fetch("m1", topic_id)) == []
        stored = share.broker.storage.shares.load("g", f"{TOPIC}-partition-0")
        assert stored is not None and stored.start == 2 and stored.end == 3
        # acknowledging what another member holds, or twice, is INVALID_RECORD_STATE
        wrong = await share.acknowledge("m1", topic_id, [(1, 1, ACCEPT)])
        assert wrong["responses"][0]["partitions"][0]["error_code"] == (
            ErrorCode.INVALID_RECORD_STATE
        )

    asyncio.run(scenario())


def test_sessions_refuse_a_wrong_epoch_and_closing_releases() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x"])
        await share.join("m1")
        share.epochs["m1"] = 5
        lost = await share.fetch("m1", topic_id)
        assert lost["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
        share.epochs["m1"] = 0
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 0, 1)]
        share.epochs["m1"] = 9
        assert (await share.fetch("m1", topic_id))["error_code"] == (
            ErrorCode.INVALID_SHARE_SESSION_EPOCH
        )
        share.epochs["m1"] = -1
        await share.fetch("m1", topic_id)  # closes the session: m1's record is released
        share.epochs["m2"] = 0
        await share.join("m2")
        assert acquired(await share.fetch("m2", topic_id)) == [(0, 0, 2)]

    asyncio.run(scenario())


def test_a_restarted_gateway_restores_counts_from_the_store() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x", b"y"])
        await share.join("m1")
        await share.fetch("m1", topic_id, acks=[])
        await share.fetch("m1", topic_id, acks=[(0, 0, ACCEPT)])
        # a new coordinator on the same storage: offset 1 was held, its lock is gone
        again = ShareGroups(share.broker.storage.shares, share.groups.settings, share.clock)
        share.broker.context.share_groups = again
        share.groups = again
        share.epochs = {}
        await share.join("m1")
        assert acquired(await share.fetch("m1", topic_id)) == [(1, 1, 2)]

    asyncio.run(scenario())


def test_a_partition_served_elsewhere_is_forgotten_and_read_again_from_the_store() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x", b"y"])
        await share.join("m1")
        await share.fetch("m1", topic_id)
        await share.fetch("m1", topic_id, acks=[(0, 0, ACCEPT)])
        served = {"here": False}
        share.groups.serves_partition = lambda _topic, _index: served["here"]
        share.groups.drop_unserved()
        assert share.groups.partitions == {}
        served["here"] = True
        share.epochs["m1"] = 0
        assert acquired(await share.fetch("m1", topic_id)) == [(1, 1, 2)]

    asyncio.run(scenario())


def test_hostile_requests_stay_bounded() -> None:
    """An acknowledgement spanning 2**62 offsets is refused at once; sessions are capped
    (the least recently used is evicted); an unknown topic id is answered, not kept; a group
    that lost its members is swept from memory."""

    async def scenario() -> None:
        share = Share(max_sessions=2)
        topic_id = await share.topic([b"x"])
        await share.join("m1")
        await share.fetch("m1", topic_id)
        huge = await share.acknowledge("m1", topic_id, [(0, 2**62, ACCEPT)])
        assert huge["responses"][0]["partitions"][0]["error_code"] == (
            ErrorCode.INVALID_RECORD_STATE
        )
        for member in ("m2", "m3"):
            await share.join(member)
            await share.fetch(member, topic_id)
        assert len(share.groups.sessions) == 2 and ("g", "m1") not in share.groups.sessions
        assert (await share.fetch("m1", topic_id))["error_code"] == (
            ErrorCode.SHARE_SESSION_NOT_FOUND
        )
        share.epochs["m4"] = 0
        stranger = await share.fetch("m4", uuid.uuid4())
        parts = stranger["responses"][0]["partitions"]
        assert parts[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
        assert share.groups.sessions[("g", "m4")].partitions == set()
        for member in ("m1", "m2", "m3"):
            await share.groups.leave("g", member)
        for key in list(share.groups.sessions):
            await share.groups.close_session(*key)
        await share.groups.sweep()
        assert share.groups.groups == {} and share.groups.partitions == {}

    asyncio.run(scenario())


async def alter_group(share: Share, changes: list[tuple[str, int, str | None]]) -> dict:
    body = {
        "resources": [
            {
                "resource_type": 32,
                "resource_name": "g",
                "configs": [
                    {"name": n, "config_operation": op, "value": v} for n, op, v in changes
                ],
            }
        ],
        "validate_only": False,
    }
    return (await share.broker.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body))["responses"][0]


def test_group_configs_set_the_lock_and_the_start_of_a_share_group() -> None:
    async def scenario() -> None:
        share = Share(auto_offset_reset="latest")
        topic_id = await share.topic([b"old"])
        done = await alter_group(
            share,
            [
                ("share.auto.offset.reset", 0, "earliest"),
                ("share.record.lock.duration.ms", 0, "2000"),
            ],
        )
        assert done["error_code"] == ErrorCode.NONE
        body = {
            "resources": [{"resource_type": 32, "resource_name": "g", "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        }
        described = await share.broker.call(ApiKey.DESCRIBE_CONFIGS, 4, body)
        values = {c["name"]: c["value"] for c in described["results"][0]["configs"]}
        assert values["share.auto.offset.reset"] == "earliest"
        assert values["share.record.lock.duration.ms"] == "2000"
        await share.join("m1")
        fetched = await share.fetch("m1", topic_id)
        assert acquired(fetched) == [(0, 0, 1)]  # earliest: the record before the group
        assert fetched["acquisition_lock_timeout_ms"] == 2000
        share.clock.now += 2.0
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 0, 2)]
        unknown = await alter_group(share, [("share.nonsense", 0, "1")])
        assert unknown["error_code"] == ErrorCode.INVALID_CONFIG
        wrong = await alter_group(share, [("share.auto.offset.reset", 0, "sometime")])
        assert wrong["error_code"] == ErrorCode.INVALID_CONFIG
        await alter_group(share, [("share.auto.offset.reset", 1, None)])
        assert share.broker.storage.group_configs.get("g") == {
            "share.record.lock.duration.ms": "2000"
        }

    asyncio.run(scenario())


def test_share_groups_are_listed_and_deleted_when_empty() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x"])
        await share.join("m1")
        await share.fetch("m1", topic_id, acks=[])
        body = {"states_filter": [], "types_filter": ["share"]}
        listed = await share.broker.call(ApiKey.LIST_GROUPS, 5, body)
        assert [(g["group_id"], g["group_type"], g["group_state"]) for g in listed["groups"]] == [
            ("g", "share", "Stable")
        ]
        classic = await share.broker.call(
            ApiKey.LIST_GROUPS, 5, {**body, "types_filter": ["classic"]}
        )
        assert classic["groups"] == []
        busy = await share.broker.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
        assert busy["results"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
        await share.groups.leave("g", "m1")
        await share.groups.sweep()  # the group without members leaves memory; its state stays
        described = await share.broker.call(
            ApiKey.SHARE_GROUP_DESCRIBE,
            1,
            {"group_ids": ["g"], "include_authorized_operations": False},
        )
        assert described["groups"][0]["group_state"] == "Empty"
        assert described["groups"][0]["error_code"] == ErrorCode.NONE
        gone = await share.broker.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
        assert gone["results"][0]["error_code"] == ErrorCode.NONE
        assert share.broker.storage.shares.groups() == []
        assert (await share.broker.call(ApiKey.LIST_GROUPS, 5, body))["groups"] == []

    asyncio.run(scenario())


def test_acknowledgements_not_stored_are_answered_as_a_storage_error() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x", b"y"])
        await share.join("m1")
        await share.fetch("m1", topic_id)
        share.broker.storage.shares.broken = True
        answer = await share.fetch("m1", topic_id, acks=[(0, 1, ACCEPT)])
        part = answer["responses"][0]["partitions"][0]
        assert part["acknowledge_error_code"] == ErrorCode.KAFKA_STORAGE_ERROR

    asyncio.run(scenario())


def test_a_partition_in_use_is_not_forgotten_under_a_request() -> None:
    """The sweep and a move of ownership leave a share partition alone while a request holds
    it (its save would otherwise find nothing to store); the next sweep drops it."""

    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x"])
        await share.join("m1")
        await share.fetch("m1", topic_id)
        key = ("g", TOPIC, 0)
        share.groups.serves_partition = lambda _topic, _index: False
        async with share.groups.lock(key):
            share.groups.drop_unserved()
            await share.groups.sweep()
            assert key in share.groups.partitions
        await share.groups.sweep()
        assert key not in share.groups.partitions

    asyncio.run(scenario())


def test_a_share_group_id_is_no_classic_or_consumer_group() -> None:
    async def scenario() -> None:
        share = Share()
        await share.topic([b"x"])
        await share.join("m1")
        join = {
            "group_id": "g",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        }
        joined = await share.broker.call(ApiKey.JOIN_GROUP, 5, join)
        assert joined["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        share.broker.context.consumer_groups = ConsumerGroups()
        heartbeat = {
            "group_id": "g",
            "member_id": "c1",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 10000,
            "subscribed_topic_names": ["orders"],
            "server_assignor": None,
            "topic_partitions": [],
        }
        answer = await share.broker.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, heartbeat)
        assert answer["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND

    asyncio.run(scenario())


def test_a_forgotten_partition_gives_back_what_the_member_holds_there() -> None:
    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"x"])
        await share.join("m1")
        await share.join("m2")
        assert acquired(await share.fetch("m1", topic_id)) == [(0, 0, 1)]
        forget = {
            "group_id": "g",
            "member_id": "m1",
            "share_session_epoch": share.epochs["m1"],
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 3,
            "batch_size": 3,
            "topics": [],
            "forgotten_topics_data": [{"topic_id": topic_id, "partitions": [0]}],
        }
        share.epochs["m1"] += 1
        await share.broker.call(ApiKey.SHARE_FETCH, 1, forget)
        assert acquired(await share.fetch("m2", topic_id)) == [(0, 0, 2)]

    asyncio.run(scenario())


def test_read_committed_leaves_out_an_aborted_transactions_records() -> None:
    """_present: records of an aborted transaction are gaps, whether stored as one-record
    messages carrying the producer (`TXN`) or as a Kafka batch whose header names it; an
    aborted transaction begun before the read still counts; other producers' do not."""

    def message(properties: dict[str, str], payload: bytes = b"v") -> StoredMessage:
        return StoredMessage((1, 0, -1), payload, "", properties, 0, 0)

    batch = bytes(
        encode_batch(
            0,
            [(0, 0, None, b"a", []), (1, 0, None, b"b", [])],
            producer_id=77,
            producer_epoch=0,
            is_transactional=True,
        )
    )
    entries = [
        LogEntry(10, message({TXN: "5:0"})),  # producer 5, aborted, begun at 9
        LogEntry(11, message({BATCH: "2", RECORDS: "2"}, batch)),  # producer 77, aborted
        LogEntry(13, message({TXN: "6:0"})),  # producer 6, committed
        LogEntry(14, message({TXN: "5:0", MARKER: "abort"})),
        LogEntry(15, message({TXN: "5:0"})),  # producer 5 again: a new transaction
        LogEntry(16, message({TXN: "77:0", MARKER: "abort"})),
    ]
    present, end = _present(entries, [(5, 9), (77, 11)])
    assert present == [13, 15] and end == 17
    assert _present(entries, None)[0] == [10, 11, 12, 13, 15]


def test_a_deleted_topic_takes_its_share_state_along() -> None:
    """DeleteTopics drops every share group's state of the topic's partitions, and a topic
    created again on the same Pulsar topics (as on a backend that deletes for real) is read
    from its own start, though a member still holds the old one's partition in memory."""

    async def scenario() -> None:
        share = Share()
        topic_id = await share.topic([b"r%d" % i for i in range(5)])
        await share.join("m1")
        await share.fetch("m1", topic_id)
        await share.fetch("m1", topic_id, acks=[(0, 2, ACCEPT)])
        assert share.broker.storage.shares.load("g", f"{TOPIC}-partition-0").start == 3
        deleted = await share.broker.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["orders"]})
        assert deleted["responses"][0]["error_code"] == ErrorCode.NONE
        assert share.broker.storage.shares.load("g", f"{TOPIC}-partition-0") is None
        again = await share.topic([b"new-0", b"new-1"])
        assert again != topic_id
        got = await share.fetch("m1", again)
        assert acquired(got) == [(0, 1, 1)] and values(got) == [b"new-0", b"new-1"]

    asyncio.run(scenario())
