"""The broker layer over an in-memory store: backpressure and confirm outcomes,
which a real backend makes hard to provoke on demand."""

from __future__ import annotations

import asyncio
import itertools

from pamqp import commands

from harness.amqp_memory_store import MemoryStore
from harness.amqp_peer import Peer, open_peer
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.connection_broker import ConnectionBroker
from pulsar_gateway.handlers.amqp.events import ConnectionOpened
from pulsar_gateway.handlers.amqp.publishing import PUBLISH_OVERHEAD, PublishLimits

# publishes of one byte (plus "q" and empty properties) that fill the in-flight budget
IN_FLIGHT = 2000
LIMITS = PublishLimits(max_in_flight_bytes=IN_FLIGHT * (PUBLISH_OVERHEAD + 1 + 1 + 2))


async def _setup(store: MemoryStore) -> tuple[Peer, ConnectionBroker, AmqpBroker]:
    peer = open_peer()
    broker = AmqpBroker(store)
    handler = ConnectionBroker(broker, peer.conn, lambda: None, lambda: 0, lambda: None, LIMITS)
    await handler.handle([e for e in peer.events if isinstance(e, ConnectionOpened)])
    await handler.handle(peer.send(commands.Channel.Open(), channel=1))
    await handler.handle(peer.send(commands.Queue.Declare(queue="q"), channel=1))
    await handler.handle(peer.send(commands.Confirm.Select(), channel=1))
    peer.frames()
    return peer, handler, broker


def _publish(peer: Peer, body: bytes = b"x") -> list:
    return peer.send(
        commands.Basic.Publish(exchange="", routing_key="q"),
        _header(len(body)),
        _body(body),
        channel=1,
    )


def _header(size: int):
    from pamqp import header

    return header.ContentHeader(0, size, commands.Basic.Properties())


def _body(data: bytes):
    from pamqp import body

    return body.ContentBody(data)


def test_publishes_in_flight_block_the_connection_then_confirm_in_order() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler, broker = await _setup(store)
        store.gate.clear()
        for _ in range(IN_FLIGHT):
            await handler.handle(_publish(peer))
        await asyncio.sleep(0)
        assert peer.conn.blocked
        assert any(isinstance(m, commands.Connection.Blocked) for _, m in peer.methods())
        store.gate.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not peer.conn.blocked
        methods = [m for _, m in peer.methods()]
        assert any(isinstance(m, commands.Connection.Unblocked) for m in methods)
        acks = [m for m in methods if isinstance(m, commands.Basic.Ack)]
        assert acks and acks[-1].delivery_tag == IN_FLIGHT
        assert all(a.delivery_tag <= b.delivery_tag for a, b in itertools.pairwise(acks))
        await broker.close()

    asyncio.run(scenario())


def test_a_failed_store_write_is_nacked() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler, broker = await _setup(store)
        await handler.handle(_publish(peer, b"ok"))
        await asyncio.sleep(0.01)
        store.fail = True
        await handler.handle(_publish(peer, b"lost"))
        await asyncio.sleep(0.01)
        replies = [(type(m).__name__, m.delivery_tag) for _, m in peer.methods()]
        assert replies == [("Ack", 1), ("Nack", 2)]
        await broker.close()

    asyncio.run(scenario())


def test_publishes_stored_in_one_turn_are_confirmed_with_one_multiple_ack() -> None:
    """The store answers a group of publishes at once: their confirms go out as one
    basic.ack multiple=true at the next write, not one ack each (a frame and an encode
    per message for the gateway, a frame per message for the client)."""

    async def scenario() -> None:
        store = MemoryStore()
        peer, handler, broker = await _setup(store)
        store.gate.clear()
        for _ in range(50):
            await handler.handle(_publish(peer))
        await asyncio.sleep(0)
        assert not [m for _, m in peer.methods() if isinstance(m, commands.Basic.Ack)]
        store.gate.set()
        for _ in range(20):
            await asyncio.sleep(0)
        acks = [m for _, m in peer.methods() if isinstance(m, commands.Basic.Ack)]
        assert [(a.delivery_tag, a.multiple) for a in acks] == [(50, True)]
        await broker.close()

    asyncio.run(scenario())


def test_messages_in_are_counted_by_the_next_write() -> None:
    """gateway_amqp_messages_total{direction="in"} is added to once a write (a prometheus
    increment per message took a lock each), and counts every publish."""
    from pulsar_gateway.gateway import metrics

    async def scenario() -> None:
        store = MemoryStore()
        peer, handler, broker = await _setup(store)
        before = metrics.AMQP_MESSAGES_IN._value.get()
        for _ in range(3):
            await handler.handle(_publish(peer))
        peer.frames()  # the socket side takes the output
        assert metrics.AMQP_MESSAGES_IN._value.get() - before == 3
        await broker.close()

    asyncio.run(scenario())
