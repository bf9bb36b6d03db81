"""AlterConfigs, IncrementalAlterConfigs, DeleteRecords and the one-broker replica APIs
(ElectLeaders, partition reassignments, OffsetForLeaderEpoch) on the in-memory storage."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from pulsar_gateway.gateway.reserved_names import ReservedNamespaces
from pulsar_gateway.kafka_codec.entry_format import FORMAT_CONFIG
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.unit.test_kafka_apis import TOPIC, Broker, fetched, run

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


async def incremental(
    broker: Broker, changes: list[tuple[str, int, str | None]], **extra: Any
) -> dict[str, Any]:
    body = {
        "resources": [
            {
                "resource_type": extra.get("kind", TOPIC_RESOURCE),
                "resource_name": extra.get("name", "orders"),
                "configs": [
                    {"name": n, "config_operation": op, "value": v} for n, op, v in changes
                ],
            }
        ],
        "validate_only": extra.get("validate_only", False),
    }
    return (await broker.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body))["responses"][0]


def configs_of(broker: Broker) -> dict[str, str]:
    record = broker.storage.topics.get(TOPIC)
    assert record is not None
    return record.configs


def test_incremental_alter_configs_set_delete_append_subtract() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1, {"retention.ms": "5"})
        done = await incremental(
            broker, [("max.message.bytes", SET, "100"), ("retention.ms", DELETE, None)]
        )
        assert done["error_code"] == ErrorCode.NONE
        assert configs_of(broker) == {"max.message.bytes": "100"}
        await incremental(broker, [("cleanup.policy", APPEND, "compact")])
        assert configs_of(broker)["cleanup.policy"] == "delete,compact"
        await incremental(broker, [("cleanup.policy", SUBTRACT, "delete")])
        assert configs_of(broker)["cleanup.policy"] == "compact"
        refused = await incremental(broker, [("retention.ms", APPEND, "1")])
        assert refused["error_code"] == ErrorCode.INVALID_CONFIG
        assert "append is not allowed" in refused["error_message"]

    run(scenario)


def test_altered_max_message_bytes_applies_to_the_next_produce() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1)
        assert (await broker.produce("orders", [b"x" * 300]))["error_code"] == ErrorCode.NONE
        await incremental(broker, [("max.message.bytes", SET, "200")])
        refused = await broker.produce("orders", [b"x" * 300])
        assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE

    run(scenario)


def test_alter_configs_replaces_the_whole_set_and_checks_values() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1, {"retention.ms": "5"})

        async def alter(configs: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
            body = {
                "resources": [
                    {
                        "resource_type": extra.get("kind", TOPIC_RESOURCE),
                        "resource_name": extra.get("name", "orders"),
                        "configs": configs,
                    }
                ],
                "validate_only": extra.get("validate_only", False),
            }
            return (await broker.call(ApiKey.ALTER_CONFIGS, 2, body))["responses"][0]

        ok = await alter([{"name": "segment.ms", "value": "1000"}])
        assert ok["error_code"] == ErrorCode.NONE
        assert configs_of(broker) == {"segment.ms": "1000"}  # retention.ms went back to default
        bad = await alter([{"name": "segment.ms", "value": "soon"}])
        assert bad["error_code"] == ErrorCode.INVALID_CONFIG
        unknown = await alter([{"name": "no.such.config", "value": "1"}])
        assert unknown["error_code"] == ErrorCode.INVALID_CONFIG
        dry = await alter([{"name": "segment.ms", "value": "7"}], validate_only=True)
        assert dry["error_code"] == ErrorCode.NONE and configs_of(broker)["segment.ms"] == "1000"
        missing = await alter([{"name": "segment.ms", "value": "7"}], name="nope")
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        broker_wide = await alter([{"name": "num.partitions", "value": "3"}], kind=BROKER_RESOURCE)
        assert broker_wide["error_code"] == ErrorCode.POLICY_VIOLATION

    run(scenario)


def test_entry_format_cannot_change_but_may_be_restated() -> None:
    async def scenario() -> None:
        broker = Broker(entry_format="pulsar")
        await broker.storage.topics.create(TOPIC, 1)
        same = await incremental(broker, [(FORMAT_CONFIG, SET, "pulsar")])
        assert same["error_code"] == ErrorCode.NONE
        other = await incremental(broker, [(FORMAT_CONFIG, SET, "kafka")])
        assert other["error_code"] == ErrorCode.INVALID_CONFIG
        assert configs_of(broker)[FORMAT_CONFIG] == "pulsar"

    run(scenario)


def test_duplicate_keys_and_reserved_topics_are_refused() -> None:
    async def scenario() -> None:
        broker = Broker()
        reserved = ReservedNamespaces(frozenset({"public/__gateway"}))
        broker.storage = broker.context.storage = dataclasses.replace(
            broker.storage, reserved=reserved
        )
        await broker.storage.topics.create(TOPIC, 1)
        twice = await incremental(broker, [("segment.ms", SET, "1"), ("segment.ms", SET, "2")])
        assert twice["error_code"] == ErrorCode.INVALID_REQUEST
        reserved = await incremental(
            broker, [("segment.ms", SET, "1")], name="public/__gateway/metadata"
        )
        assert reserved["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    run(scenario)


async def delete_records(broker: Broker, partition: int, offset: int) -> dict[str, Any]:
    body = {
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": partition, "offset": offset}]}
        ],
        "timeout_ms": 1000,
    }
    return (await broker.call(ApiKey.DELETE_RECORDS, 2, body))["topics"][0]["partitions"][0]


def test_delete_records_moves_the_log_start_for_fetch_and_list_offsets() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1)
        await broker.produce("orders", [b"a", b"b", b"c", b"d"])
        done = await delete_records(broker, 0, 2)
        assert (done["error_code"], done["low_watermark"]) == (ErrorCode.NONE, 2)
        below = await broker.fetch("orders", 1)
        assert below["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        at = await broker.fetch("orders", 2)
        assert [v for o, v in fetched(at) if o >= 2] == [b"c", b"d"]
        assert at["log_start_offset"] == 2
        earliest = await broker.call(
            ApiKey.LIST_OFFSETS,
            8,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}
                        ],
                    }
                ],
            },
        )
        assert earliest["topics"][0]["partitions"][0]["offset"] == 2
        backwards = await delete_records(broker, 0, 1)
        assert backwards["low_watermark"] == 2  # the start never moves down
        to_end = await delete_records(broker, 0, -1)
        assert to_end["low_watermark"] == 4
        assert (await delete_records(broker, 0, 9))["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (await delete_records(broker, 3, 0))["error_code"] == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert broker.storage.topics.get(TOPIC).start_of(0) == 4  # type: ignore[union-attr]

    run(scenario)


def test_one_broker_answers_for_elections_reassignments_and_epochs() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 2)
        await broker.produce("orders", [b"a", b"b", b"c"])
        elected = await broker.call(
            ApiKey.ELECT_LEADERS,
            2,
            {
                "election_type": 0,
                "topic_partitions": [{"topic": "orders", "partitions": [0, 5]}],
                "timeout_ms": 1000,
            },
        )
        codes = [
            p["error_code"] for p in elected["replica_election_results"][0]["partition_result"]
        ]
        assert codes == [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        listed = await broker.call(
            ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None}
        )
        assert listed["error_code"] == ErrorCode.NONE and listed["topics"] == []
        moved = await broker.call(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            0,
            {
                "timeout_ms": 1000,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {"partition_index": 0, "replicas": [7]},
                            {"partition_index": 1, "replicas": [7, 8]},
                        ],
                    }
                ],
            },
        )
        codes = [p["error_code"] for p in moved["responses"][0]["partitions"]]
        assert codes == [ErrorCode.NONE, ErrorCode.INVALID_REPLICA_ASSIGNMENT]

        async def epoch_end(leader_epoch: int, current: int = -1) -> dict[str, Any]:
            body = {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": "orders",
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": current,
                                "leader_epoch": leader_epoch,
                            }
                        ],
                    }
                ],
            }
            response = await broker.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body)
            return response["topics"][0]["partitions"][0]

        found = await epoch_end(0)
        assert (found["error_code"], found["leader_epoch"], found["end_offset"]) == (0, 0, 3)
        assert (await epoch_end(3))["end_offset"] == -1
        assert (await epoch_end(0, current=2))["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH

    run(scenario)


def test_describe_topic_partitions_pages_with_a_cursor() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create("persistent://public/default/a", 3)
        await broker.storage.topics.create("persistent://public/default/b", 2)

        async def page(topics: list[str], limit: int, cursor: Any = None) -> dict[str, Any]:
            body = {
                "topics": [{"name": name} for name in topics],
                "response_partition_limit": limit,
                "cursor": cursor,
            }
            return await broker.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)

        seen: list[tuple[str, int]] = []
        cursor = None
        pages = 0
        while True:
            response = await page([], 2, cursor)
            pages += 1
            for topic in response["topics"]:
                assert topic["error_code"] == ErrorCode.NONE
                seen += [(topic["name"], p["partition_index"]) for p in topic["partitions"]]
            cursor = response["next_cursor"]
            if cursor is None:
                break
        assert seen == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
        assert pages == 3
        one = await page(["b", "missing"], 10)
        codes = {t["name"]: t["error_code"] for t in one["topics"]}
        assert codes == {"b": ErrorCode.NONE, "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        stray = await page(["a"], 10, {"topic_name": "b", "partition_index": 0})
        assert [t["error_code"] for t in stray["topics"]] == [ErrorCode.INVALID_REQUEST]

    run(scenario)


def test_log_dirs_are_one_pulsar_dir_of_unknown_size() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 2)
        everything = await broker.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
        [result] = everything["results"]
        assert result["log_dir"] == "pulsar" and result["total_bytes"] == -1
        assert [
            (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]
        ] == [("orders", [0, 1])]
        some = await broker.call(
            ApiKey.DESCRIBE_LOG_DIRS,
            4,
            {
                "topics": [
                    {"topic": "orders", "partitions": [1, 9]},
                    {"topic": "nope", "partitions": [0]},
                ]
            },
        )
        topics = some["results"][0]["topics"]
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in topics] == [
            ("orders", [1])
        ]
        moved = await broker.call(
            ApiKey.ALTER_REPLICA_LOG_DIRS,
            2,
            {
                "dirs": [
                    {"path": "pulsar", "topics": [{"name": "orders", "partitions": [0]}]},
                    {"path": "/data/2", "topics": [{"name": "orders", "partitions": [1]}]},
                ]
            },
        )
        codes = [p["error_code"] for r in moved["results"] for p in r["partitions"]]
        assert codes == [ErrorCode.NONE, ErrorCode.LOG_DIR_NOT_FOUND]
        listed = await broker.call(ApiKey.LIST_CLIENT_METRICS_RESOURCES, 0, {})
        assert listed["error_code"] == 0 and listed["client_metrics_resources"] == []

    run(scenario)


def test_describe_quorum_is_one_voter_this_gateway() -> None:
    async def scenario() -> None:
        broker = Broker()
        body = {
            "topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]},
                {"topic_name": "orders", "partitions": [{"partition_index": 0}]},
            ]
        }
        for version in (0, 1, 2):
            response = await broker.call(ApiKey.DESCRIBE_QUORUM, version, body)
            assert response["error_code"] == ErrorCode.NONE
            [quorum], [other] = (t["partitions"] for t in response["topics"])
            assert (quorum["error_code"], quorum["leader_id"], quorum["leader_epoch"]) == (0, 7, 0)
            assert [v["replica_id"] for v in quorum["current_voters"]] == [7]
            assert quorum["observers"] == []
            assert other["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert response["nodes"] == [
            {
                "node_id": 7,
                "listeners": [{"name": "CONTROLLER", "host": "broker.test", "port": 9999}],
            }
        ]

    run(scenario)


def test_delete_topics_v6_by_name_or_by_topic_id() -> None:
    async def scenario() -> None:
        broker = Broker()
        first = await broker.storage.topics.create("persistent://public/default/a", 1)
        await broker.storage.topics.create("persistent://public/default/b", 1)
        unknown = uuid.uuid4()
        response = await broker.call(
            ApiKey.DELETE_TOPICS,
            6,
            {
                "topics": [
                    {"name": None, "topic_id": uuid.UUID(first.topic_id)},
                    {"name": "b", "topic_id": uuid.UUID(int=0)},
                    {"name": None, "topic_id": unknown},
                ],
                "timeout_ms": 1000,
            },
        )
        rows = [(r["name"], r["error_code"]) for r in response["responses"]]
        assert rows == [
            ("a", ErrorCode.NONE),
            ("b", ErrorCode.NONE),
            (None, ErrorCode.UNKNOWN_TOPIC_ID),
        ]
        assert response["responses"][0]["topic_id"] == uuid.UUID(first.topic_id)
        assert broker.storage.topics.list() == []

    run(scenario)


def test_admin_apis_ask_for_rights_as_kafka_does() -> None:
    """A user of namespace team-a/orders only: topic admin there, nothing on the cluster,
    nothing in team-b/orders (docs/security.md, 'Authorization')."""
    from tests.unit.test_authorization import A_TOPIC, B_TOPIC, Guarded

    async def scenario() -> None:
        broker = Guarded()
        await broker.topics()
        for name, expected in (
            (A_TOPIC, ErrorCode.NONE),
            (B_TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ):
            altered = await incremental(broker, [("segment.ms", SET, "9")], name=name)
            assert altered["error_code"] == expected, name
            body = {
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}],
                "timeout_ms": 1000,
            }
            deleted = await broker.call(ApiKey.DELETE_RECORDS, 2, body)
            assert deleted["topics"][0]["partitions"][0]["error_code"] == expected, name
        broker_wide = await incremental(broker, [("num.partitions", SET, "3")], kind=4, name="0")
        assert broker_wide["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elected = await broker.call(
            ApiKey.ELECT_LEADERS,
            2,
            {
                "election_type": 0,
                "topic_partitions": [{"topic": A_TOPIC, "partitions": [0]}],
                "timeout_ms": 1000,
            },
        )
        assert elected["error_code"] == denied
        log_dirs = await broker.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
        assert log_dirs["error_code"] == denied and log_dirs["results"] == []
        listed = await broker.call(
            ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None}
        )
        assert listed["error_code"] == denied
        paged = await broker.call(
            ApiKey.DESCRIBE_TOPIC_PARTITIONS,
            0,
            {"topics": [], "response_partition_limit": 100, "cursor": None},
        )
        assert [t["name"] for t in paged["topics"]] == [A_TOPIC]
        credentials = await broker.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
        assert credentials["error_code"] == denied
        quorum = await broker.call(ApiKey.DESCRIBE_QUORUM, 2, {"topics": []})
        assert quorum["error_code"] == denied
        broker.login("root")  # a superuser may
        elected = await broker.call(
            ApiKey.ELECT_LEADERS,
            2,
            {
                "election_type": 0,
                "topic_partitions": [{"topic": B_TOPIC, "partitions": [0]}],
                "timeout_ms": 1000,
            },
        )
        assert elected["error_code"] == ErrorCode.NONE

    run(scenario)


def test_client_quotas_are_set_described_and_refused_as_kafka_does() -> None:
    async def scenario() -> None:
        broker = Broker()

        def entry(key: str, kind: str = "user", name: str | None = "alice", **op: Any) -> dict:
            return {
                "entity": [{"entity_type": kind, "entity_name": name}],
                "ops": [{"key": key, "value": op.get("value", 1024.0), "remove": False}],
            }

        async def alter(*entries: dict, validate_only: bool = False) -> list[int]:
            body = {"entries": list(entries), "validate_only": validate_only}
            answer = await broker.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)
            return [e["error_code"] for e in answer["entries"]]

        async def describe(*components: tuple[str, int, str | None], strict: bool = False):
            body = {
                "components": [
                    {"entity_type": t, "match_type": m, "match": n} for t, m, n in components
                ],
                "strict": strict,
            }
            return await broker.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, body)

        assert (await describe(("user", 2, None)))["entries"] == []
        assert await alter(
            entry("producer_byte_rate"),
            entry("speed"),
            entry("producer_byte_rate", "team"),
            entry("request_percentage"),
            entry("consumer_byte_rate", value=-5.0),
            entry("consumer_byte_rate", value=1.5),
            entry("consumer_byte_rate", "client-id", None, value=2048.0),
        ) == [
            ErrorCode.NONE,
            ErrorCode.INVALID_REQUEST,  # an unknown key
            ErrorCode.INVALID_REQUEST,  # an unknown entity type
            ErrorCode.POLICY_VIOLATION,  # known to Kafka, not enforced here: not stored
            ErrorCode.INVALID_REQUEST,  # not positive
            ErrorCode.INVALID_REQUEST,  # a byte rate is a whole number
            ErrorCode.NONE,  # the default client id
        ]
        assert await alter(entry("producer_byte_rate", "user", "bob"), validate_only=True) == [0]
        every = await describe(("user", 2, None))
        assert every["entries"] == [
            {
                "entity": [{"entity_type": "user", "entity_name": "alice"}],
                "values": [{"key": "producer_byte_rate", "value": 1024.0}],
            }
        ]
        defaults = await describe(("client-id", 1, None), strict=True)
        assert [e["values"] for e in defaults["entries"]] == [
            [{"key": "consumer_byte_rate", "value": 2048.0}]
        ]
        assert (await describe(("user", 0, "bob")))["entries"] == []  # validate_only kept none
        assert (await describe(("user", 0, None)))["error_code"] == ErrorCode.INVALID_REQUEST
        assert (await describe(("team", 1, None)))["error_code"] == ErrorCode.INVALID_REQUEST
        removed = {
            "entity": [{"entity_type": "user", "entity_name": "alice"}],
            "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}],
        }
        assert await alter(removed) == [0]
        assert (await describe(("user", 2, None)))["entries"] == []

    run(scenario)


def test_metadata_finds_a_topic_by_its_id() -> None:
    async def scenario() -> None:
        broker = Broker()
        record = await broker.storage.topics.create(TOPIC, 2)
        body = {
            "topics": [
                {"topic_id": uuid.UUID(record.topic_id), "name": None},
                {"topic_id": uuid.uuid4(), "name": None},
            ],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        response = await broker.call(ApiKey.METADATA, 12, body)
        found, missing = response["topics"]
        assert (found["error_code"], found["name"], len(found["partitions"])) == (0, "orders", 2)
        assert found["topic_id"] == uuid.UUID(record.topic_id)
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID

    run(scenario)


def test_fetch_v13_names_topics_by_id() -> None:
    async def scenario() -> None:
        broker = Broker()
        record = await broker.storage.topics.create(TOPIC, 1)
        await broker.produce("orders", [b"a", b"b"])
        stranger = uuid.uuid4()

        def topic(topic_id: uuid.UUID) -> dict[str, Any]:
            partition = {
                "partition": 0,
                "current_leader_epoch": -1,
                "fetch_offset": 0,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": 1 << 20,
                "replica_directory_id": uuid.UUID(int=0),
            }
            return {"topic_id": topic_id, "partitions": [partition]}

        body = {
            "replica_state": {"replica_id": -1, "replica_epoch": -1},
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [topic(uuid.UUID(record.topic_id)), topic(stranger)],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        response = await broker.call(ApiKey.FETCH, 17, body)
        known, unknown = response["responses"]
        assert known["topic_id"] == uuid.UUID(record.topic_id)
        assert [v for _, v in fetched(known["partitions"][0])] == [b"a", b"b"]
        assert unknown["topic_id"] == stranger
        assert unknown["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID

    run(scenario)


def test_describe_producers_and_the_transactions_there_are_none_of() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 2)
        ids = await broker.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})
        pid = ids["producer_id"]
        batch = {"producer_id": pid, "producer_epoch": 0, "base_sequence": 0}
        await broker.produce("orders", [b"a", b"b", b"c"], **batch)
        body = {"topics": [{"name": "orders", "partition_indexes": [0, 1, 7]}]}
        described = await broker.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)
        zero, one, missing = described["topics"][0]["partitions"]
        assert [
            (p["producer_id"], p["producer_epoch"], p["last_sequence"])
            for p in zero["active_producers"]
        ] == [(pid, 0, 2)]
        assert one["active_producers"] == []
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        listed = await broker.call(
            ApiKey.LIST_TRANSACTIONS,
            1,
            {
                "state_filters": ["Ongoing", "Sleeping"],
                "producer_id_filters": [],
                "duration_filter": -1,
            },
        )
        assert listed["transaction_states"] == [] and listed["unknown_state_filters"] == [
            "Sleeping"
        ]
        txn = await broker.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-1"]})
        assert txn["transaction_states"][0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    run(scenario)


def test_list_config_resources_v1_lists_topics_brokers_and_groups_by_type() -> None:
    """KIP-1142: v1 lists every config resource type the gateway knows when none is asked
    for, only the asked types otherwise, each with its type; an unknown type is
    INVALID_REQUEST; v0 still lists client metrics only (none)."""

    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1)
        await broker.storage.topics.create(broker.context.pulsar_name("team/ns/other"), 1)
        await broker.storage.offsets.commit("readers", {f"{TOPIC}-partition-0": (3, "")})

        async def listed(types: list[int]) -> tuple[int, list[tuple[int, str]]]:
            answer = await broker.call(
                ApiKey.LIST_CLIENT_METRICS_RESOURCES, 1, {"resource_types": types}
            )
            pairs = [(r["resource_type"], r["name"]) for r in answer["client_metrics_resources"]]
            return answer["error_code"], pairs

        assert await listed([]) == (
            ErrorCode.NONE,
            [(2, "orders"), (2, "team/ns/other"), (4, "7"), (32, "readers")],
        )
        assert await listed([32, 2]) == (
            ErrorCode.NONE,
            [(32, "readers"), (2, "orders"), (2, "team/ns/other")],
        )
        assert await listed([16]) == (ErrorCode.NONE, [])
        assert (await listed([1]))[0] == ErrorCode.INVALID_REQUEST
        old = await broker.call(ApiKey.LIST_CLIENT_METRICS_RESOURCES, 0, {})
        assert old["error_code"] == 0 and old["client_metrics_resources"] == []

    run(scenario)
