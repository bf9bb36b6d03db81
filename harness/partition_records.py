"""Records of a partition read from offset 0 with confluent-kafka: every one to the end (what
tests check a log's exact contents with: dense offsets, nothing twice, nothing missing), or
the first few as whole messages."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from harness.waiting import wait_until


def read_to_end(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    timeout: float = 60,
    isolation_level: str = "read_uncommitted",
) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition, up to its end as of the read (for
    `read_committed`: its last stable offset, aborted records left out)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "read-to-end",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation_level,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    rows: list[tuple[int, bytes]] = []

    def at_end() -> bool:
        msg = consumer.poll(1)
        if msg is None:
            return False
        if msg.error():
            return msg.error().code() == KafkaError._PARTITION_EOF
        rows.append((msg.offset(), msg.value()))
        return False

    try:
        wait_until(at_end, timeout, 0, f"the end of {topic}-{partition}")
    finally:
        consumer.close()
    return rows


def read_messages(
    bootstrap: str, topic: str, count: int, partition: int = 0, timeout: float = 30
) -> list[Message]:
    """Up to `count` records of the partition from offset 0, as confluent-kafka messages (key,
    headers, timestamp and all); fewer if `timeout` seconds pass first, for the caller's
    assertion to name what is missing."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "read-messages", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                got.append(msg)
    finally:
        consumer.close()
    return got
