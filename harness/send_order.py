"""One producer per client library writing numbered records, and a check that each partition
holds them in the order sent: Kafka's ordering promise for a producer without retries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kcat import run_kcat

# the record's value: its number in send order, and padding to make batches of some size
PAD = b"." * 80


def value_of(number: int) -> bytes:
    return b"%d|" % number + PAD


def number_of(value: bytes) -> int:
    return int(value.split(b"|", 1)[0])


def key_of(number: int, partitions: int) -> bytes:
    """Each key names one partition (records of one key stay in send order)."""
    return b"k%d" % (number % partitions)


@dataclass
class Verdict:
    """What was read back: per partition (or key), numbers out of order, missing, doubled."""

    records: int = 0
    out_of_order: int = 0
    missing: int = 0
    duplicated: int = 0
    first_problem: str = ""
    per_partition: dict[int, list[int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.out_of_order or self.missing or self.duplicated)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_back(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 60
) -> Verdict:
    """Every record of the topic, checked: within each partition the numbers of each key
    rise, and together they are 0..count-1 exactly once."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, index, 0) for index in range(partitions)])
    verdict = Verdict()
    seen: set[int] = set()
    last: dict[tuple[int, bytes], int] = {}
    deadline = time.monotonic() + timeout
    try:
        while verdict.records < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error():
                    continue
                if b"|" not in (message.value() or b""):
                    continue  # another producer's, beside this one
                number = number_of(message.value())
                verdict.records += 1
                verdict.per_partition.setdefault(message.partition(), []).append(number)
                if number in seen:
                    verdict.duplicated += 1
                seen.add(number)
                key = (message.partition(), message.key() or b"")
                if key in last and number < last[key]:
                    verdict.out_of_order += 1
                    if not verdict.first_problem:
                        verdict.first_problem = (
                            f"partition {message.partition()} offset {message.offset()}: "
                            f"record {number} after {last[key]}"
                        )
                last[key] = number
    finally:
        consumer.close()
    verdict.missing = count - len(seen)
    return verdict


def produce_confluent(
    bootstrap: str, topic: str, count: int, partitions: int, acks: str, codec: str
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "compression.type": codec,
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    for number in range(count):
        while True:
            try:
                producer.produce(
                    topic, value_of(number), key_of(number, partitions), number % partitions
                )
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(60) == 0


def produce_kafka_python(
    bootstrap: str, topic: str, count: int, partitions: int, acks: str, codec: str
) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all" if acks == "all" else int(acks),
        linger_ms=2,
        batch_size=16384,
        compression_type=None if codec == "none" else codec,
        max_in_flight_requests_per_connection=5,
        retries=0,
    )
    for number in range(count):
        producer.send(
            topic,
            value=value_of(number),
            key=key_of(number, partitions),
            partition=number % partitions,
        )
    producer.flush(60)
    producer.close(10)


def produce_aiokafka(
    bootstrap: str, topic: str, count: int, partitions: int, acks: str, codec: str
) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all" if acks == "all" else int(acks),
            linger_ms=2,
            max_batch_size=16384,
            compression_type=None if codec == "none" else codec,
        )
        await producer.start()
        try:
            sends = [
                await producer.send(
                    topic,
                    value=value_of(number),
                    key=key_of(number, partitions),
                    partition=number % partitions,
                )
                for number in range(count)
            ]
            await asyncio.gather(*sends)
        finally:
            await producer.stop()

    asyncio.run(run())


def produce_kcat(
    bootstrap: str, topic: str, count: int, partitions: int, acks: str, codec: str
) -> None:
    """kcat -P, librdkafka's console producer: one line a record, `key:value`."""
    lines = b"".join(
        key_of(number, partitions) + b":" + value_of(number) + b"\n" for number in range(count)
    )
    args = ["-b", bootstrap, "-P", "-t", topic, "-K:", "-z", codec, "-X", "linger.ms=2"]
    args += ["-X", f"acks={acks}", "-X", "max.in.flight.requests.per.connection=5"]
    if partitions == 1:
        args += ["-p", "0"]
    produced = run_kcat(args, None, lines, timeout=120)
    assert produced.returncode == 0, produced.stderr


PRODUCERS: dict[str, Callable[[str, str, int, int, str, str], None]] = {
    "confluent-kafka": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
    "kcat": produce_kcat,
}
