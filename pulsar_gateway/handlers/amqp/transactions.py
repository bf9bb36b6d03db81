"""AMQP transactions of one connection: tx.select, tx.commit, tx.rollback, and the bytes
the open transactions hold.

A transactional channel buffers its publishes and settlements (`TxBuffer` in channel.py)
until tx.commit, which stores the publishes and then applies the settlements; tx.rollback
and a closed channel drop the buffer. What every open transaction of the connection holds
is capped together by amqp.max_tx_bytes (`TransactionBytes`).
"""

from __future__ import annotations

import asyncio

from pamqp import commands

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.channel import Channel, TxBuffer
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.method_context import MethodContext, Returns, Settlement

_T = commands.Tx
# What a settlement (ack/nack/reject) held by an open transaction counts as, in bytes: the
# tuple and its list slot; so a transaction of acks alone is bounded by max_tx_bytes too.
TX_SETTLEMENT_COST = 64


def tx_cost(message: AmqpMessage) -> int:
    """Bytes a message held by a transaction counts as: body, properties and names (what
    the client sent; the small fixed part of the objects is left out)."""
    return (
        len(message.body)
        + len(message.properties_raw)
        + len(message.exchange)
        + len(message.routing_key)
    )


class TransactionBytes:
    """What the connection's open transactions hold, against amqp.max_tx_bytes (the
    `TransactionLedger` the publishing and delivery sides count into)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0  # by every open transaction of the connection

    def hold(self, tx: TxBuffer, cost: int) -> None:
        """Count `cost` more bytes in an open transaction, or refuse them.

        An open transaction holds its publishes in memory until tx.commit, so its size is
        capped, together with the connection's other open transactions, by
        amqp.max_tx_bytes. Past it the channel closes with 406 PRECONDITION_FAILED (its
        transaction is dropped, as by tx.rollback): the code RabbitMQ (4.3.6,
        channel_tx_message_max) closes a channel with when its open transaction grows past
        its limit, as for an oversized message. RabbitMQ counts messages; memory is bytes.
        The first publish while no transaction of the connection holds anything is taken
        whatever its size (max_message_size bounds it), so any message can be committed.
        """
        limit = self.limit
        if self.held and self.held + cost > limit:
            if tx.size + cost > limit:
                where = f"transaction size would reach {tx.size + cost} bytes"
            else:
                where = (
                    f"the open transactions of this connection would hold {self.held + cost} bytes"
                )
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"{where}, over the limit of {limit} bytes of uncommitted publishes "
                "(amqp.max_tx_bytes); commit smaller transactions",
            )
        tx.size += cost
        self.held += cost

    def drop(self, tx: TxBuffer | None) -> None:
        """A transaction's buffer is committed, rolled back or closed with its channel."""
        if tx is not None:
            self.held -= tx.size
            tx.size = 0


class Transactions:
    """tx.* of one connection (see the module docstring)."""

    def __init__(
        self,
        context: MethodContext,
        ledger: TransactionBytes,
        settlement: Settlement,
        returns: Returns,
    ) -> None:
        self.context = context
        self.ledger = ledger
        self.settlement = settlement
        self.returns = returns

    async def tx_select(self, channel: Channel, m: commands.Tx.Select) -> None:
        if channel.confirm:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if channel.tx is None:
            channel.tx = TxBuffer()
        self.context.send(channel.number, _T.SelectOk())

    async def tx_commit(self, channel: Channel, m: commands.Tx.Commit) -> None:
        if channel.tx is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        buffer = channel.tx
        channel.tx = TxBuffer()
        vh = self.context.state
        writes: list[asyncio.Future[None]] = []
        try:
            for routed, message, mandatory in buffer.publishes:
                queues, full = vh.overflow(routed, message) if routed else (routed, [])
                if full:
                    continue  # refused by a full reject-publish queue: dropped
                if not queues:
                    if mandatory:
                        self.returns.return_unroutable(channel, message)
                    continue
                writes.append(vh.write(queues, message))
            await asyncio.gather(*writes)
        finally:
            self.ledger.drop(buffer)  # stored (or failed): no longer the transaction's to hold
        for kind, tag, multiple, requeue in buffer.settlements:
            self.settlement.settle(channel, kind, tag, multiple, requeue)
        self.context.send(channel.number, _T.CommitOk())

    async def tx_rollback(self, channel: Channel, m: commands.Tx.Rollback) -> None:
        if channel.tx is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        self.ledger.drop(channel.tx)
        channel.tx = TxBuffer()
        self.context.send(channel.number, _T.RollbackOk())
