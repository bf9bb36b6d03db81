"""Issue 15's fetch-size scenario, for a test and for bench/fetch_sizes.py alike: one partition
holding small records then large ones, read by confluent-kafka with a small
`max.partition.fetch.bytes` and librdkafka's defaults otherwise. A broker that ignores the
limits answers with responses librdkafka refuses ("Invalid response size"), and the consumer
stalls on each; one that follows Kafka's rules (KIP-74) streams them through."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition

SMALL = (1000, 10_000)  # records, bytes each
LARGE = (1000, 500_000)
PARTITION_MAX_BYTES = 100_000


def value(index: int, size: int) -> bytes:
    """A record value that says where it belongs."""
    head = b"%08d:" % index
    return head + b"v" * (size - len(head))


def produce(
    bootstrap: str, topic: str, small: tuple[int, int] = SMALL, large: tuple[int, int] = LARGE
) -> int:
    """Small records, then large ones, into partition 0; returns how many."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "compression.type": "none",
            "enable.idempotence": True,  # retries under load must not reorder or repeat
        }
    )
    index = 0
    for count, size in (small, large):
        for _ in range(count):
            while True:
                try:
                    producer.produce(topic, value(index, size), partition=0)
                    break
                except BufferError:
                    producer.poll(0.1)
            index += 1
    assert producer.flush(300) == 0, "records left unsent"
    return index


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class Consumed:
    count: int = 0
    seconds: float = 0.0
    out_of_order: int = 0  # records whose value does not follow the one before
    client_errors: list[str] = field(default_factory=list)  # librdkafka's error logs


def consume(bootstrap: str, topic: str, expected: int, deadline_seconds: float) -> Consumed:
    """Read partition 0 from the start until `expected` records came or the deadline passed,
    with `max.partition.fetch.bytes` 100000 and everything else at librdkafka's defaults."""
    collect = _Collect()
    logger = logging.getLogger(f"rdkafka.{topic}")
    logger.addHandler(collect)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    errors: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": PARTITION_MAX_BYTES,
            "error_cb": lambda error: errors.append(str(error)),
        },
        logger=logger,
    )
    result = Consumed()
    last = -1
    started = time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while result.count < expected and time.monotonic() - started < deadline_seconds:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            index = int(message.value()[:8])
            if index != last + 1:
                result.out_of_order += 1
            last = index
            result.count += 1
        result.seconds = time.monotonic() - started
    finally:
        consumer.close()
    result.client_errors = errors + [line for line in collect.lines if "response" in line.lower()]
    return result
