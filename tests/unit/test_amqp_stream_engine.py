"""Stream queues' offsets and retention (stream_engine.py), on the in-memory store: where a
consumer starts for each x-stream-offset, what retention keeps, and acks as credit."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

from harness.amqp_memory_store import MemoryStore
from harness.waiting import async_wait_until
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.amqp.stream_engine import StreamEngine, StreamIndex
from pulsar_gateway.handlers.amqp.topology import Queue

NOW = 1_000_000


def _index(times: list[int], size: int = 10) -> StreamIndex:
    index = StreamIndex()
    for n, at in enumerate(times):
        message = AmqpMessage("", "s", b"\x00\x00", b"x" * size, False, None, at)
        index.append(StoredDelivery("s", (n,), message))
    return index


def test_retention_keeps_by_age_and_by_bytes_from_the_end() -> None:
    index = _index([NOW - 5000, NOW - 3000, NOW - 1000, NOW])
    assert index.first_kept(None, None, NOW) == 0
    assert index.first_kept(2000, None, NOW) == 2
    assert index.first_kept(None, 25, NOW) == 2  # 10 bytes each: the last two fit
    assert index.first_kept(4000, 35, NOW) == 1
    assert index.first_kept(1, 0, NOW) == 4  # nothing kept: start at the end


class _Consumer:
    """A consumer with a prefetch whose deliveries the test acks by hand."""

    tag, no_ack, exclusive, active = "c", False, False, True

    def __init__(self, prefetch: int) -> None:
        self.prefetch, self.unacked = prefetch, 0
        self.got: list[tuple[bytes, int | None]] = []

    def has_credit(self) -> bool:
        return self.unacked < self.prefetch

    def deliver(self, engine: object, delivery: StoredDelivery, redelivered: bool) -> None:
        self.unacked += 1
        self.got.append((delivery.message.body, delivery.stream_offset))

    def cancelled_by_server(self) -> None: ...


def test_consumers_start_at_their_offsets_and_acks_give_credit() -> None:
    async def run() -> None:
        store = MemoryStore()
        queue = Queue("s", True, None, False, {"x-queue-type": "stream"})
        now = int(time.time() * 1000)
        for n in range(6):
            message = AmqpMessage("", "s", b"\x00\x00", f"m{n}".encode(), False, None, now + n)
            await store.publish("/", ["s"], message)
        engine = StreamEngine("/", queue, store)
        starts = {}
        expected = {"first": 2, "last": 1, "next": 0, "4": 2, "100": 0, "10m": 2}
        for offset in ("first", "last", "next", 4, 100, "10m"):
            consumer = _Consumer(prefetch=2)
            await engine.add_consumer(consumer, offset)
            count = expected[str(offset)]
            await async_wait_until(lambda c=consumer, n=count: len(c.got) >= n, 5)
            starts[str(offset)] = consumer.got
            engine.remove_consumer(consumer)
        assert starts["first"] == [(b"m0", 0), (b"m1", 1)]  # prefetch 2: no more unacked
        assert starts["last"] == [(b"m5", 5)]
        assert starts["next"] == [] and starts["100"] == []
        assert starts["4"] == [(b"m4", 4), (b"m5", 5)]
        assert starts["10m"][0] == (b"m0", 0)
        consumer = _Consumer(prefetch=1)
        await engine.add_consumer(consumer, datetime.datetime.fromtimestamp((now + 3) / 1000))
        await async_wait_until(lambda: consumer.got, 5)
        assert consumer.got == [(b"m3", 3)]
        consumer.unacked = 0  # the ack
        engine.kick()
        await async_wait_until(lambda: len(consumer.got) == 2, 5)
        assert consumer.got == [(b"m3", 3), (b"m4", 4)]
        with pytest.raises(AmqpError):
            await engine.add_consumer(_Consumer(1), "sometime")
        await engine.close()

    asyncio.run(run())
