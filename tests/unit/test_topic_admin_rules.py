"""CreateTopics/CreatePartitions as Kafka checks them (config names and values, partitions,
replication factor, assignments, validate_only), the gateway's partition limits, what
DescribeConfigs reports, and the docs table that lists every config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.apis.broker_configs import BROKER_CONFIGS
from pulsar_gateway.handlers.kafka.apis.configs import TOPIC_CONFIGS
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.unit.test_kafka_apis import Broker, run

DOCS = Path(__file__).resolve().parents[2] / "docs" / "kafka-configs.md"


def topic(name: str, partitions: int = 1, factor: int = 1, **extra: Any) -> dict[str, Any]:
    configs = extra.pop("configs", {})
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": factor,
        "assignments": extra.pop("assignments", []),
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }


async def create(broker: Broker, *topics: dict[str, Any], validate_only: bool = False) -> Any:
    body = {"topics": list(topics), "timeout_ms": 1000, "validate_only": validate_only}
    return (await broker.call(ApiKey.CREATE_TOPICS, 7, body))["topics"]


async def grow(broker: Broker, name: str, count: int, validate_only: bool = False) -> Any:
    body = {
        "topics": [{"name": name, "count": count, "assignments": None}],
        "timeout_ms": 1000,
        "validate_only": validate_only,
    }
    return (await broker.call(ApiKey.CREATE_PARTITIONS, 3, body))["results"][0]


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"retention.ms": "soon"}, "Not a number of type LONG"),
        ({"retention.ms": "1_000"}, "Not a number of type LONG"),
        ({"max.message.bytes": "-5"}, "Value must be at least 0"),
        ({"max.message.bytes": "99999999999"}, "Not a number of type INT"),
        ({"min.cleanable.dirty.ratio": "2"}, "Value must be no more than 1"),
        ({"preallocate": "yes"}, "Expected value to be either true or false"),
        ({"cleanup.policy": "compact,sometimes"}, "String must be one of: compact, delete"),
        ({"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        ({"pulsar.entry.format": "avro"}, "String must be one of: pulsar, kafka"),
    ],
)
def test_invalid_configs_are_refused_with_kafkas_message(
    configs: dict[str, str | None], message: str
) -> None:
    async def scenario() -> None:
        broker = Broker()
        for validate_only in (True, False):
            [result] = await create(
                broker, topic("t", configs=configs), validate_only=validate_only
            )
            assert result["error_code"] == ErrorCode.INVALID_CONFIG
            assert message in result["error_message"]
        assert broker.storage.topics.get("persistent://public/default/t") is None

    run(scenario)


def test_valid_configs_are_kept_and_described() -> None:
    async def scenario() -> None:
        broker = Broker(message_max_bytes=2_000_000)
        configs = {
            "cleanup.policy": "compact,delete",
            "retention.ms": " 5 ",
            "max.message.bytes": "5000000",
            "min.cleanable.dirty.ratio": "0.2",
            "preallocate": "TRUE",
        }
        made = await create(broker, topic("t", configs=configs), topic("u"))
        assert [r["error_code"] for r in made] == [ErrorCode.NONE] * 2
        body = {
            "resources": [
                {"resource_type": 2, "resource_name": name, "configuration_keys": None}
                for name in ("t", "u")
            ]
            + [{"resource_type": 4, "resource_name": "7", "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        }
        described = (await broker.call(ApiKey.DESCRIBE_CONFIGS, 4, body))["results"]
        t, u, node = ({c["name"]: c["value"] for c in r["configs"]} for r in described)
        assert t["max.message.bytes"] == "5000000" and t["cleanup.policy"] == "compact,delete"
        assert u["max.message.bytes"] == "2000000"  # the gateway's message.max.bytes
        assert set(u) == set(TOPIC_CONFIGS)  # every topic config, as Kafka lists them
        assert node["message.max.bytes"] == "2000000"
        assert node["fetch.max.bytes"] == str(55 * 1024 * 1024)

    run(scenario)


def test_validate_only_creates_nothing() -> None:
    async def scenario() -> None:
        broker = Broker()
        [result] = await create(broker, topic("t", 3), validate_only=True)
        assert result["error_code"] == ErrorCode.NONE and result["num_partitions"] == 3
        assert broker.storage.topics.get("persistent://public/default/t") is None
        [again] = await create(broker, topic("t", 3))
        assert again["error_code"] == ErrorCode.NONE

    run(scenario)


def test_partitions_replication_factor_and_assignments_as_kafka_checks_them() -> None:
    async def scenario() -> None:
        broker = Broker()  # node 7
        cases = {
            "zero": (topic("zero", 0), ErrorCode.INVALID_PARTITIONS),
            "negative": (topic("negative", -3), ErrorCode.INVALID_PARTITIONS),
            "rf0": (topic("rf0", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
            "rf3": (topic("rf3", 1, 3), ErrorCode.INVALID_REPLICATION_FACTOR),
            "rf-1": (topic("rf-1", -1, -1), ErrorCode.NONE),
            "both": (
                topic("both", 2, 1, assignments=[{"partition_index": 0, "broker_ids": [7]}]),
                ErrorCode.INVALID_REQUEST,
            ),
            "gap": (
                topic("gap", -1, -1, assignments=[{"partition_index": 1, "broker_ids": [7]}]),
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ),
            "stranger": (
                topic("stranger", -1, -1, assignments=[{"partition_index": 0, "broker_ids": [3]}]),
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ),
            "assigned": (
                topic(
                    "assigned",
                    -1,
                    -1,
                    assignments=[{"partition_index": i, "broker_ids": [7]} for i in (1, 0)],
                ),
                ErrorCode.NONE,
            ),
        }
        results = await create(broker, *(case for case, _ in cases.values()))
        for result, (name, (_, code)) in zip(results, cases.items(), strict=True):
            assert result["error_code"] == code, (name, result["error_message"])
            assert code == ErrorCode.NONE or result["error_message"]
        assert broker.storage.topics.get("persistent://public/default/assigned").partitions == 2
        twice = await create(broker, topic("dup"), topic("dup"))
        assert [r["error_code"] for r in twice] == [ErrorCode.INVALID_REQUEST] * 2

    run(scenario)


def test_partition_limits_per_topic_and_in_total() -> None:
    async def scenario() -> None:
        broker = Broker(max_partitions_per_topic=100, max_partitions_total=250)
        [wide] = await create(broker, topic("wide", 101))
        assert wide["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert "kafka.max_partitions_per_topic" in wide["error_message"]
        results = await create(broker, topic("a", 100), topic("b", 100), topic("c", 60))
        codes = [r["error_code"] for r in results]
        assert codes == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.POLICY_VIOLATION]
        assert "kafka.max_partitions_total" in results[2]["error_message"]
        assert (await create(broker, topic("c", 50)))[0]["error_code"] == ErrorCode.NONE
        assert broker.storage.topics.total_partitions() == 250
        for validate_only in (True, False):
            grown = await grow(broker, "c", 51, validate_only)
            assert grown["error_code"] == ErrorCode.POLICY_VIOLATION
        assert (await grow(broker, "a", 101))["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert broker.storage.topics.total_partitions() == 250

    run(scenario)


def test_auto_created_topics_count_against_the_total() -> None:
    async def scenario() -> None:
        broker = Broker(max_partitions_per_topic=10, max_partitions_total=10, default_partitions=4)
        for name in ("auto-a", "auto-b"):
            assert (await broker.produce(name, [b"v"]))["error_code"] == ErrorCode.NONE
        assert broker.storage.topics.total_partitions() == 8
        refused = await broker.produce("auto-c", [b"v"])
        assert refused["error_code"] == ErrorCode.POLICY_VIOLATION
        assert broker.storage.topics.get("persistent://public/default/auto-c") is None
        assert broker.storage.topics.total_partitions() == 8

    run(scenario)


def test_validate_only_counts_what_it_would_have_created() -> None:
    async def scenario() -> None:
        broker = Broker(max_partitions_per_topic=100, max_partitions_total=250)
        results = await create(
            broker, topic("x", 100), topic("y", 100), topic("z", 100), validate_only=True
        )
        codes = [r["error_code"] for r in results]
        assert codes == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.POLICY_VIOLATION]
        assert broker.storage.topics.total_partitions() == 0

    run(scenario)


def test_default_partitions_above_the_limit_stops_start_up() -> None:
    with pytest.raises(ValueError, match="max_partitions_per_topic"):
        KafkaSection(default_partitions=50, max_partitions_per_topic=10)


def test_docs_table_lists_every_topic_config_and_broker_setting() -> None:
    text = DOCS.read_text()
    rows = set(re.findall(r"^\| `([a-z0-9._]+)` \|", text, re.MULTILINE))
    assert set(TOPIC_CONFIGS) <= rows
    assert {config.name for config in BROKER_CONFIGS} <= rows
    for name in KafkaSection.model_fields:
        if "partition" in name or name.startswith(("tail_cache", "max_produce", "message_max")):
            assert f"`kafka.{name}`" in text, name
