"""The broker layer over an in-memory store: backpressure and confirm outcomes,
which a real backend makes hard to provoke on demand."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection, Hashable, Iterable

from pamqp import commands

from pulsar_gateway.handlers.amqp import broker as broker_module
from pulsar_gateway.handlers.amqp.broker import AmqpBroker, ConnectionBroker
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.events import ConnectionOpened
from pulsar_gateway.handlers.amqp.topology import Binding, Exchange, Queue, Topology
from tests.unit.test_amqp_connection import Peer, open_peer


class MemoryReader:
    def __init__(self, store: MemoryStore, queue: str) -> None:
        self.store, self.queue, self.held = store, queue, set()

    async def fetch(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        messages = self.store.messages[self.queue]
        out = [
            StoredDelivery(self.queue, key, msg)
            for key, msg in messages.items()
            if key not in self.held
        ][:limit]
        if not out:
            await asyncio.sleep(timeout if timeout is not None else 0.05)
        self.held.update(d.message_id for d in out)
        return out

    def ack(self, message_ids: Iterable[Hashable]) -> None:
        for key in message_ids:
            self.store.messages[self.queue].pop(key, None)

    async def close(self) -> None:
        self.held.clear()


class MemoryStore:
    def __init__(self) -> None:
        self.messages: dict[str, dict[Hashable, AmqpMessage]] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False
        self.ids = itertools.count()

    async def create_vhost(self, vhost: str) -> None: ...

    async def load_topology(self, vhost: str) -> Topology:
        return Topology(vhost)

    async def save_exchange(self, vhost: str, exchange: Exchange) -> None: ...

    async def remove_exchange(self, vhost: str, name: str) -> None: ...

    async def save_queue(self, vhost: str, queue: Queue) -> None:
        self.messages[queue.name] = {}

    async def remove_queue(self, vhost: str, name: str) -> None:
        self.messages.pop(name, None)

    async def save_binding(self, vhost: str, binding: Binding) -> None: ...

    async def remove_binding(self, vhost: str, binding: Binding) -> None: ...

    async def publish(self, vhost: str, queues: Collection[str], message: AmqpMessage) -> None:
        await self.gate.wait()
        if self.fail:
            raise ConnectionError("backend down")
        for queue in queues:
            self.messages[queue][(next(self.ids),)] = message

    async def open_queue(self, vhost: str, queue: str) -> MemoryReader:
        return MemoryReader(self, queue)

    def load_count(self, vhost: str, queue: str) -> int:
        return 0

    async def save_count(self, vhost: str, queue: str, count: int) -> None: ...


async def _setup(store: MemoryStore) -> tuple[Peer, ConnectionBroker, AmqpBroker]:
    peer = open_peer()
    broker = AmqpBroker(store)
    handler = ConnectionBroker(broker, peer.conn, lambda: None, lambda: 0)
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
        for _ in range(broker_module.BLOCK_HIGH_WATER):
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
        assert acks and acks[-1].delivery_tag == broker_module.BLOCK_HIGH_WATER
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
