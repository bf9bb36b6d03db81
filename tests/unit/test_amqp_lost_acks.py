"""Acks the store lost (a broker killed before pulsar-client sent them) must not turn
into duplicates: the queue engine remembers what it acked and acks it again when
it comes back, and marks what it had delivered unacked as redelivered."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from dataclasses import dataclass, field

from harness.amqp_memory_store import MemoryStore
from harness.waiting import async_wait_until
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.message_memory import ACKED_REMEMBER_SECONDS, AckedIds
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.topology import Queue, Topology
from pulsar_gateway.handlers.amqp.vhost_state import VhostState


@dataclass
class _Vhost:
    name: str = "/"

    def dead_letter(self, engine: QueueEngine, deliveries: list[StoredDelivery], reason: str):
        engine.settle(deliveries, was_outstanding=False)


@dataclass
class _Consumer:
    """Takes up to `prefetch` unacked deliveries, as a client with basic.qos."""

    prefetch: int = 1000
    tag: str = "c"
    no_ack: bool = False
    exclusive: bool = False
    got: list[tuple[StoredDelivery, bool]] = field(default_factory=list)
    unacked: list[StoredDelivery] = field(default_factory=list)

    def has_credit(self) -> bool:
        return len(self.unacked) < self.prefetch

    def deliver(self, engine: QueueEngine, delivery: StoredDelivery, redelivered: bool) -> None:
        self.got.append((delivery, redelivered))
        self.unacked.append(delivery)

    def deliver_ready(self, engine: QueueEngine, most: int) -> None:
        self.deliver(engine, *engine.take_ready())

    def cancelled_by_server(self) -> None: ...

    def ack_all(self, engine: QueueEngine) -> None:
        done, self.unacked = self.unacked, []
        engine.settle(done, was_outstanding=True)
        engine.kick()


async def _engine_with(store: MemoryStore, count: int) -> QueueEngine:
    queue = Queue("q", durable=False)
    await store.save_queue("/", queue)
    for n in range(count):
        await store.publish("/", ["q"], AmqpMessage("", "q", b"", str(n).encode()))
    engine = QueueEngine(_Vhost(), queue, store)  # type: ignore[arg-type]
    engine.stored(count)
    return engine


async def _settle_down() -> None:
    for _ in range(10):
        await asyncio.sleep(0.01)


def test_acked_messages_whose_ack_was_lost_are_acked_again_not_delivered() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        engine = await _engine_with(store, 10)
        consumer = _Consumer()
        store.lose_acks = True  # the broker dies before these acks leave the client
        engine.add_consumer(consumer)
        await _settle_down()
        assert len(consumer.got) == 10
        consumer.ack_all(engine)
        assert len(store.messages["q"]) == 10  # the store never got the acks
        store.restart_broker()  # ...and hands everything out again as new
        await _settle_down()
        assert len(consumer.got) == 10, "an acked message was delivered again"
        assert store.messages["q"] == {}, "the returning messages were acked again"
        await engine.close()

    asyncio.run(scenario())


def test_messages_unacked_at_the_crash_come_back_once_and_redelivered() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        engine = await _engine_with(store, 6)
        consumer = _Consumer(prefetch=4)
        engine.add_consumer(consumer)
        await _settle_down()
        assert [r for _, r in consumer.got] == [False] * 4
        store.restart_broker()  # Pulsar re-sends the 4 in flight, counted 0
        await _settle_down()
        # the client's channel closes: what it held goes back to the queue
        engine.remove_consumer(consumer)
        engine.requeue(consumer.unacked)
        held = {d.message_id for d in consumer.unacked}
        second = _Consumer()
        engine.add_consumer(second)
        await _settle_down()
        ids = [d.message_id for d, _ in second.got]
        assert len(ids) == len(set(ids)) == 6, "a message was handed out twice"
        for delivery, redelivered in second.got:
            assert redelivered == (delivery.message_id in held), delivery
        second.ack_all(engine)
        await _settle_down()
        assert store.messages["q"] == {}
        await engine.close()

    asyncio.run(scenario())


def test_a_basic_get_unacked_before_a_crash_comes_back_redelivered() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        engine = await _engine_with(store, 2)
        got = await engine.get()
        assert got is not None and got[1] is False
        store.restart_broker()
        engine.requeue([got[0]])  # the channel closed without acking
        again = await engine.get()
        assert again is not None and again[0].message_id == got[0].message_id and again[1]
        await engine.close()

    asyncio.run(scenario())


def test_acked_ids_are_bounded_by_count_and_age() -> None:
    ids = AckedIds(max_age=60, max_ids=3)
    ids.add([(1,), (2,), (3,), (4,)])
    assert len(ids) == 3 and (1,) not in ids and (4,) in ids
    aged = AckedIds(max_age=0.0, max_ids=100)
    aged.add([(1,)])
    aged.forget_old()
    assert len(aged) == 0


def test_acked_ids_are_forgotten_a_generation_at_a_time_keeping_the_newest() -> None:
    ids = AckedIds(max_age=60, max_ids=8)  # generations of two
    ids.add([(n,) for n in range(9)])
    assert (0,) not in ids and (1,) not in ids
    assert all((n,) in ids for n in range(2, 9)) and len(ids) == 7


def test_an_acked_id_costs_no_object_beyond_the_id_itself() -> None:
    """A busy queue remembers up to 100,000 acked ids for two minutes; per id, an ordered
    dictionary's node and a float cost over 100 bytes on the small-object heap."""
    acked = AckedIds()
    message_ids = [(7, entry, -1) for entry in range(20_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, len(message_ids), 100):
            acked.add(message_ids[start : start + 100])
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert all(message_id in acked for message_id in message_ids)
    assert kept < 40 * len(message_ids), f"{kept / len(message_ids):.0f} bytes per id"


def test_a_queue_gone_quiet_forgets_its_acked_ids_once_they_are_old() -> None:
    """The ids are forgotten by age even when no ack follows: after a busy stretch the
    queue's consumers leave, its Pulsar consumer is closed as idle, and the ids its last
    two minutes built would otherwise stay until the queue's next ack."""

    async def scenario() -> None:
        store = MemoryStore()
        queue = Queue("q", durable=False)
        await store.save_queue("/", queue)
        topology = Topology("/")
        topology.add_queue(queue)
        vhost = VhostState(store, "/", topology, reader_idle_seconds=30)
        for n in range(50):
            await store.publish("/", ["q"], AmqpMessage("", "q", b"", str(n).encode()))
        engine = vhost.engine("q")
        engine.stored(50)
        consumer = _Consumer()
        engine.add_consumer(consumer)
        await async_wait_until(lambda: len(consumer.got) == 50, 10, 0.01, "50 deliveries")
        consumer.ack_all(engine)
        engine.remove_consumer(consumer)
        assert engine.acked_remembered == 50
        now = time.monotonic()
        await vhost.sweep(now + 31)  # idle past reader_idle_seconds: the reader goes
        assert engine.reader is None
        assert engine.acked_remembered == 50, "forgotten before their time"
        await vhost.sweep(now + ACKED_REMEMBER_SECONDS * 1.25 + 1)
        assert engine.acked_remembered == 0
        await vhost.close()

    asyncio.run(scenario())
