"""docs/backend.md, "Shared dispatch can park a message": a message whose consumer died
(a killed gateway's) can stay parked in pulsar-lite's dispatcher until the next
subscription event. After a restart the queue's count does not know of it, so the engine
must nudge whenever its consumers wait and nothing comes, not only when the count says
more is stored (found by the three-worker kill -9 test: the last confirmed message of a
vhost was never delivered)."""

from __future__ import annotations

import asyncio

import pytest

from harness.amqp_memory_store import MemoryStore
from pulsar_gateway.handlers.amqp import queue_timers
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.topology import Queue
from tests.unit.test_amqp_lost_acks import _Consumer, _Vhost


def test_a_parked_message_the_count_does_not_know_reaches_a_waiting_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queue_timers, "IDLE_NUDGE_FIRST_SECONDS", 0.05)

    async def scenario() -> None:
        store = MemoryStore()
        queue = Queue("q", durable=True)
        await store.save_queue("/", queue)
        await store.publish("/", ["q"], AmqpMessage("", "q", b"", b"last"))
        store.parked.update(store.messages["q"])  # dispatched to a consumer that died
        engine = QueueEngine(_Vhost(), queue, store)  # type: ignore[arg-type]
        engine.stored(0)  # the restarted gateway's count: saved before that publish
        consumer = _Consumer()
        engine.add_consumer(consumer)
        for _ in range(100):
            if consumer.got:
                break
            await asyncio.sleep(0.02)
        assert [d.message.body for d, _ in consumer.got] == [b"last"]
        assert store.nudges
        await engine.close()

    asyncio.run(scenario())


def test_an_idle_queue_nudges_less_and_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each nudge attaches a consumer to the subscription: an idle queue with a waiting
    consumer backs off, each wait at least twice the one before (lower bounds only: a slow
    machine stretches them)."""
    first = 0.02
    monkeypatch.setattr(queue_timers, "IDLE_NUDGE_FIRST_SECONDS", first)

    async def scenario() -> None:
        store = MemoryStore()
        queue = Queue("q", durable=True)
        await store.save_queue("/", queue)
        engine = QueueEngine(_Vhost(), queue, store)  # type: ignore[arg-type]
        engine.stored(0)
        engine.add_consumer(_Consumer())
        for _ in range(500):
            if len(store.nudges) >= 4:
                break
            await asyncio.sleep(0.02)
        await engine.close()
        gaps = [b - a for a, b in zip(store.nudges, store.nudges[1:], strict=False)][:3]
        assert len(gaps) == 3
        for index, gap in enumerate(gaps):
            assert gap >= first * 2 ** (index + 1) * 0.9, gaps

    asyncio.run(scenario())
