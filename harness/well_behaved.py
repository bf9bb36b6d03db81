"""Well-behaved clients that keep working while others attack the gateway, each recording
how long every round trip took: a confluent-kafka producer (produce, then wait for the
delivery report), a confluent-kafka consumer in a group (from the producer's send to the
consumer's poll), and a pika publisher with confirms that gets each message back with
basic.get. Each runs in a thread of its own until `stop`."""

from __future__ import annotations

import statistics
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pika
from confluent_kafka import Consumer, Producer

# between round trips: the pace of a steady client, not a wait for anything
PACE = 0.02
_STAMP = struct.Struct(">d")


@dataclass
class Samples:
    """(when a round trip began, how long it took), monotonic seconds."""

    name: str
    taken: list[tuple[float, float]] = field(default_factory=list)
    error: BaseException | None = None

    def add(self, began: float, seconds: float) -> None:
        self.taken.append((began, seconds))

    def between(self, start: float, end: float) -> list[float]:
        return [took for began, took in list(self.taken) if start <= began < end]

    def count_since(self, start: float) -> int:
        return len(self.between(start, float("inf")))


def describe(latencies: list[float]) -> str:
    """n, median, 99th percentile and worst, in ms."""
    if not latencies:
        return "no samples"
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"n={len(ordered)} p50={statistics.median(ordered) * 1000:.0f} ms "
        f"p99={p99 * 1000:.0f} ms max={ordered[-1] * 1000:.0f} ms"
    )


class WellBehaved:
    """The three clients; `samples` by name."""

    def __init__(self, kafka: dict[str, Any], amqp_port: int, topic: str, queue: str) -> None:
        self.kafka = kafka
        self.amqp_port = amqp_port
        self.topic = topic
        self.queue = queue
        self.stop = threading.Event()
        self.samples = {
            name: Samples(name) for name in ("kafka produce", "kafka consume", "amqp publish+get")
        }
        self.threads = [
            threading.Thread(target=self._guarded, args=(job,), daemon=True)
            for job in (self._produce, self._consume, self._amqp)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def errors(self) -> list[str]:
        return [f"{s.name}: {s.error!r}" for s in self.samples.values() if s.error is not None]

    def _guarded(self, job: Any) -> None:
        try:
            job()
        except BaseException as exc:  # reported by the test
            name = {self._produce: "kafka produce", self._consume: "kafka consume"}
            self.samples[name.get(job, "amqp publish+get")].error = exc

    def _produce(self) -> None:
        producer = Producer({**self.kafka, "linger.ms": 0, "acks": "all"})
        samples = self.samples["kafka produce"]
        while not self.stop.is_set():
            began = time.monotonic()
            producer.produce(self.topic, _STAMP.pack(began))
            left = producer.flush(10)
            samples.add(began, time.monotonic() - began)
            if left:
                raise AssertionError("a record not delivered within 10 s")
            self.stop.wait(PACE)
        producer.flush(10)

    def _consume(self) -> None:
        consumer = Consumer(
            {
                **self.kafka,
                "group.id": "well-behaved",
                "auto.offset.reset": "latest",
                "fetch.wait.max.ms": 100,
                "enable.auto.commit": True,
            }
        )
        consumer.subscribe([self.topic])
        samples = self.samples["kafka consume"]
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.1)
                if message is None or message.error():
                    continue
                (began,) = _STAMP.unpack(message.value())
                samples.add(began, time.monotonic() - began)
        finally:
            consumer.close()

    def _amqp(self) -> None:
        parameters = pika.ConnectionParameters(
            "127.0.0.1",
            self.amqp_port,
            credentials=pika.PlainCredentials("guest", "guest"),
            blocked_connection_timeout=30,
        )
        connection = pika.BlockingConnection(parameters)
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(self.queue)
        samples = self.samples["amqp publish+get"]
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                channel.basic_publish("", self.queue, b"well-behaved")
                got = None
                deadline = began + 10
                while got is None and time.monotonic() < deadline:
                    got, _, _ = channel.basic_get(self.queue, auto_ack=True)
                samples.add(began, time.monotonic() - began)
                if got is None:
                    raise AssertionError("a published message not got back within 10 s")
                self.stop.wait(PACE)
        finally:
            connection.close()
