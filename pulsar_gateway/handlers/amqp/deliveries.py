"""Deliveries of one connection: consumers, basic.get, basic.qos and settlement.

A consumer is fed by its queue's engine (queue_engine.py) whenever it has credit; every
delivery a client must settle is kept by its channel (`Channel.unacked`) with the engine
it came from, so basic.ack, basic.nack, basic.reject, basic.recover and a closing channel
act on the right stored message. Settlements on a transactional channel are held by the
transaction (`TransactionLedger`) and applied at tx.commit (`settle`).
"""

from __future__ import annotations

import asyncio
import contextlib

from pamqp import base, commands

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.amqp.broker_model import StoredDelivery
from pulsar_gateway.handlers.amqp.channel import Channel, Consumer, Unacked
from pulsar_gateway.handlers.amqp.delivery_limits import outgoing_properties
from pulsar_gateway.handlers.amqp.direct_reply import REPLY_TO, check_reply_consume
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode, resource
from pulsar_gateway.handlers.amqp.frames import make_method
from pulsar_gateway.handlers.amqp.method_context import MethodContext, TransactionLedger
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.stream_engine import StreamEngine, not_supported
from pulsar_gateway.handlers.amqp.topology_rules import check_queue_access
from pulsar_gateway.handlers.amqp.transactions import TX_SETTLEMENT_COST

_B = commands.Basic


