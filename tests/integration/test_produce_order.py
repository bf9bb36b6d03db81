"""One producer's records are stored in the order it sent them, per partition, with every
client the project tests (Kafka's promise for a producer without retries, which pipelines up
to five requests per connection). The topics are fresh, so the first requests race the
topic's creation and the partitions' opening, and each run also writes another producer's
records to other partitions of the same topic at the same time
(handlers/kafka/request_order.py; the property test in tests/unit/test_request_order.py
holds the listener to it with random storage waits)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from harness.cpu_hogs import burning_cpus
from harness.send_order import PRODUCERS, create_topic, read_back

RECORDS = 6000

CASES = [
    ("confluent-kafka", "all", "none", 1),
    ("confluent-kafka", "1", "lz4", 3),
    ("confluent-kafka", "all", "zstd", 3),
    ("kafka-python", "all", "gzip", 1),
    ("kafka-python", "1", "none", 3),
    ("aiokafka", "all", "none", 3),
    ("aiokafka", "1", "lz4", 1),
    ("kcat", "all", "snappy", 1),
    ("kcat", "1", "none", 3),
]


@pytest.mark.parametrize(("client", "acks", "codec", "partitions"), CASES)
def test_one_producer_keeps_send_order(gateway, client, acks, codec, partitions) -> None:
    topic = f"order-{uuid.uuid4().hex[:10]}"
    if partitions > 1:
        create_topic(gateway.bootstrap, topic, partitions + 1)
    # beside it, another producer on the topic's last partition (or, on a one-partition
    # topic the first Produce creates, on a topic of its own)
    other = topic if partitions > 1 else f"{topic}-beside"
    beside = threading.Thread(
        target=_write_beside, args=(gateway.bootstrap, other, partitions), daemon=True
    )
    beside.start()
    PRODUCERS[client](gateway.bootstrap, topic, RECORDS, partitions, acks, codec)
    beside.join(60)
    verdict = read_back(gateway.bootstrap, topic, partitions + 1, RECORDS)
    assert verdict.ok, verdict.first_problem or verdict


@pytest.mark.parametrize(("client", "acks", "codec", "partitions"), [CASES[1], CASES[3]])
def test_send_order_holds_under_load(gateway, client, acks, codec, partitions) -> None:
    """The same, with a busy process per core competing with the gateway and its broker."""
    with burning_cpus(os.cpu_count() or 2):
        test_one_producer_keeps_send_order(gateway, client, acks, codec, partitions)


def _write_beside(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for _ in range(2000):
        producer.produce(topic, b"beside", partition=partitions if partitions > 1 else 0)
        producer.poll(0)
    producer.flush(60)
