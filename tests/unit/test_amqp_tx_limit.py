"""An open transaction's size is capped by amqp.max_tx_bytes (issue 10, item 13).

A transaction holds its publishes in memory until tx.commit; before the cap a client could
publish for ever in one transaction. Past the cap the channel closes with 406
PRECONDITION_FAILED, as RabbitMQ closes one whose transaction grows past its limit, and
what it held is dropped; the connection and its other channels go on.
"""

from __future__ import annotations

import asyncio

from pamqp import base, commands
from pamqp import body as pamqp_body
from pamqp import header as pamqp_header

from harness.amqp_memory_store import MemoryStore
from harness.amqp_peer import Peer, open_peer
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.connection_broker import ConnectionBroker
from pulsar_gateway.handlers.amqp.errors import ReplyCode
from pulsar_gateway.handlers.amqp.events import ConnectionOpened
from pulsar_gateway.handlers.amqp.publishing import PublishLimits
from pulsar_gateway.handlers.amqp.transactions import tx_cost

LIMIT = 10_000
BODY = 1_000


async def _connect(store: MemoryStore, limit: int = LIMIT) -> tuple[Peer, ConnectionBroker]:
    peer = open_peer()
    handler = ConnectionBroker(
        AmqpBroker(store),
        peer.conn,
        lambda: None,
        lambda: 0,
        lambda: None,
        PublishLimits(max_tx_bytes=limit),
    )
    await handler.handle([e for e in peer.events if isinstance(e, ConnectionOpened)])
    return peer, handler


async def _open_tx_channel(peer: Peer, handler: ConnectionBroker, number: int) -> None:
    await handler.handle(peer.send(commands.Channel.Open(), channel=number))
    await handler.handle(peer.send(commands.Queue.Declare(queue="q"), channel=number))
    await handler.handle(peer.send(commands.Tx.Select(), channel=number))


async def _publish(peer: Peer, handler: ConnectionBroker, channel: int, size: int = BODY) -> None:
    await handler.handle(
        peer.send(
            commands.Basic.Publish(exchange="", routing_key="q"),
            pamqp_header.ContentHeader(0, size, commands.Basic.Properties()),
            pamqp_body.ContentBody(b"x" * size),
            channel=channel,
        )
    )


def _closes(methods: list[tuple[int, base.Frame]]) -> list[tuple[int, commands.Channel.Close]]:
    return [(n, m) for n, m in methods if isinstance(m, commands.Channel.Close)]


def test_a_transaction_past_max_tx_bytes_closes_its_channel_with_406() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store)
        await _open_tx_channel(peer, handler, 1)
        peer.frames()
        per_publish = BODY + len(commands.Basic.Properties().marshal()) + len("q")
        fits = LIMIT // per_publish
        for _ in range(fits):
            await _publish(peer, handler, 1)
        assert _closes(peer.methods()) == []
        assert handler.tx_bytes == fits * per_publish <= LIMIT

        await _publish(peer, handler, 1)  # one more would pass the limit
        [(number, close)] = _closes(peer.methods())
        assert number == 1
        assert close.reply_code == ReplyCode.PRECONDITION_FAILED
        assert close.reply_text.startswith("PRECONDITION_FAILED - transaction size would reach")
        assert "amqp.max_tx_bytes" in close.reply_text
        assert (close.class_id, close.method_id) == (60, 40)  # basic.publish
        assert handler.tx_bytes == 0  # dropped with the channel, nothing stored
        assert store.messages["q"] == {}
        await handler.broker.close()

    asyncio.run(scenario())


def test_the_cap_is_on_all_open_transactions_of_a_connection() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store)
        for number in (1, 2):
            await _open_tx_channel(peer, handler, number)
        peer.frames()
        for _ in range(6):  # about 6 kB on each: neither alone is over, both together are
            await _publish(peer, handler, 1)
        for _ in range(4):
            await _publish(peer, handler, 2)
        [(number, close)] = _closes(peer.methods())
        assert number == 2
        assert close.reply_code == ReplyCode.PRECONDITION_FAILED
        assert "open transactions of this connection" in close.reply_text
        # channel 1's transaction is untouched and commits
        await handler.handle(peer.send(commands.Tx.Commit(), channel=1))
        assert any(isinstance(m, commands.Tx.CommitOk) for _, m in peer.methods())
        assert len(store.messages["q"]) == 6
        assert handler.tx_bytes == 0
        await handler.broker.close()

    asyncio.run(scenario())


def test_commit_and_rollback_release_what_the_transaction_held() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store)
        await _open_tx_channel(peer, handler, 1)
        for _round in range(5):  # 5 x 6 kB through a 10 kB cap: each end frees its bytes
            for _ in range(6):
                await _publish(peer, handler, 1)
            await handler.handle(peer.send(commands.Tx.Commit(), channel=1))
            for _ in range(6):
                await _publish(peer, handler, 1)
            await handler.handle(peer.send(commands.Tx.Rollback(), channel=1))
        assert _closes(peer.methods()) == []
        assert len(store.messages["q"]) == 30
        assert handler.tx_bytes == 0
        await handler.broker.close()

    asyncio.run(scenario())


def test_a_message_larger_than_the_cap_alone_in_a_transaction_is_taken() -> None:
    """A transaction of one message commits whatever its size (the message size limit
    bounds it), so nothing publishable outside a transaction is refused inside one."""

    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store)
        await _open_tx_channel(peer, handler, 1)
        await _publish(peer, handler, 1, size=3 * LIMIT)
        await handler.handle(peer.send(commands.Tx.Commit(), channel=1))
        methods = peer.methods()
        assert _closes(methods) == []
        assert len(store.messages["q"]) == 1
        await _publish(peer, handler, 1, size=3 * LIMIT)
        await _publish(peer, handler, 1, size=10)
        assert len(_closes(peer.methods())) == 1
        await handler.broker.close()

    asyncio.run(scenario())


def test_settlements_in_a_transaction_count_too() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        peer, handler = await _connect(store, limit=1024)
        await _open_tx_channel(peer, handler, 1)
        peer.frames()
        for tag in range(1, 100):
            await handler.handle(peer.send(commands.Basic.Ack(delivery_tag=tag), channel=1))
        [(_, close)] = _closes(peer.methods())
        assert close.reply_code == ReplyCode.PRECONDITION_FAILED
        await handler.broker.close()

    asyncio.run(scenario())


def test_tx_cost_counts_what_the_client_sent() -> None:
    from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage

    message = AmqpMessage("ex", "key", b"\x00\x00", b"body", False, None, 0)
    assert tx_cost(message) == len("ex") + len("key") + 2 + 4
