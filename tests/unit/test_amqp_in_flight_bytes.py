"""Publishes awaiting the store are bounded by bytes, not by count (issue 10, item 13).

The bound was 2,000 publishes per connection whatever their size: 2,000 x 128 MiB. Now a
connection whose publishes awaiting the store hold amqp.max_in_flight_bytes (16 MiB) is
blocked: the socket side stops reading it (TCP backpressure) and a client that announced
the connection.blocked capability is sent connection.blocked, then connection.unblocked once
half of it is stored, as RabbitMQ does under its memory alarm.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pamqp import body as pamqp_body
from pamqp import commands
from pamqp import header as pamqp_header

from harness.amqp_memory_store import MemoryStore
from harness.amqp_peer import CLIENT_CAPABILITIES, Peer, open_peer
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.connection_broker import ConnectionBroker
from pulsar_gateway.handlers.amqp.events import ConnectionOpened
from pulsar_gateway.handlers.amqp.publish_alarm import PublishAlarm
from pulsar_gateway.handlers.amqp.publishing import PUBLISH_OVERHEAD, PublishLimits

MIB = 1024 * 1024


async def _connect(
    store: MemoryStore, limits: PublishLimits, capabilities: dict[str, Any] | None = None
) -> tuple[Peer, ConnectionBroker]:
    peer = open_peer(capabilities=capabilities)
    handler = ConnectionBroker(
        AmqpBroker(store), peer.conn, lambda: None, lambda: 0, lambda: None, limits
    )
    await handler.handle([e for e in peer.events if isinstance(e, ConnectionOpened)])
    await handler.handle(peer.send(commands.Channel.Open(), channel=1))
    for queue in ("q", "r"):
        await handler.handle(peer.send(commands.Queue.Declare(queue=queue), channel=1))
    await handler.handle(
        peer.send(commands.Queue.Bind(queue="q", exchange="amq.fanout", routing_key=""), channel=1)
    )
    await handler.handle(
        peer.send(commands.Queue.Bind(queue="r", exchange="amq.fanout", routing_key=""), channel=1)
    )
    peer.frames()
    return peer, handler


async def _publish(
    peer: Peer, handler: ConnectionBroker, size: int, exchange: str = "", key: str = "q"
) -> None:
    frames: list[Any] = [
        commands.Basic.Publish(exchange=exchange, routing_key=key),
        pamqp_header.ContentHeader(0, size, commands.Basic.Properties()),
    ]
    step = 131072 - 8
    frames += [pamqp_body.ContentBody(b"p" * min(step, size - at)) for at in range(0, size, step)]
    await handler.handle(peer.send(*frames, channel=1))


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _kinds(peer: Peer) -> list[type]:
    return [type(m) for _, m in peer.methods()]


def test_large_publishes_awaiting_the_store_block_by_bytes_not_count() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        limits = PublishLimits(max_in_flight_bytes=AmqpSection().max_in_flight_bytes)
        assert limits.max_in_flight_bytes == 16 * MIB
        peer, handler = await _connect(store, limits)
        store.gate.clear()  # the store stalls: nothing is stored
        await _publish(peer, handler, 7 * MIB)
        await _publish(peer, handler, 7 * MIB)
        assert not peer.conn.blocked  # 14 MiB awaiting the store: under 16 MiB
        assert _kinds(peer) == []
        await _publish(peer, handler, 7 * MIB)  # three publishes: 21 MiB, past it
        assert peer.conn.blocked
        [blocked] = [m for _, m in peer.methods() if isinstance(m, commands.Connection.Blocked)]
        assert "amqp.max_in_flight_bytes" in blocked.reason
        assert handler.in_flight_bytes >= 21 * MIB
        waiter = asyncio.ensure_future(handler.wait_unblocked())
        await _settle()
        assert not waiter.done()  # the socket side waits here instead of reading

        store.gate.set()
        await _settle()
        assert waiter.done()
        assert not peer.conn.blocked
        assert _kinds(peer) == [commands.Connection.Unblocked]
        assert handler.in_flight_bytes == 0
        assert len(store.messages["q"]) == 3
        await handler.broker.close()

    asyncio.run(scenario())


def test_each_queue_copy_counts() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store, PublishLimits(max_in_flight_bytes=MIB))
        store.gate.clear()
        await _publish(peer, handler, 300_000, exchange="amq.fanout", key="")
        assert handler.in_flight_bytes == 2 * (300_000 + 2 + len("amq.fanout")) + (PUBLISH_OVERHEAD)
        assert not peer.conn.blocked
        await _publish(peer, handler, 300_000, exchange="amq.fanout", key="")  # 1.2 MB: past
        assert peer.conn.blocked
        store.gate.set()
        await _settle()
        assert not peer.conn.blocked
        await handler.broker.close()

    asyncio.run(scenario())


def test_empty_publishes_are_bounded_too() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store, PublishLimits(max_in_flight_bytes=100 * 1024))
        store.gate.clear()
        count = 0
        while not peer.conn.blocked:
            await _publish(peer, handler, 0)
            count += 1
            assert count < 200
        assert count == -(-100 * 1024 // (PUBLISH_OVERHEAD + 2 + 1))
        store.gate.set()
        await _settle()
        assert not peer.conn.blocked
        await handler.broker.close()

    asyncio.run(scenario())


def test_blocked_clients_without_the_capability_are_only_not_read() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        without = {k: v for k, v in CLIENT_CAPABILITIES.items() if k != "connection.blocked"}
        peer, handler = await _connect(store, PublishLimits(max_in_flight_bytes=MIB), without)
        store.gate.clear()
        await _publish(peer, handler, 2 * MIB)
        assert peer.conn.blocked
        store.gate.set()
        await _settle()
        assert not peer.conn.blocked
        assert _kinds(peer) == []
        await handler.broker.close()

    asyncio.run(scenario())


def test_the_gateway_wide_alarm_blocks_every_publishing_connection() -> None:
    """Two connections, each under its own bound, together past the gateway's: the alarm
    blocks each at its publish (connection.blocked naming the total's setting), not a
    connection that only consumes, and unblocks them all once half is stored."""

    async def scenario() -> None:
        store = MemoryStore()
        alarm = PublishAlarm(3 * MIB)
        limits = PublishLimits(max_in_flight_bytes=16 * MIB, alarm=alarm)
        first, first_handler = await _connect(store, limits)
        second, second_handler = await _connect(store, limits)
        idle, idle_handler = await _connect(store, limits)
        store.gate.clear()
        await _publish(first, first_handler, 2 * MIB)
        assert not first.conn.blocked and not alarm.raised
        await _publish(second, second_handler, 2 * MIB)  # 4 MiB together: past 3 MiB
        assert alarm.raised and second.conn.blocked
        [blocked] = [m for _, m in second.methods() if isinstance(m, commands.Connection.Blocked)]
        assert "amqp.max_total_in_flight_bytes" in blocked.reason
        await _publish(first, first_handler, 1024)  # its next publish blocks it too
        assert first.conn.blocked
        assert not idle.conn.blocked  # it published nothing
        waiter = asyncio.ensure_future(first_handler.wait_unblocked())
        await _settle()
        assert not waiter.done()
        store.gate.set()
        await _settle()
        assert not alarm.raised and alarm.used == 0
        assert waiter.done() and not first.conn.blocked and not second.conn.blocked
        for handler in (first_handler, second_handler, idle_handler):
            await handler.connection_closed()
            await handler.broker.close()

    asyncio.run(scenario())


def test_a_connection_blocked_by_the_alarm_alone_is_unblocked_when_it_clears() -> None:
    """A connection with nothing of its own in flight, blocked because others filled the
    gateway's total, must not wait for a store of its own to be read again."""

    async def scenario() -> None:
        gated, free = MemoryStore(), MemoryStore()  # two listeners' worth of one alarm
        alarm = PublishAlarm(2 * MIB)
        limits = PublishLimits(max_in_flight_bytes=16 * MIB, alarm=alarm)
        big, big_handler = await _connect(gated, limits)
        small, small_handler = await _connect(free, limits)
        gated.gate.clear()
        await _publish(big, big_handler, 3 * MIB)
        assert alarm.raised
        await _publish(small, small_handler, 10)  # blocked by the alarm, then stored at once
        await _settle()
        assert small.conn.blocked and small_handler.in_flight_bytes == 0
        gated.gate.set()
        await _settle()
        assert not alarm.raised and not small.conn.blocked and not big.conn.blocked
        for handler in (big_handler, small_handler):
            await handler.connection_closed()
            await handler.broker.close()

    asyncio.run(scenario())
