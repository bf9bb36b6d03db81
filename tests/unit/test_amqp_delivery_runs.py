"""A queue's lone consumer takes its ready messages in runs (Consumer.deliver_ready): as many
as its credit (basic.qos) and the connection's write room allow go out with one call, in
queue order with consecutive delivery tags; several consumers still take turns one message
each, and an ack frees credit for the next run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from harness.amqp_memory_store import MemoryStore
from harness.waiting import async_wait_until
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.channel import Channel, Consumer
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.topology import Queue
from tests.unit.test_amqp_lost_acks import _Vhost


@dataclass
class _Connection:
    """The channel's connection: records what each send call carried (tag, body); what
    it sends takes its write room (a body and 100 bytes of frames each)."""

    room: int = 1 << 20
    id: str = "1"
    capabilities: dict[str, Any] = field(default_factory=dict)
    calls: list[list[tuple[str, int, bytes]]] = field(default_factory=list)

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: AmqpMessage,
        counted: bool = True,
    ) -> None:
        self.calls.append([(consumer_tag, delivery_tag, message.body)])
        self.room -= len(message.body) + 100

    def send_delivers(
        self,
        channel: int,
        consumer_tag: str,
        first_tag: int,
        messages: list[AmqpMessage],
        redelivered: list[bool],
    ) -> None:
        tags = range(first_tag, first_tag + len(messages))
        self.calls.append([(consumer_tag, t, m.body) for t, m in zip(tags, messages, strict=True)])
        self.room -= sum(len(m.body) + 100 for m in messages)

    def has_write_room(self) -> bool:
        return self.room > 0

    def write_room(self) -> int:
        return self.room

    def confirms_ready(self, channel: Channel) -> None: ...


async def _engine_with(store: MemoryStore, count: int, size: int = 1) -> QueueEngine:
    queue = Queue("q", durable=False)
    await store.save_queue("/", queue)
    for n in range(count):
        await store.publish("/", ["q"], AmqpMessage("", "q", b"", b"%d" % n + b"." * size))
    engine = QueueEngine(_Vhost(), queue, store)  # type: ignore[arg-type]
    engine.stored(count)
    return engine


def _consumer(channel: Channel, engine: QueueEngine, tag: str, prefetch: int) -> Consumer:
    consumer = Consumer(channel, tag, engine, False, False, prefetch)
    channel.consumers[tag] = consumer
    return consumer


def _delivered(connection: _Connection) -> int:
    return sum(len(call) for call in connection.calls)


def test_a_lone_consumer_takes_its_credit_in_one_run_in_queue_order() -> None:
    async def scenario() -> None:
        engine = await _engine_with(MemoryStore(), 25)
        connection = _Connection()
        channel = Channel(connection, 1)  # type: ignore[arg-type]
        engine.add_consumer(_consumer(channel, engine, "c", prefetch=10))
        await async_wait_until(lambda: _delivered(connection) == 10, timeout=5)
        assert connection.calls == [[("c", t, b"%d." % (t - 1)) for t in range(1, 11)]]
        # an ack of five (multiple) frees five: the next run is those five, tags going on
        engine.settle([u.delivery for u in channel.take(5, True)], was_outstanding=True)
        engine.kick()
        await async_wait_until(lambda: _delivered(connection) == 15, timeout=5)
        assert connection.calls[1] == [("c", t, b"%d." % (t - 1)) for t in range(11, 16)]
        assert list(channel.unacked) == list(range(6, 16))
        await engine.close()

    asyncio.run(scenario())


def test_a_run_stops_where_the_write_room_ends() -> None:
    async def scenario() -> None:
        engine = await _engine_with(MemoryStore(), 20, size=500)
        connection = _Connection(room=1200)  # a delivery of 501 bytes takes 601
        channel = Channel(connection, 1)  # type: ignore[arg-type]
        engine.add_consumer(_consumer(channel, engine, "c", prefetch=0))
        await async_wait_until(lambda: _delivered(connection) > 0, timeout=5)
        # the second went out with room left, the third would have had none
        assert [len(call) for call in connection.calls] == [2]
        engine.kick()
        assert _delivered(connection) == 2  # the buffer is full: nothing until it drains
        connection.room = 1200
        engine.kick()
        assert [len(call) for call in connection.calls] == [2, 2]
        await engine.close()

    asyncio.run(scenario())


def test_several_consumers_take_turns_one_message_each() -> None:
    async def scenario() -> None:
        engine = await _engine_with(MemoryStore(), 6)
        connection = _Connection()
        channel = Channel(connection, 1)  # type: ignore[arg-type]
        engine.add_consumer(_consumer(channel, engine, "a", prefetch=10))
        engine.add_consumer(_consumer(channel, engine, "b", prefetch=10))
        await async_wait_until(lambda: _delivered(connection) == 6, timeout=5)
        got = [item for call in connection.calls for item in call]
        assert [tag for tag, _, _ in got] == ["a", "b", "a", "b", "a", "b"]
        assert [body for _, _, body in got] == [b"%d." % n for n in range(6)]
        await engine.close()

    asyncio.run(scenario())


def test_a_run_keeps_to_the_channels_global_prefetch() -> None:
    async def scenario() -> None:
        engine = await _engine_with(MemoryStore(), 10)
        connection = _Connection()
        channel = Channel(connection, 1)  # type: ignore[arg-type]
        channel.global_prefetch = 4  # basic.qos global=true: the channel's unacked in all
        engine.add_consumer(_consumer(channel, engine, "c", prefetch=0))
        await async_wait_until(lambda: _delivered(connection) > 0, timeout=5)
        assert [len(call) for call in connection.calls] == [4]
        engine.settle([u.delivery for u in channel.take(1, False)], was_outstanding=True)
        engine.kick()
        assert [len(call) for call in connection.calls] == [4, 1]
        await engine.close()

    asyncio.run(scenario())
