"""Fetch of a `pulsar`-format topic compresses as the topic's `compression.type` says
(issue 14): librdkafka produces with one codec and reads the records back, and the
gateway's raw Fetch answer carries the codec Kafka would serve."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka_wire import call
from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.record_batch import ATTR_CODEC_MASK, decode_batches
from tests.unit.test_fetch_limits import fetch_body

FETCH = 1
# (topic compression.type, the producer's codec, the codec Fetch must serve)
CASES = [
    ("producer", "lz4", compression.LZ4),
    ("producer", "none", compression.NONE),
    ("gzip", "none", compression.GZIP),
    ("snappy", "zstd", compression.SNAPPY),
    ("lz4", "gzip", compression.LZ4),
    ("zstd", "snappy", compression.ZSTD),
    ("uncompressed", "gzip", compression.NONE),
]
VALUES = [b"value-%03d " % i * 20 for i in range(30)]


def _read(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(200):
            if len(values) >= len(VALUES):
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_fetch_serves_the_codec_the_topic_says(gateway, topic_name) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    for number, (topic_codec, producer_codec, served) in enumerate(CASES):
        topic = f"{topic_name}-{number}"
        config = {"compression.type": topic_codec}
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
        producer = Producer(
            {
                "bootstrap.servers": gateway.bootstrap,
                "compression.type": producer_codec,
                "linger.ms": 50,
            }
        )
        for value in VALUES:
            producer.produce(topic, value, partition=0)
        assert producer.flush(30) == 0
        assert _read(gateway.bootstrap, topic) == VALUES, topic_codec
        answer = call(gateway.kafka_port, FETCH, 12, fetch_body([(topic, 0, 0, 1 << 20)]))
        records = bytes(answer["responses"][0]["partitions"][0]["records"] or b"")
        batches = decode_batches(records)
        assert [r.value for b in batches for r in b.records] == VALUES
        assert {b.attributes & ATTR_CODEC_MASK for b in batches} == {served}, topic_codec
