"""The gateway's own namespace (`pulsar.metadata_namespace`, `public/__gateway`) is not the
clients': no Kafka topic and no AMQP vhost may map into it, and a record there that is not
the gateway's (one non-JSON message used to stop every later start) is skipped at load,
counted in a metric and logged once."""

from __future__ import annotations

from pathlib import Path

import pika
import pulsar
import pytest

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from pulsar_gateway.kafka_codec.errors import ErrorCode

METADATA_TOPIC = "persistent://public/__gateway/metadata"
RESERVED_NAMES = [
    "public/__gateway/metadata",
    METADATA_TOPIC,
    "public/__gateway/metadata-snapshots",
    "public/__gateway/anything",
]
METADATA, FETCH, LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS = 3, 1, 2, 19, 20


@pytest.mark.parametrize("name", RESERVED_NAMES)
def test_kafka_topics_in_the_gateway_namespace_are_refused(gateway, name: str) -> None:
    port = gateway.kafka_port
    refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    assert kafka_wire.produce(port, name, [b"not json"])["error_code"] == refused

    metadata = kafka_wire.call(
        port, METADATA, 4, {"topics": [{"name": name}], "allow_auto_topic_creation": True}
    )
    assert [t["error_code"] for t in metadata["topics"]] == [refused]

    fetch = kafka_wire.call(
        port,
        FETCH,
        4,
        {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": name,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    assert fetch["responses"][0]["partitions"][0]["error_code"] == refused

    offsets = kafka_wire.call(
        port,
        LIST_OFFSETS,
        1,
        {
            "replica_id": -1,
            "topics": [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -2}]}],
        },
    )
    assert offsets["topics"][0]["partitions"][0]["error_code"] == refused

    created = kafka_wire.call(
        port,
        CREATE_TOPICS,
        4,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        },
    )
    assert created["topics"][0]["error_code"] == refused
    assert "__gateway" in created["topics"][0]["error_message"]

    deleted = kafka_wire.call(port, DELETE_TOPICS, 5, {"topic_names": [name], "timeout_ms": 1000})
    assert deleted["responses"][0]["error_code"] == refused


def test_amqp_vhost_in_the_gateway_namespace_is_refused(gateway) -> None:
    params = pika.ConnectionParameters(
        "127.0.0.1",
        gateway.amqp_port,
        "__gateway",
        pika.PlainCredentials("guest", "guest"),
        connection_attempts=1,
    )
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="403"):
        pika.BlockingConnection(params)
    # a vhost of a similar name is a namespace of its own, and is served
    similar = pika.ConnectionParameters(
        "127.0.0.1", gateway.amqp_port, "__gateway2", pika.PlainCredentials("guest", "guest")
    )
    connection = pika.BlockingConnection(similar)
    connection.channel().queue_declare("metadata")
    connection.close()


def test_a_foreign_record_in_the_metadata_log_is_skipped_at_start(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw").start()
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}")
        try:
            producer = client.create_producer(METADATA_TOPIC, batching_enabled=False)
            producer.send(b"\x00 not json", partition_key="kafka-topic/persistent://x/y/z")
            producer.send(b"{ still not json", partition_key="amqp/vhosts/x")
        finally:
            client.close()
        assert gateway.stop() == 0
        gateway.start()  # refused to start before: json.loads raised at load
        assert gateway.metric("gateway_metadata_unreadable_records") == 2
        log = gateway.log_path.read_text()
        assert log.count("skipping a record that is not JSON") == 1
    finally:
        gateway.stop()
