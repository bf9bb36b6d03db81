"""One pump per queue engine (handlers/amqp/queue_engine.py). `release_reader` cancels the
pump of an idle queue and the next consumer starts a new one. On Python 3.11 a cancel can
be lost (`asyncio.wait_for` returns its inner result and forgets a cancel landing in the
same loop turn), so the old pump may run on: it must stop by itself at its next turn
rather than fetch beside the new one."""

from __future__ import annotations

import asyncio

from harness.amqp_memory_store import MemoryReader, MemoryStore
from harness.waiting import async_wait_until
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.topology import Queue
from tests.unit.test_amqp_lost_acks import _Consumer, _Vhost


class _SwallowingReader(MemoryReader):
    """A reader whose fetch ends quietly the first time one is cancelled (in the store), as
    a lost cancel looks to the pump; counts the fetches running at once."""

    def __init__(self, store: _Store, queue: str) -> None:
        super().__init__(store, queue)
        self.running = store.running
        self.swallow = store.swallow

    async def fetch(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        self.running[0] += 1
        self.running[1] = max(self.running[1], self.running[0])
        try:
            return await super().fetch(limit, timeout)
        except asyncio.CancelledError:
            if not self.swallow:
                raise
            self.swallow.clear()
            return []
        finally:
            self.running[0] -= 1


class _Store(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.running = [0, 0]  # fetches running now, the most at once
        self.swallow = [True]  # emptied once a cancel was swallowed

    async def open_queue(self, vhost: str, queue: str) -> MemoryReader:
        reader = _SwallowingReader(self, queue)
        self.readers.append(reader)
        return reader


def test_a_pump_whose_cancel_was_lost_stops_before_a_new_one_fetches() -> None:
    async def scenario() -> None:
        store = _Store()
        queue = Queue("q", durable=True)
        await store.save_queue("/", queue)
        engine = QueueEngine(_Vhost(), queue, store)  # type: ignore[arg-type]
        first = _Consumer()
        engine.add_consumer(first)
        # the pump waits in a fetch
        await async_wait_until(lambda: store.running[0] == 1, 5, 0.01)
        old = engine._pump_task
        assert old is not None
        engine.remove_consumer(first)
        await engine.release_reader()  # idle: the pump is cancelled, and runs on
        second = _Consumer()
        engine.add_consumer(second)  # a new pump, and a wake-up for any old one
        await store.publish("/", ["q"], AmqpMessage("", "q", b"", b"m"))
        await async_wait_until(lambda: len(second.got) == 1, 5, 0.01)
        # the old pump ends by itself (else it fetches on)
        await async_wait_until(old.done, 5, 0.01)
        assert store.running[1] == 1, f"{store.running[1]} pumps fetched at once"
        await engine.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))
