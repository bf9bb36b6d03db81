"""Fetch size limits with a real librdkafka consumer (issue 15): small records then large ones
in one partition, read with `max.partition.fetch.bytes` 100000. The gateway used to answer
100+ MB Fetch responses that librdkafka refused ("Invalid response size"), stalling the
consumer ~19 s each time; now every response keeps Kafka's limits (KIP-74 included) in both
entry formats and for records Pulsar stores chunked, and the consumer streams through."""

from __future__ import annotations

import socket

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import fetch_scenario
from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import decode_batches
from tests.unit.test_fetch_limits import fetch_body

FETCH = 1
LIBRDKAFKA_RECEIVE_MAX = 100_000_000  # receive.message.max.bytes' default


def walk(port: int, topic: str, partition_max: int) -> list[int]:
    """Read the whole partition through the gateway's own protocol as librdkafka asks
    (fetch.max.bytes 52428800); check every answer's size; the record count of each."""
    offset, counts = 0, []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        while True:
            body = fetch_body([(topic, 0, offset, partition_max)], max_bytes=52_428_800)
            sock.sendall(protocol.encode_request(FETCH, 12, len(counts), "walk", body))
            frame = recv_frame(sock)
            assert len(frame) < LIBRDKAFKA_RECEIVE_MAX
            answer = protocol.decode_response(FETCH, 12, memoryview(frame))
            partition = answer["responses"][0]["partitions"][0]
            records = bytes(partition["records"] or b"")
            if not records:
                assert offset == partition["high_watermark"]
                return counts
            counts.append(_checked(records, offset, partition_max))
            offset += counts[-1]


def _checked(records: bytes, offset: int, partition_max: int) -> int:
    """How many records from `offset` a Fetch answer holds, once its size is checked."""
    batches = decode_batches(records)
    # within the partition's limit, or one batch alone that is larger (KIP-74)
    assert len(records) <= partition_max or len(batches) == 1, (offset, len(records))
    return batches[-1].base_offset + batches[-1].last_offset_delta + 1 - offset


def test_small_then_large_records_stream_to_librdkafka_without_stalling(
    gateway, topic_name
) -> None:
    expected = fetch_scenario.produce(gateway.bootstrap, topic_name)
    consumed = fetch_scenario.consume(gateway.bootstrap, topic_name, expected, 180)
    print(f"\n2,000 records (10 kB, then 500 kB) read in {consumed.seconds:.1f} s")
    assert consumed.client_errors == []
    assert consumed.count == expected == 2000 and consumed.out_of_order == 0
    # the gateway's own answers: 100 kB, or one batch as librdkafka produced it (at most its
    # batch.size, 1 MB: 100 records of 10 kB), which Kafka hands out whole (KIP-74)
    counts = walk(gateway.kafka_port, topic_name, fetch_scenario.PARTITION_MAX_BYTES)
    assert sum(counts) == 2000 and max(counts) <= 100


def test_kafka_entry_format_and_chunked_records_make_progress(gateway, topic_name) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    configs = {"pulsar.entry.format": "kafka", "max.message.bytes": "20000000"}
    admin.create_topics([NewTopic(topic_name, 1, 1, config=configs)])[topic_name].result(30)
    # idempotent, so that a retried batch cannot land behind the ones sent after it (this
    # test reads the records back in order; a plain producer with five requests in flight
    # may reorder on a retry, as against Kafka)
    producer = Producer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "message.max.bytes": 10_000_000,
            "enable.idempotence": True,
        }
    )
    sizes = [10_000] * 50 + [7 * 1024 * 1024] + [500_000] * 10 + [10_000] * 50
    for index, size in enumerate(sizes):
        producer.produce(topic_name, fetch_scenario.value(index, size), partition=0)
        producer.poll(0)
    assert producer.flush(120) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": "chunks",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 100_000,
        }
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got: list[int] = []
    try:
        for _ in range(600):
            message = consumer.poll(1)
            if message is not None and not message.error():
                got.append(int(message.value()[:8]))
                assert len(message.value()) == sizes[got[-1]]
            if len(got) == len(sizes):
                break
    finally:
        consumer.close()
    assert got == list(range(len(sizes)))
    counts = walk(gateway.kafka_port, topic_name, 100_000)
    assert sum(counts) == len(sizes)
