"""The Kafka admin APIs beyond topic create/delete, through confluent-kafka's AdminClient and
kafka-python's admin client against a real gateway: configs altered after creation (and
applied to the next produce), records deleted (consumers start after them), a preferred
leader election that is not needed, and consumers that keep working now that the gateway
answers OffsetForLeaderEpoch (librdkafka validates its position with it)."""

from __future__ import annotations

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka import KafkaConsumer
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey


def _admin(gateway: GatewayProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": gateway.bootstrap})


def _fill(gateway: GatewayProcess, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for number in range(count):
        producer.produce(topic, b"%06d" % number)
    assert producer.flush(30) == 0


def _described(gateway: GatewayProcess, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(gateway)  # held until the result is in: a dropped client cancels it
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()}


def _incremental(topic: str, name: str, value: str) -> ConfigResource:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    return ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])


def test_altered_configs_are_stored_shown_and_applied(
    gateway: GatewayProcess, topic_name: str
) -> None:
    admin = _admin(gateway)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    resource = _incremental(topic_name, "max.message.bytes", "300")
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert _described(gateway, topic_name)["max.message.bytes"] == "300"
    # kafka-python changes another through AlterConfigs (the non-incremental API)
    kp = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        changed = KpConfigResource(
            ConfigResourceType.TOPIC,
            topic_name,
            configs={"max.message.bytes": "300", "retention.ms": "120000"},
        )
        kp.alter_configs([changed], incremental=False)
    finally:
        kp.close()
    shown = _described(gateway, topic_name)
    assert (shown["max.message.bytes"], shown["retention.ms"]) == ("300", "120000")

    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    failures: list[KafkaError] = []
    producer.produce(topic_name, b"x" * 1000, on_delivery=lambda err, _m: failures.append(err))
    producer.flush(30)
    assert failures and failures[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    bad = _incremental(topic_name, "retention.ms", "soon")
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert _described(gateway, topic_name)["retention.ms"] == "120000"


def test_delete_records_moves_where_consumers_start(
    gateway: GatewayProcess, topic_name: str
) -> None:
    admin = _admin(gateway)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    _fill(gateway, topic_name, 10)
    cut = TopicPartition(topic_name, 0, 6)
    assert admin.delete_records([cut])[cut].result(30).low_watermark == 6
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"g-{topic_name}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=30)
        assert (low, high) == (6, 10)
        consumer.subscribe([topic_name])
        seen: list[int] = []
        while len(seen) < 4:
            message = consumer.poll(30)
            assert message is not None, f"only {seen} arrived"
            assert message.error() is None, message.error()
            seen.append(message.offset())
        assert seen == [6, 7, 8, 9]
    finally:
        consumer.close()


def test_preferred_election_is_not_needed(gateway: GatewayProcess, topic_name: str) -> None:
    admin = _admin(gateway)
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)])
    error = future.result(30)[TopicPartition(topic_name, 0)]
    assert error is not None and error.code() == KafkaError.ELECTION_NOT_NEEDED


def test_log_dirs_through_kafka_python(gateway: GatewayProcess, topic_name: str) -> None:
    admin = _admin(gateway)
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    kp = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        described = kp.describe_log_dirs()
    finally:
        kp.close()
    text = repr(described)
    assert "pulsar" in text and topic_name in text, text


def test_describe_producers_shows_an_idempotent_producer(
    gateway: GatewayProcess, topic_name: str
) -> None:
    """kafka-transactions describe-producers' request, against the real partition log: the
    idempotent producer librdkafka used is there with its epoch and last sequence."""
    admin = _admin(gateway)
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "enable.idempotence": True})
    for number in range(5):
        producer.produce(topic_name, b"%d" % number)
    assert producer.flush(30) == 0
    body = {"topics": [{"name": topic_name, "partition_indexes": [0]}]}
    answer = kafka_wire.call(gateway.kafka_port, ApiKey.DESCRIBE_PRODUCERS, 0, body)
    [partition] = answer["topics"][0]["partitions"]
    assert partition["error_code"] == 0
    [active] = partition["active_producers"]
    assert active["producer_id"] >= 0 and active["last_sequence"] == 4


def test_describe_configs_types_every_key_and_names_the_listeners(
    gateway: GatewayProcess, topic_name: str
) -> None:
    """The broker resource carries the listener keys clients read, with source and
    read-only flag (confluent-kafka); every entry has its Kafka type (DescribeConfigs v4 on
    the wire: confluent-kafka does not show the type)."""
    admin = _admin(gateway)
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.bytes": "1000"})])[
        topic_name
    ].result(30)
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([broker])[broker].result(30)
    advertised = entries["advertised.listeners"]
    assert advertised.value == f"PLAINTEXT://127.0.0.1:{gateway.kafka_port}"
    assert advertised.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert advertised.is_read_only
    assert entries["listeners"].value == f"PLAINTEXT://127.0.0.1:{gateway.kafka_port}"
    assert entries["delete.topic.enable"].value == "true"
    assert entries["group.consumer.assignors"].value == "uniform,range"
    assert entries["ssl.key.password"].is_sensitive and entries["ssl.key.password"].value is None

    answer = kafka_wire.call(
        gateway.kafka_port,
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": topic_name, "configuration_keys": None},
                {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
            ],
            "include_synonyms": False,
            "include_documentation": True,
        },
    )
    topic, node = ({c["name"]: c for c in r["configs"]} for r in answer["results"])
    long, int_, boolean, string, list_, double = 5, 3, 1, 2, 7, 6  # Kafka's ConfigType
    assert topic["retention.bytes"]["config_type"] == long
    assert topic["retention.bytes"]["value"] == "1000"
    assert topic["max.message.bytes"]["config_type"] == int_
    assert topic["preallocate"]["config_type"] == boolean
    assert topic["compression.type"]["config_type"] == string
    assert topic["cleanup.policy"]["config_type"] == list_
    assert topic["min.cleanable.dirty.ratio"]["config_type"] == double
    assert node["ssl.key.password"]["config_type"] == 9  # PASSWORD
    assert node["principal.builder.class"]["config_type"] == 8  # CLASS
    assert all(entry["config_type"] != 0 for entry in [*topic.values(), *node.values()])
    assert all(entry["documentation"] for entry in [*topic.values(), *node.values()])


def test_version_inference_names_the_release_of_the_served_apis(gateway: GatewayProcess) -> None:
    """kafka-python infers the broker's release from ApiVersions (the newest version of a
    few marker APIs). The gateway serves every API up to the newest stable version in the
    Kafka 4.0 definitions it is generated from (docs/compatibility.md), so it is taken for
    Kafka 4.0: not older (ListOffsets v10 is 4.0's marker) and not newer (4.1's marker,
    Produce v13, is not in those definitions)."""
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap)
    try:
        assert consumer.config["api_version"] == (4, 0)
    finally:
        consumer.close()


def test_list_config_resources_lists_topics_brokers_and_groups(
    gateway: GatewayProcess, topic_name: str
) -> None:
    """kafka-python 3.0's `list_config_resources` (ListConfigResources v1, KIP-1142): the
    topics, the broker and the groups, by type, and only the types asked for."""
    creator = _admin(gateway)
    creator.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    group = f"g-{topic_name}"
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        every = admin.list_config_resources()
        assert topic_name in every["topic"]
        assert group in every["group"]
        assert len(every["broker"]) == 1  # the one gateway
        only = admin.list_config_resources([ConfigResourceType.TOPIC])
        assert set(only) == {"topic"} and topic_name in only["topic"]
    finally:
        admin.close()
