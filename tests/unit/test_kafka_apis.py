"""Every Kafka API handler, run on the in-memory storage twin: real request bytes in through
the one dispatcher (requests.answer), real response bytes out, no broker, no socket."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from harness.kafka_memory_store import memory_storage
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.apis import metadata
from pulsar_gateway.handlers.kafka.apis.table import (
    API_TABLE,
    api_versions,
    api_versions_frame,
    served_versions,
    versions_of,
)
from pulsar_gateway.handlers.kafka.context import BrokerIdentity, KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.requests import ConnectionClosing, answer
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.entry_format import FORMAT_CONFIG
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import Record, decode_batches, encode_batch

TOPIC = "persistent://public/default/orders"


class Broker:
    """A Kafka context on memory storage, spoken to in request bytes."""

    def __init__(self, **settings: Any) -> None:
        self.storage = memory_storage()
        self.context = KafkaContext(
            KafkaSection(**settings),
            self.storage,
            BrokerIdentity(7, "broker.test", 9999, "cluster-x"),
            GroupCoordinator(self.storage.offsets),
        )
        self.correlation = 0

    async def call(self, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation += 1
        frame = memoryview(protocol.encode_request(api, version, self.correlation, "t", body)[4:])
        header = protocol.parse_request_header(frame)
        response = await answer(self.context, header, frame)
        assert response is not None
        return protocol.decode_response(api, version, memoryview(response)[4:])

    async def produce(
        self, topic: str, values: list[bytes], partition: int = 0, **batch: Any
    ) -> dict[str, Any]:
        version = batch.pop("version", 11)
        transactional_id = batch.pop("transactional_id", None)
        timeout_ms = batch.pop("timeout_ms", 1000)
        records = [Record(i, 1000 + i, b"k%d" % i, v, [("h", b"1")]) for i, v in enumerate(values)]
        body = {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout_ms": timeout_ms,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {"index": partition, "records": encode_batch(0, records, **batch)}
                    ],
                }
            ],
        }
        response = await self.call(ApiKey.PRODUCE, version, body)
        return response["responses"][0]["partition_responses"][0]

    async def fetch(
        self,
        topic: str,
        offset: int,
        max_wait_ms: int = 0,
        partition: int = 0,
        isolation_level: int = 0,
        partition_max_bytes: int = 1 << 20,
    ) -> dict[str, Any]:
        body = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": partition_max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        response = await self.call(ApiKey.FETCH, 12, body)
        return response["responses"][0]["partitions"][0]


def fetched(partition: dict[str, Any]) -> list[tuple[int, bytes | None]]:
    return [
        (batch.base_offset + record.offset_delta, record.value)
        for batch in decode_batches(bytes(partition["records"] or b""))
        for record in batch.records
    ]


def commit_body(
    group: str, generation: int, member: str, offset: int, metadata: str = ""
) -> dict[str, Any]:
    """OffsetCommit v8 of one offset for partition 0 of `orders`."""
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "group_instance_id": None,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": metadata,
                    }
                ],
            }
        ],
    }


def run(scenario: Any) -> None:
    asyncio.run(scenario())


# ---- the table ---------------------------------------------------------------------------------


def test_api_versions_lists_the_table_and_old_versions_get_v0() -> None:
    async def scenario() -> None:
        broker = Broker()
        response = await broker.call(ApiKey.API_VERSIONS, 3, {})
        assert response["error_code"] == ErrorCode.NONE
        keys = {entry["api_key"] for entry in response["api_keys"]}
        assert keys == set(API_TABLE)
        assert response["api_keys"] == served_versions()
        frame = memoryview(protocol.encode_request(ApiKey.API_VERSIONS, 3, 5, "t", {})[4:])
        header = protocol.parse_request_header(frame)._replace(api_version=99)
        raw = await answer(broker.context, header, frame)
        assert raw is not None
        assert protocol.decode_response(ApiKey.API_VERSIONS, 0, memoryview(raw)[4:])[
            "error_code"
        ] == (ErrorCode.UNSUPPORTED_VERSION)

    run(scenario)


def test_api_versions_answer_encoded_once_is_the_same_as_encoded_each_time() -> None:
    """The ApiVersions frame is encoded once per version and given each request's
    correlation id: byte for byte what encoding the handler's answer gives, at every
    served version, for any correlation id (negative ones too)."""

    async def scenario() -> None:
        broker = Broker()
        low, high = versions_of(ApiKey.API_VERSIONS)
        assert low == 0 and high >= 3
        for version in range(low, high + 1):
            for correlation in (0, 1, 7, 2**31 - 1, -5):
                body = protocol.encode_request(ApiKey.API_VERSIONS, version, correlation, "t", {})
                frame = memoryview(body[4:])
                header = protocol.parse_request_header(frame)
                raw = await answer(broker.context, header, frame)
                expected = await api_versions(broker.context, header, {})
                assert raw == protocol.encode_response(
                    ApiKey.API_VERSIONS, version, correlation, expected
                ), (version, correlation)
                assert raw == api_versions_frame(version, correlation)

    run(scenario)


def test_unserved_api_closes_the_connection() -> None:
    async def scenario() -> None:
        broker = Broker()
        frame = memoryview(
            protocol.encode_request(ApiKey.WRITE_TXN_MARKERS, 0, 1, "t", {"markers": []})[4:]
        )
        with pytest.raises(ConnectionClosing, match="unsupported API"):
            await answer(broker.context, protocol.parse_request_header(frame), frame)

    run(scenario)


# ---- produce, fetch, list offsets ------------------------------------------------------------


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_produce_returns_dense_base_offsets_and_fetch_reads_them(entry_format: str) -> None:
    async def scenario() -> None:
        broker = Broker(entry_format=entry_format)
        first = await broker.produce("orders", [b"a", b"b", b"c"])
        second = await broker.produce("orders", [b"d"])
        assert (first["error_code"], first["base_offset"]) == (ErrorCode.NONE, 0)
        assert (second["error_code"], second["base_offset"]) == (ErrorCode.NONE, 3)
        partition = await broker.fetch("orders", 1)
        assert partition["high_watermark"] == 4
        got = [(o, v) for o, v in fetched(partition) if o >= 1]
        assert got == [(1, b"b"), (2, b"c"), (3, b"d")]
        log = broker.storage.topics.logs[TOPIC + "-partition-0"]  # type: ignore[attr-defined]
        assert len(log.entries) == (2 if entry_format == "kafka" else 4)

    run(scenario)


def test_topic_config_chooses_the_entry_format() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1, {FORMAT_CONFIG: "kafka"})
        await broker.produce("orders", [b"a", b"b"])
        log = broker.storage.topics.logs[TOPIC + "-partition-0"]  # type: ignore[attr-defined]
        assert len(log.entries) == 1 and log.next_offset == 2

    run(scenario)


def test_produce_errors() -> None:
    async def scenario() -> None:
        broker = Broker(auto_create_topics=False)
        missing = await broker.produce("nope", [b"a"])
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        bad_name = await broker.produce("a/b", [b"a"])
        assert bad_name["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        await broker.storage.topics.create(TOPIC, 1)
        outside = await broker.produce("orders", [b"a"], partition=3)
        assert outside["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        broker.storage.topics.broken = True  # type: ignore[attr-defined]
        down = await broker.produce("orders", [b"a"])
        assert down["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR

    run(scenario)


def test_idempotent_retry_is_stored_once_and_gaps_are_refused() -> None:
    async def scenario() -> None:
        broker = Broker()
        ids = await broker.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})
        pid = ids["producer_id"]
        assert ids["error_code"] == ErrorCode.NONE and ids["producer_epoch"] == 0
        again = await broker.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})
        assert again["producer_id"] == pid + 1
        batch = {"producer_id": pid, "producer_epoch": 0, "base_sequence": 0}
        first = await broker.produce("orders", [b"a", b"b"], **batch)
        retry = await broker.produce("orders", [b"a", b"b"], **batch)
        assert first["base_offset"] == retry["base_offset"] == 0
        gap = await broker.produce("orders", [b"c"], **{**batch, "base_sequence": 5})
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await broker.fetch("orders", 0))["high_watermark"] == 2

    run(scenario)


def test_fetch_errors_and_long_poll() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.produce("orders", [b"a"])
        beyond = await broker.fetch("orders", 5)
        assert beyond["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        unknown = await broker.fetch("missing", 0)
        assert unknown["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        log = broker.storage.topics.logs[TOPIC + "-partition-0"]  # type: ignore[attr-defined]
        # max_wait far beyond the deadline below: only the append can end this fetch in time
        waiting = asyncio.ensure_future(broker.fetch("orders", 1, max_wait_ms=600_000))
        while not log._waiters:  # the fetch has found nothing and parked on the log
            await asyncio.sleep(0.001)
        await broker.produce("orders", [b"b"])
        partition = await asyncio.wait_for(waiting, 10)
        assert [v for o, v in fetched(partition) if o >= 1] == [b"b"]

    run(scenario)


def test_list_offsets_earliest_latest_and_by_time() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.produce("orders", [b"a", b"b", b"c"])  # timestamps 1000, 1001, 1002

        async def lookup(timestamp: int) -> tuple[int, int]:
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "current_leader_epoch": -1,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
            }
            response = await broker.call(ApiKey.LIST_OFFSETS, 10, {**body, "timeout_ms": 1000})
            partition = response["topics"][0]["partitions"][0]
            assert partition["error_code"] == ErrorCode.NONE
            return partition["offset"], partition["timestamp"]

        assert (await lookup(-2))[0] == 0
        assert (await lookup(-1))[0] == 3
        assert await lookup(1001) == (1, 1001)
        assert await lookup(-3) == (2, 1002)
        assert await lookup(5000) == (-1, -1)
        assert (await lookup(-4))[0] == 0  # earliest-local: nothing is tiered away
        assert await lookup(-5) == (-1, -1)  # latest-tiered: nothing was ever tiered

    run(scenario)


# ---- metadata and admin ----------------------------------------------------------------------


def test_metadata_lists_topics_led_by_this_broker() -> None:
    async def scenario() -> None:
        broker = Broker(default_partitions=3)
        response = await broker.call(
            ApiKey.METADATA,
            12,
            {"topics": [{"name": "orders", "topic_id": None}], "allow_auto_topic_creation": True},
        )
        [topic] = response["topics"]
        assert topic["error_code"] == ErrorCode.NONE and len(topic["partitions"]) == 3
        assert {p["leader_id"] for p in topic["partitions"]} == {7}
        assert response["brokers"][0]["host"] == "broker.test"
        everything = await broker.call(ApiKey.METADATA, 12, {"topics": None})
        assert [t["name"] for t in everything["topics"]] == ["orders"]

    run(scenario)


def test_metadata_answers_absent_topics_each_without_a_row_held_per_topic() -> None:
    """Each absent topic gets its own row, in the order asked, beside a present one; until
    the answer is encoded an absent topic is held as its name and error, not a row (a
    99,999-topic Metadata held 27 MB of rows while it was encoded, docs/security.md)."""

    async def scenario() -> None:
        broker = Broker(default_partitions=2)
        await broker.call(
            ApiKey.METADATA, 12, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": True}
        )
        names = ["gone-1", "orders", "gone-2", "gone-3"]
        request = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": False}
        body = await metadata.handle(broker.context, SimpleNamespace(api_version=12), request)
        held = list.__iter__(body["topics"])
        assert [type(item) for item in held] == [tuple, dict, tuple, tuple]
        response = await broker.call(ApiKey.METADATA, 12, request)
        assert [t["name"] for t in response["topics"]] == names
        for topic in response["topics"]:
            if topic["name"] == "orders":
                assert topic["error_code"] == ErrorCode.NONE and len(topic["partitions"]) == 2
            else:
                assert topic["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                assert topic["partitions"] == [] and topic["topic_id"] == uuid.UUID(int=0)

    run(scenario)


def test_create_delete_and_grow_topics() -> None:
    async def scenario() -> None:
        broker = Broker()

        async def create(name: str, partitions: int, **extra: Any) -> dict[str, Any]:
            body = {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": extra.pop("configs", []),
                    }
                ],
                "timeout_ms": 1000,
                "validate_only": extra.pop("validate_only", False),
            }
            return (await broker.call(ApiKey.CREATE_TOPICS, 7, body))["topics"][0]

        assert (await create("t1", 2))["error_code"] == ErrorCode.NONE
        assert (await create("t1", 2))["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        assert (await create("t2", 0))["error_code"] == ErrorCode.INVALID_PARTITIONS
        bad = await create("t3", 1, configs=[{"name": "cleanup.policy", "value": "sometimes"}])
        assert bad["error_code"] == ErrorCode.INVALID_CONFIG
        assert (await create("t4", 1, validate_only=True))["error_code"] == ErrorCode.NONE
        assert broker.storage.topics.get("persistent://public/default/t4") is None
        grow = await broker.call(
            ApiKey.CREATE_PARTITIONS,
            3,
            {
                "topics": [{"name": "t1", "count": 5, "assignments": None}],
                "timeout_ms": 1000,
                "validate_only": False,
            },
        )
        assert grow["results"][0]["error_code"] == ErrorCode.NONE
        assert broker.storage.topics.get("persistent://public/default/t1").partitions == 5
        deleted = await broker.call(
            ApiKey.DELETE_TOPICS, 5, {"topic_names": ["t1", "nope"], "timeout_ms": 1000}
        )
        codes = [r["error_code"] for r in deleted["responses"]]
        assert codes == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

    run(scenario)


def test_describe_configs_and_cluster() -> None:
    async def scenario() -> None:
        broker = Broker(entry_format="kafka")
        await broker.storage.topics.create(TOPIC, 1, {"retention.ms": "5"})
        response = await broker.call(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": "orders", "configuration_keys": None},
                    {"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        found, missing = response["results"]
        values = {c["name"]: (c["value"], c["config_source"]) for c in found["configs"]}
        dynamic_topic_config, default_config = 1, 5  # Kafka's ConfigSource numbers
        assert values["retention.ms"] == ("5", dynamic_topic_config)
        assert values[FORMAT_CONFIG] == ("kafka", default_config)
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        cluster = await broker.call(
            ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False}
        )
        assert cluster["cluster_id"] == "cluster-x" and cluster["brokers"][0]["broker_id"] == 7

    run(scenario)


# ---- groups ----------------------------------------------------------------------------------


def test_group_round_trip_commit_fetch_delete() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.produce("orders", [b"a", b"b"])
        found = await broker.call(
            ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]}
        )
        assert found["coordinators"][0]["node_id"] == 7
        join_body = {
            "group_id": "g",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}],
            "reason": None,
        }
        first = await broker.call(ApiKey.JOIN_GROUP, 9, join_body)
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        member = first["member_id"]
        joined = await broker.call(ApiKey.JOIN_GROUP, 9, {**join_body, "member_id": member})
        assert joined["error_code"] == ErrorCode.NONE and joined["leader"] == member
        generation = joined["generation_id"]
        synced = await broker.call(
            ApiKey.SYNC_GROUP,
            5,
            {
                "group_id": "g",
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": member, "assignment": b"a0"}],
            },
        )
        assert synced["error_code"] == ErrorCode.NONE and bytes(synced["assignment"]) == b"a0"
        beat = await broker.call(
            ApiKey.HEARTBEAT,
            4,
            {
                "group_id": "g",
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
            },
        )
        assert beat["error_code"] == ErrorCode.NONE
        commit = await broker.call(
            ApiKey.OFFSET_COMMIT, 8, commit_body("g", generation, member, 2, "md")
        )
        assert commit["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        stale = await broker.call(
            ApiKey.OFFSET_COMMIT, 8, commit_body("g", generation + 5, member, 1)
        )
        assert stale["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION
        fetched_offsets = await broker.call(
            ApiKey.OFFSET_FETCH,
            8,
            {"groups": [{"group_id": "g", "topics": None}], "require_stable": False},
        )
        [group] = fetched_offsets["groups"]
        partition = group["topics"][0]["partitions"][0]
        assert (partition["committed_offset"], partition["metadata"]) == (2, "md")
        listed = await broker.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert [g["group_id"] for g in listed["groups"]] == ["g"]
        described = await broker.call(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": False}
        )
        assert described["groups"][0]["group_state"] == "Stable"
        left = await broker.call(
            ApiKey.LEAVE_GROUP,
            5,
            {"group_id": "g", "members": [{"member_id": member, "group_instance_id": None}]},
        )
        assert left["error_code"] == ErrorCode.NONE
        deleted = await broker.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
        assert deleted["results"][0]["error_code"] == ErrorCode.NONE
        assert broker.storage.offsets.get("g", TOPIC + "-partition-0") is None

    run(scenario)


def test_commit_when_storage_is_down_says_coordinator_not_available() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.produce("orders", [b"a"])
        broker.storage.offsets.broken = True  # type: ignore[attr-defined]
        commit = await broker.call(ApiKey.OFFSET_COMMIT, 8, commit_body("solo", -1, "", 1))
        code = commit["topics"][0]["partitions"][0]["error_code"]
        assert code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    run(scenario)
