"""One channel's order over an in-memory store whose writes can be held back: a
basic.get waits for the channel's own publishes to the queue, publishes in flight
count against a reject-publish queue's x-max-length (issue 14), and a channel consuming
what it publishes sees basic.deliver before the basic.ack, without waiting out the
confirm's hold when the copy comes before the store's answer."""

from __future__ import annotations

import asyncio

from pamqp import commands

from harness.amqp_memory_store import MemoryStore
from harness.amqp_peer import Peer, open_peer
from harness.waiting import async_wait_until
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.channel import CONFIRM_HOLD_SECONDS
from pulsar_gateway.handlers.amqp.connection_broker import ConnectionBroker
from pulsar_gateway.handlers.amqp.events import ConnectionOpened


async def _open(
    store: MemoryStore, *declares: commands.Queue.Declare
) -> tuple[Peer, ConnectionBroker]:
    peer = open_peer()
    handler = ConnectionBroker(AmqpBroker(store), peer.conn, lambda: None, lambda: 0, lambda: None)
    await handler.handle([e for e in peer.events if isinstance(e, ConnectionOpened)])
    await handler.handle(peer.send(commands.Channel.Open(), channel=1))
    for declare in declares:
        await handler.handle(peer.send(declare, channel=1))
    peer.frames()
    return peer, handler


def _publish(peer: Peer, queue: str, body: bytes) -> list:
    from pamqp import body as content_body
    from pamqp import header

    return peer.send(
        commands.Basic.Publish(exchange="", routing_key=queue),
        header.ContentHeader(0, len(body), commands.Basic.Properties()),
        content_body.ContentBody(body),
        channel=1,
    )


def test_a_get_waits_for_the_channels_own_publish_to_be_stored() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _open(store, commands.Queue.Declare(queue="q"))
        store.gate.clear()  # the write to the store is slow
        await handler.handle(_publish(peer, "q", b"mine"))
        get = asyncio.ensure_future(
            handler.handle(peer.send(commands.Basic.Get(queue="q"), channel=1))
        )
        await asyncio.sleep(0.05)
        assert not get.done()  # not get-empty: the publish came first on this channel
        store.gate.set()
        await asyncio.wait_for(get, 5)
        assert [type(m).__name__ for _, m in peer.methods()] == ["GetOk"]
        await handler.connection_closed()

    asyncio.run(scenario())


def test_publishes_in_flight_count_against_a_reject_publish_queue() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        arguments = {"x-max-length": 2, "x-overflow": "reject-publish"}
        peer, handler = await _open(
            store,
            commands.Queue.Declare(queue="r", arguments=arguments),
            commands.Confirm.Select(),
        )
        store.gate.clear()  # four pipelined publishes, none stored yet
        for i in range(4):
            await handler.handle(_publish(peer, "r", f"m{i}".encode()))
        store.gate.set()
        await asyncio.sleep(0.05)
        outcomes: list[tuple[int, str]] = []
        for _, method in peer.methods():
            first = len(outcomes) + 1 if method.multiple else method.delivery_tag
            kind = type(method).__name__
            outcomes.extend((seq, kind) for seq in range(first, method.delivery_tag + 1))
        assert outcomes == [(1, "Ack"), (2, "Ack"), (3, "Nack"), (4, "Nack")]
        assert len(store.messages["r"]) == 2
        await handler.connection_closed()

    asyncio.run(scenario())


def test_publishes_in_flight_count_their_bytes_against_x_max_length_bytes() -> None:
    """4 + 4 bytes are in flight: a third 4-byte body would take the queue past its
    10 bytes and is nacked, a 2-byte body after it still fits (RabbitMQ's rule)."""

    async def scenario() -> None:
        store = MemoryStore()
        arguments = {"x-max-length-bytes": 10, "x-overflow": "reject-publish"}
        peer, handler = await _open(
            store,
            commands.Queue.Declare(queue="r", arguments=arguments),
            commands.Confirm.Select(),
        )
        store.gate.clear()  # pipelined publishes, none stored yet
        for body in (b"aaaa", b"bbbb", b"cccc", b"dd"):
            await handler.handle(_publish(peer, "r", body))
        store.gate.set()
        outcomes: list[tuple[int, str]] = []

        def confirmed() -> bool:
            for _, method in peer.methods():
                first = len(outcomes) + 1 if method.multiple else method.delivery_tag
                kind = type(method).__name__
                outcomes.extend((seq, kind) for seq in range(first, method.delivery_tag + 1))
            return len(outcomes) >= 4

        await async_wait_until(confirmed, 5, message="four confirms")
        assert len(store.messages["r"]) == 3
        assert outcomes == [(1, "Ack"), (2, "Ack"), (3, "Nack"), (4, "Ack")]
        await handler.connection_closed()

    asyncio.run(scenario())


def test_a_copy_delivered_before_the_stores_answer_lets_the_confirm_go_at_once() -> None:
    """The gateway's own Pulsar client hands the queue's consumer an entry before the
    producer's receipt is read: the confirm must follow that delivery at once, not wait
    out CONFIRM_HOLD_SECONDS for a copy that already went (every held confirm of a channel
    consuming its own publishes took 0.5 s)."""

    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _open(
            store,
            commands.Queue.Declare(queue="q"),
            commands.Confirm.Select(),
            commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True),
        )
        store.receipt_gate.clear()  # stored and readable, its answer held back
        await handler.handle(_publish(peer, "q", b"mine"))
        seen: list[str] = []

        def saw(kind: str) -> bool:
            seen.extend(type(method).__name__ for _, method in peer.methods())
            return kind in seen

        await async_wait_until(lambda: saw("Deliver"), 5, message="the delivery")
        answered = asyncio.get_running_loop().time()
        store.receipt_gate.set()
        await async_wait_until(lambda: saw("Ack"), 5, message="the confirm")
        waited = asyncio.get_running_loop().time() - answered
        assert seen.index("Deliver") < seen.index("Ack")
        assert waited < CONFIRM_HOLD_SECONDS / 2, waited
        await handler.connection_closed()

    asyncio.run(scenario())