class Deliveries:
    """basic.qos/consume/cancel/get/ack/nack/reject/recover of one connection."""

    def __init__(self, context: MethodContext, ledger: TransactionLedger) -> None:
        self.context = context
        self.ledger = ledger

    # --- consumers --------------------------------------------------------------------

    async def basic_qos(self, channel: Channel, m: commands.Basic.Qos) -> None:
        if m.prefetch_size:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_:
            channel.global_prefetch = m.prefetch_count
        else:
            channel.prefetch = m.prefetch_count
        self.context.send(channel.number, _B.QosOk())
        self.kick(channel)

    async def basic_consume(self, channel: Channel, m: commands.Basic.Consume) -> None:
        vh = self.context.state
        if m.queue == REPLY_TO:
            self._consume_replies(channel, m)
            return
        queue = check_queue_access(vh.topology, m.queue, self.context.id)
        if queue.is_stream:
            await self._consume_stream(channel, m, queue.name)
            return
        engine = vh.engine(queue.name)
        tag = m.consumer_tag or channel.next_consumer_tag()
        if tag in channel.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        what = resource("queue", queue.name, vh.name)
        if any(c.exclusive for c in engine.consumers) or (m.exclusive and engine.consumers):
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"{what} in exclusive use")
        await engine.ensure_reader()
        consumer = Consumer(channel, tag, engine, m.no_ack, m.exclusive, channel.prefetch)
        channel.consumers[tag] = consumer
        self.context.reply(channel, make_method(_B.ConsumeOk, consumer_tag=tag), m.nowait)
        engine.add_consumer(consumer)

    def _consume_replies(self, channel: Channel, m: commands.Basic.Consume) -> None:
        """basic.consume on amq.rabbitmq.reply-to (direct_reply.py)."""
        check_reply_consume(m.no_ack, channel.reply_consumer)
        tag = m.consumer_tag or channel.next_consumer_tag()
        if tag in channel.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        channel.reply_consumer = self.context.state.replies.add(channel, tag)
        self.context.reply(channel, make_method(_B.ConsumeOk, consumer_tag=tag), m.nowait)

    async def _consume_stream(self, channel: Channel, m: commands.Basic.Consume, name: str) -> None:
        """basic.consume on a stream queue (stream_engine.py): manual acks and a prefetch
        are required, as RabbitMQ requires them."""
        vh = self.context.state
        if m.no_ack:
            raise not_supported("automatic acknowledgement", name, vh.name)
        if not channel.prefetch:
            what = resource("queue", name, vh.name)
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED, f"consumer prefetch count is not set for '{what}'"
            )
        tag = m.consumer_tag or channel.next_consumer_tag()
        if tag in channel.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        engine = vh.stream(name)
        offset = (m.arguments or {}).get("x-stream-offset")
        consumer = Consumer(channel, tag, engine, False, m.exclusive, channel.prefetch)  # type: ignore[arg-type]
        channel.consumers[tag] = consumer
        await engine.add_consumer(consumer, offset)
        self.context.reply(channel, make_method(_B.ConsumeOk, consumer_tag=tag), m.nowait)

    async def basic_cancel(self, channel: Channel, m: commands.Basic.Cancel) -> None:
        replies = channel.reply_consumer
        if replies is not None and replies.tag == m.consumer_tag:
            self.context.state.replies.remove(replies)
            channel.reply_consumer = None
        consumer = channel.consumers.pop(m.consumer_tag or "", None)  # decoded: always a str
        reply = make_method(_B.CancelOk, consumer_tag=m.consumer_tag)
        self.context.reply(channel, reply, m.nowait)
        if consumer is not None:
            consumer.active = False
            consumer.engine.remove_consumer(consumer)
            await self.context.state.maybe_auto_delete(consumer.engine)

    async def basic_get(self, channel: Channel, m: commands.Basic.Get) -> None:
        vh = self.context.state
        queue = check_queue_access(vh.topology, m.queue, self.context.id)
        if queue.is_stream:
            raise not_supported("basic.get", queue.name, vh.name)
        engine = vh.engine(queue.name)
        vh.touch(queue.name)
        writes = channel.writes_to(queue.name)
        if writes:
            # the channel's own publishes come first (see Channel.writes_to); a failed
            # one was nacked to its publisher and is simply not there
            await asyncio.wait(writes)
        got = await engine.get()
        if got is None and writes and engine.message_count > 0:
            # the queue's fetch came back empty just before the stored copy was readable
            got = await engine.get()
        if got is None or channel.closed:
            if got is not None:
                engine.requeue([got[0]])
            self.context.send(channel.number, _B.GetEmpty())
            return
        delivery, redelivered = got
        tag = channel.next_tag
        channel.next_tag += 1
        if m.no_ack:
            engine.settle([delivery], was_outstanding=True)
        else:
            channel.unacked[tag] = Unacked(tag, engine, delivery, None)
        message = delivery.message
        metrics.AMQP_MESSAGES_OUT.inc()
        reply = make_method(
            _B.GetOk,
            delivery_tag=tag,
            redelivered=redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
            message_count=engine.message_count,
        )
        properties = outgoing_properties(delivery)
        self.context.send_content(channel.number, reply, message.body, properties)

    # --- settlement -------------------------------------------------------------------

    async def basic_ack(self, channel: Channel, m: commands.Basic.Ack) -> None:
        self._settle_or_hold(channel, "ack", m.delivery_tag, m.multiple, False)

    async def basic_nack(self, channel: Channel, m: commands.Basic.Nack) -> None:
        self._settle_or_hold(channel, "nack", m.delivery_tag, m.multiple, m.requeue)

    async def basic_reject(self, channel: Channel, m: commands.Basic.Reject) -> None:
        self._settle_or_hold(channel, "nack", m.delivery_tag or 0, False, m.requeue)

    def _settle_or_hold(
        self, channel: Channel, kind: str, tag: int, multiple: bool, requeue: bool
    ) -> None:
        """Settle now, or on a transactional channel at tx.commit."""
        if channel.tx is not None:
            self.ledger.hold(channel.tx, TX_SETTLEMENT_COST)
            channel.tx.settlements.append((kind, tag, multiple, requeue))
            return
        self.settle(channel, kind, tag, multiple, requeue)

    def settle(self, channel: Channel, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
        if kind == "nack":
            stream = _stream_of(channel, tag, multiple)
            if stream is not None:
                vhost = self.context.state.name
                raise not_supported("basic.nack and basic.reject", stream, vhost)
        items = channel.take(tag, multiple)
        if not items and not (multiple and tag == 0):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        by_engine = _by_engine(items)
        for engine, deliveries in by_engine.values():
            if kind == "ack":
                engine.settle(deliveries, was_outstanding=True)
            elif requeue:
                engine.requeue(deliveries)
            else:
                engine.reject(deliveries)
        self.kick(channel, {id(e): e for e, _ in by_engine.values()})

    async def basic_recover(self, channel: Channel, m: base.Frame) -> None:
        if not getattr(m, "requeue", True):
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        self.requeue_all(channel)
        if isinstance(m, _B.Recover):
            self.context.send(channel.number, _B.RecoverOk())

    def requeue_all(self, channel: Channel) -> None:
        for engine, deliveries in _by_engine(channel.take(0, True)).values():
            engine.requeue(deliveries)

    def kick(self, channel: Channel, extra: dict[int, QueueEngine] | None = None) -> None:
        """The channel gained credit (an ack, qos, flow on, room to write): let the
        engines it consumes from deliver again."""
        engines = dict(extra or {})
        for consumer in channel.consumers.values():
            engines[id(consumer.engine)] = consumer.engine
        vhost = self.context.vhost
        if channel.global_prefetch and vhost is not None:
            engines.update({id(e): e for e in vhost.engines.values()})
        for engine in engines.values():
            engine.kick()

    async def channel_closed(self, channel: Channel) -> None:
        """The channel is gone: its consumers stop, what it had unacked is requeued, and
        auto-delete queues it was the last consumer of go."""
        engines: dict[int, QueueEngine] = {}
        for consumer in list(channel.consumers.values()):
            consumer.active = False
            consumer.engine.remove_consumer(consumer)
            engines[id(consumer.engine)] = consumer.engine
        channel.consumers.clear()
        self.requeue_all(channel)
        vhost = self.context.vhost
        if vhost is not None:
            vhost.replies.remove(channel.reply_consumer)
        channel.reply_consumer = None
        if vhost is not None:
            for engine in engines.values():
                with contextlib.suppress(Exception):
                    await vhost.maybe_auto_delete(engine)


def _stream_of(channel: Channel, tag: int, multiple: bool) -> str | None:
    """The stream queue a nack or reject names a delivery of, if any."""
    for item_tag, item in channel.unacked.items():
        if (item_tag == tag or (multiple and (tag == 0 or item_tag <= tag))) and isinstance(
            item.engine, StreamEngine
        ):
            return item.engine.name
    return None


def _by_engine(items: list[Unacked]) -> dict[int, tuple[QueueEngine, list[StoredDelivery]]]:
    """Settled deliveries grouped by the engine they came from (keyed by its id),
    so each engine acts once on its share."""
    groups: dict[int, tuple[QueueEngine, list[StoredDelivery]]] = {}
    for item in items:
        groups.setdefault(id(item.engine), (item.engine, []))[1].append(item.delivery)
    return groups
