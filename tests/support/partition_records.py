"""Every record of a partition, read from offset 0 to the end with confluent-kafka: what tests
check a log's exact contents with (dense offsets, nothing twice, nothing missing)."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.support.waiting import wait_until


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
