"""Kafka's produce rules as librdkafka sees them (issue 15): MESSAGE_TOO_LARGE above the
topic's `max.message.bytes`, KIP-467 record errors that fail exactly the bad messages,
LogAppendTime stamps, CreateTopics validation, and no gateway bookkeeping in what Kafka or
Pulsar consumers see."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from harness.partition_records import read_messages

DOCS = Path(__file__).resolve().parents[2] / "docs"


def admin(gateway) -> AdminClient:
    return AdminClient({"bootstrap.servers": gateway.bootstrap})


def create(gateway, name: str, configs: dict[str, str], partitions: int = 1) -> None:
    client = admin(gateway)  # kept: a collected client cancels its requests
    client.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(30)


def deliver(gateway, topic: str, messages: list[dict], **settings) -> list[KafkaError | None]:
    """Produce `messages` (produce() keyword arguments) as one batch; each one's outcome.

    The topic's metadata is fetched first: produced to a topic it did not know yet,
    librdkafka parked the messages until its metadata came and, flushing, sent them as they
    were moved over, in up to one batch each (seen beside busy loops, cc47). The linger is
    never waited out: flush() sends at once."""
    outcomes: dict[int, KafkaError | None] = {}
    producer = Producer(
        {"bootstrap.servers": gateway.bootstrap, "linger.ms": 5000, "retries": 0, **settings}
    )
    producer.list_topics(topic, timeout=30)
    for index, message in enumerate(messages):
        producer.produce(
            topic,
            partition=0,
            on_delivery=lambda error, _msg, index=index: outcomes.__setitem__(index, error),
            **message,
        )
    assert producer.flush(60) == 0
    return [outcomes[index] for index in range(len(messages))]


def read(gateway, topic: str, count: int) -> list:
    return read_messages(gateway.bootstrap, topic, count)


def code(error: KafkaError | None) -> int | None:
    return None if error is None else error.code()


def test_records_above_max_message_bytes_are_refused_unless_the_topic_allows(
    gateway, topic_name
) -> None:
    big = b"B" * 1_500_000
    settings = {"message.max.bytes": 20_000_000}
    [refused] = deliver(gateway, topic_name, [{"value": big}], **settings)
    assert code(refused) == KafkaError.MSG_SIZE_TOO_LARGE
    roomy = topic_name + "-roomy"
    create(gateway, roomy, {"max.message.bytes": "20000000"})
    huge = b"H" * 12_000_000  # stored chunked by Pulsar
    assert deliver(gateway, roomy, [{"value": big}, {"value": huge}], **settings) == [None] * 2
    resources = [ConfigResource("topic", topic_name), ConfigResource("topic", roomy)]
    client = admin(gateway)
    described = client.describe_configs(resources)
    limits = [described[r].result(30)["max.message.bytes"].value for r in resources]
    assert limits == ["1048588", "20000000"]


def test_record_errors_fail_exactly_the_bad_messages(gateway, topic_name) -> None:
    create(gateway, topic_name, {"message.timestamp.difference.max.ms": "60000"})
    now = int(time.time() * 1000)
    stamps = [now, now - 3_600_000, now, now + 3_600_000]
    outcomes = deliver(gateway, topic_name, [{"value": b"v", "timestamp": t} for t in stamps])
    # librdkafka marks each record the response names INVALID_RECORD and every other record
    # of the batch INVALID_DIFFERENT_RECORD (the partition's INVALID_TIMESTAMP and each
    # record's message are checked on the wire by tests/unit/test_produce_rules.py)
    assert [code(o) for o in outcomes] == [
        KafkaError._INVALID_DIFFERENT_RECORD,
        KafkaError.INVALID_RECORD,
        KafkaError._INVALID_DIFFERENT_RECORD,
        KafkaError.INVALID_RECORD,
    ]
    # with one bad record librdkafka gives every message of the batch the partition's code
    # (as against Kafka): here INVALID_TIMESTAMP itself
    outcomes = deliver(gateway, topic_name, [{"value": b"v", "timestamp": t} for t in stamps[:3]])
    assert [code(o) for o in outcomes] == [KafkaError.INVALID_TIMESTAMP] * 3
    compacted = topic_name + "-compacted"
    create(gateway, compacted, {"cleanup.policy": "compact"})
    keys = [b"a", None, None, b"d"]
    outcomes = deliver(gateway, compacted, [{"key": k, "value": b"v"} for k in keys])
    assert [code(o) for o in outcomes] == [
        KafkaError._INVALID_DIFFERENT_RECORD,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_RECORD,
        KafkaError._INVALID_DIFFERENT_RECORD,
    ]
    assert deliver(gateway, compacted, [{"key": b"k", "value": b"ok"}]) == [None]
    assert [m.value() for m in read(gateway, compacted, 1)] == [b"ok"]


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_log_append_time_topics_stamp_on_append(gateway, topic_name, entry_format) -> None:
    create(
        gateway,
        topic_name,
        {"message.timestamp.type": "LogAppendTime", "pulsar.entry.format": entry_format},
    )
    stamps: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    before = int(time.time() * 1000)
    producer.produce(
        topic_name,
        b"v",
        timestamp=1_000_000,
        on_delivery=lambda error, message: stamps.append(message.timestamp()),
    )
    assert producer.flush(30) == 0
    [(kind, stamp)] = stamps  # librdkafka takes it from log_append_time_ms
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= time.time() * 1000
    [message] = read(gateway, topic_name, 1)
    assert message.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, stamp)


def test_create_topics_is_validated_as_kafka_validates_it(gateway, topic_name) -> None:
    client = admin(gateway)

    def failure(*topics: NewTopic, validate_only: bool = False) -> KafkaError:
        futures = client.create_topics(list(topics), validate_only=validate_only)
        with pytest.raises(KafkaException) as caught:
            futures[topics[0].topic].result(30)
        return caught.value.args[0]

    unknown = failure(NewTopic(topic_name, 1, 1, config={"retention.mss": "1"}))
    assert unknown.code() == KafkaError.INVALID_CONFIG
    assert "Unknown topic config name: retention.mss" in unknown.str()
    bad = failure(NewTopic(topic_name, 1, 1, config={"retention.ms": "soon"}))
    assert bad.code() == KafkaError.INVALID_CONFIG and "LONG" in bad.str()
    assert failure(NewTopic(topic_name, 1, 3)).code() == KafkaError.INVALID_REPLICATION_FACTOR
    wide = failure(NewTopic(topic_name, 10_001, 1))
    assert wide.code() == KafkaError.INVALID_PARTITIONS
    client.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True)[topic_name].result(30)
    assert topic_name not in client.list_topics(timeout=30).topics  # validate_only: nothing
    create(gateway, topic_name, {})
    grow = client.create_partitions([NewPartitions(topic_name, 10_001)])[topic_name]
    with pytest.raises(KafkaException) as caught:
        grow.result(30)
    assert caught.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_no_gateway_bookkeeping_reaches_kafka_or_pulsar_consumers(gateway, topic_name) -> None:
    headers = [("zeta", b"1"), ("alpha", b"2")]  # not in name order: the order is kept too
    assert deliver(gateway, topic_name, [{"value": b"v", "key": b"k", "headers": headers}]) == [
        None
    ]
    [message] = read(gateway, topic_name, 1)
    assert message.headers() == headers  # and nothing of the gateway's
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{gateway.broker_port}",
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic_name}-partition-0", pulsar.MessageId.earliest
        )
        properties = reader.read_next(10000).properties()
    finally:
        client.close()
    documented = set(
        re.findall(r"^\| `(__[a-z.-]+)` \|", (DOCS / "pulsar-mapping.md").read_text(), re.M)
    )
    bookkeeping = set(properties) - {"zeta", "alpha"}
    # what a Pulsar consumer sees beyond the headers is documented (and namespaced)
    assert bookkeeping and bookkeeping <= documented
    assert all(name.startswith(("__gw.", "__kafka.")) for name in bookkeeping)
