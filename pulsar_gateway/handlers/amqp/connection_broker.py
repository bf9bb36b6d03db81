"""The broker side of one AMQP connection: what each channel method does.

`ConnectionBroker` acts on the events of one `AmqpConnection` (the sans-I/O
core) and answers through it. Validation (declare rules, reply codes and
texts) comes from topology_rules.py and exchange_routing.py; topology changes
and stored messages go through the connection's `VhostState`, so this file
is testable with a fake store and never sees Pulsar.

Methods of one connection are handled in order, each awaited before the next
(declares, deletes, gets). Publishes are the exception: the store write runs
as a task so a publisher streams, and the confirm is sent when it is stored.

Two kinds of backpressure: while the publishes awaiting the store hold more
than amqp.max_in_flight_bytes the core is `blocked` (connection.blocked goes
to clients that asked for it, as under RabbitMQ's memory alarm, and the socket
side stops reading), and while the socket's write buffer is full deliveries
wait (`has_write_room`); the socket side is told (`deliveries_held`) and calls
`resume_deliveries` once the peer has caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.authorization import authorize_method, authorize_publish
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.channel import (
    Channel,
    Consumer,
    PendingConfirm,
    TxBuffer,
    Unacked,
)
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection
from pulsar_gateway.handlers.amqp.content_assembly import method_ids
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode, resource
from pulsar_gateway.handlers.amqp.events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionClosed,
    ConnectionOpened,
    ContentReceived,
    Event,
    MethodReceived,
)
from pulsar_gateway.handlers.amqp.exchange_routing import route, sender_selected_keys
from pulsar_gateway.handlers.amqp.field_values import text_or_none
from pulsar_gateway.handlers.amqp.frames import make_method
from pulsar_gateway.handlers.amqp.publish_alarm import PublishAlarm
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.topology import DestinationKind
from pulsar_gateway.handlers.amqp.topology_rules import (
    check_bind,
    check_exchange_delete,
    check_queue_access,
    check_queue_delete,
    check_supported_arguments,
    check_unbind,
    declare_exchange,
    declare_queue,
)
from pulsar_gateway.handlers.amqp.vhost_state import VhostState
from pulsar_gateway.handlers.authorization import Access, everyone_allowed

log = logging.getLogger("gateway.amqp")

_B = commands.Basic
_Q = commands.Queue
_E = commands.Exchange
_T = commands.Tx
# What a publish awaiting the store costs beyond its bytes (its task, future, message and
# confirm objects, roughly): so empty bodies are bounded too, if by a larger count.
PUBLISH_OVERHEAD = 1024
# A consumer without basic.qos would otherwise take the whole queue at once;
# RabbitMQ has no such cap, but the socket's write buffer check bounds it too.
WRITE_BUFFER_LIMIT = 4 * 1024 * 1024
# What a settlement (ack/nack/reject) held by an open transaction counts as, in bytes: the
# tuple and its list slot; so a transaction of acks alone is bounded by max_tx_bytes too.
TX_SETTLEMENT_COST = 64


@dataclass(frozen=True, slots=True)
class PublishLimits:
    """How much one connection's publishes may hold in memory (the [amqp] settings).

    `max_tx_bytes`: uncommitted publishes and settlements of the connection's open
    transactions together (amqp.max_tx_bytes).
    `max_in_flight_bytes`: publishes handed to the store and not yet stored (one copy
    per queue, plus PUBLISH_OVERHEAD each); at it the connection is blocked until they
    are down to half (amqp.max_in_flight_bytes).
    `alarm`: the same bytes counted across every connection of the listener
    (amqp.max_total_in_flight_bytes, publish_alarm.py); while it is raised, a connection
    that publishes is blocked too.
    """

    max_tx_bytes: int = 128 * 1024 * 1024
    max_in_flight_bytes: int = 16 * 1024 * 1024
    alarm: PublishAlarm | None = None


def tx_cost(message: AmqpMessage) -> int:
    """Bytes a message held by a transaction counts as: body, properties and names (what
    the client sent; the small fixed part of the objects is left out)."""
    return (
        len(message.body)
        + len(message.properties_raw)
        + len(message.exchange)
        + len(message.routing_key)
    )


class ConnectionBroker:
    """The broker side of one connection: acts on the events of its `AmqpConnection`."""

    def __init__(
        self,
        broker: AmqpBroker,
        connection: AmqpConnection,
        request_flush: Callable[[], None],
        write_buffer_size: Callable[[], int],
        deliveries_held: Callable[[], None],
        limits: PublishLimits | None = None,
    ) -> None:
        """`request_flush` asks the socket side to write what the core has queued;
        `write_buffer_size` is the output not yet taken by the peer;
        `deliveries_held` tells the socket side that deliveries wait for room, so
        it calls `resume_deliveries` once the peer has read enough; `limits` bound what
        the connection's publishes hold (defaults: `PublishLimits()`)."""
        self.broker = broker
        self.connection = connection
        self.id = broker.new_connection_id()
        self.peer = connection.peer_host
        self.request_flush = request_flush
        self.write_buffer_size = write_buffer_size
        self.deliveries_held = deliveries_held
        self._holding_deliveries = False
        self.vhost: VhostState | None = None
        self.channels: dict[int, Channel] = {}
        self.capabilities: dict[str, Any] = {}
        self.exclusive_queues: set[str] = set()
        self.limits = limits or PublishLimits()
        self.in_flight_bytes = 0  # publishes handed to the store, not yet stored
        # the same publishes' writes, awaited before connection.close-ok (publishes_stored)
        self._writes: set[asyncio.Future[None]] = set()
        self.tx_bytes = 0  # held by every open transaction of the connection
        self._unblocked = asyncio.Event()
        self._unblocked.set()
        if self.limits.alarm is not None:
            self.limits.alarm.watch(self._maybe_unblock)
        self.closed = False
        # the user's rights and the vhost's namespace, set by the listener at connection.open
        self.access: Access = everyone_allowed("amqp")
        self.namespace = ""

    # --- output -----------------------------------------------------------------------

    def send(self, channel: int, method: base.Frame) -> None:
        if self.connection.send_method(channel, method):
            self.request_flush()

    def send_content(
        self, channel: int, method: base.Frame, body: bytes, properties_raw: bytes
    ) -> None:
        if self.connection.send_content(channel, method, body, properties_raw):
            self.request_flush()

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: AmqpMessage,
    ) -> None:
        if self.connection.send_deliver(
            channel,
            consumer_tag,
            delivery_tag,
            redelivered,
            message.exchange,
            message.routing_key,
            message.body,
            message.properties_raw,
        ):
            self.request_flush()

    def has_write_room(self) -> bool:
        """Whether deliveries may go out now: not while the write buffer is full.
        The first refusal tells the socket side, once, until `resume_deliveries`."""
        if self.write_buffer_size() < WRITE_BUFFER_LIMIT:
            return True
        if not self._holding_deliveries:
            self._holding_deliveries = True
            self.deliveries_held()
        return False

    def resume_deliveries(self) -> None:
        """The peer has caught up: deliver on every channel again."""
        self._holding_deliveries = False
        for channel in list(self.channels.values()):
            self.kick(channel)

    async def wait_unblocked(self) -> None:
        """Returns once the publishes in flight hold few enough bytes to read from the peer
        again."""
        await self._unblocked.wait()

    # --- events -----------------------------------------------------------------------

    async def handle(self, events: list[Event]) -> None:
        for event in events:
            await self._handle(event)

    async def _handle(self, event: Event) -> None:
        if isinstance(event, MethodReceived):
            channel = self.channels.get(event.channel)
            if channel is None or channel.closed:
                return
            try:
                await self._method(channel, event.method)
            except AmqpError as error:
                await self._fail(event.channel, error.blame(*method_ids(event.method)))
            except Exception as exc:  # a backend failure: the client gets 541, we go on
                log.exception(
                    "amqp %s: %s on channel %d failed",
                    self.peer,
                    type(event.method).__name__,
                    event.channel,
                )
                await self._fail(event.channel, AmqpError(ReplyCode.INTERNAL_ERROR, str(exc)))
        elif isinstance(event, ContentReceived):
            channel = self.channels.get(event.channel)
            if channel is None or channel.closed:
                return
            try:
                self._publish(channel, event)
            except AmqpError as error:
                await self._fail(event.channel, error.blame(*method_ids(event.method)))
        elif isinstance(event, ChannelOpened):
            self.channels[event.channel] = Channel(self, event.channel)
        elif isinstance(event, ChannelClosed):
            await self._channel_closed(event.channel)
        elif isinstance(event, ChannelFlowChanged):
            channel = self.channels.get(event.channel)
            if channel is not None:
                channel.flow_active = event.active
                self.kick(channel)
        elif isinstance(event, ConnectionOpened):
            self.capabilities = event.capabilities
            self.vhost = await self.broker.open_vhost(event.vhost, event.create_vhost)
        elif isinstance(event, ConnectionClosed):
            if event.cause == "server":
                log.info("amqp %s: connection closed: %s", self.peer, event.reply_text)
            elif event.cause == "lost" and event.reply_text != "connection lost":
                log.info("amqp %s: %s", self.peer, event.reply_text)
            await self.connection_closed()

    async def _fail(self, channel: int, error: AmqpError) -> None:
        if error.hard:
            log.info("amqp %s: closing the connection: %s", self.peer, error.reply_text)
        else:
            log.debug("amqp %s: closing channel %d: %s", self.peer, channel, error.reply_text)
        events = self.connection.send_error(channel, error)
        self.request_flush()
        await self.handle(events)

    async def _method(self, channel: Channel, method: base.Frame) -> None:
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"{method.name} not supported")
        authorize_method(self.access, self.namespace, self.state.name, method)
        await handler(self, channel, method)

    @property
    def state(self) -> VhostState:
        if self.vhost is None:
            raise AmqpError(ReplyCode.INTERNAL_ERROR, "vhost not open")
        return self.vhost

    def reply(self, channel: Channel, method: base.Frame, nowait: bool = False) -> None:
        if not nowait:
            self.send(channel.number, method)

    # --- exchanges --------------------------------------------------------------------

    async def exchange_declare(self, channel: Channel, m: commands.Exchange.Declare) -> None:
        vh = self.state
        async with vh.lock:
            exchange, new = declare_exchange(
                vh.topology,
                m.exchange,
                m.exchange_type,
                passive=m.passive,
                durable=m.durable,
                auto_delete=m.auto_delete,
                internal=m.internal,
                arguments=m.arguments,
            )
            if new:
                await vh.add_exchange(exchange)
        self.reply(channel, _E.DeclareOk(), m.nowait)

    async def exchange_delete(self, channel: Channel, m: commands.Exchange.Delete) -> None:
        vh = self.state
        async with vh.lock:
            exchange = check_exchange_delete(vh.topology, m.exchange, m.if_unused)
            if exchange is not None:
                await vh.delete_exchange(exchange.name)
        self.reply(channel, _E.DeleteOk(), m.nowait)

    async def _bind(
        self,
        source: str,
        destination: str,
        kind: DestinationKind,
        routing_key: str,
        arguments: Any,
    ) -> None:
        vh = self.state
        async with vh.lock:
            binding = check_bind(
                vh.topology,
                source,
                destination,
                kind,
                routing_key,
                arguments,
                connection_id=self.id,
            )
            await vh.add_binding(binding)

    async def _unbind(
        self,
        source: str,
        destination: str,
        kind: DestinationKind,
        routing_key: str,
        arguments: Any,
    ) -> None:
        vh = self.state
        async with vh.lock:
            binding = check_unbind(
                vh.topology,
                source,
                destination,
                kind,
                routing_key,
                arguments,
                connection_id=self.id,
            )
            if binding is not None:
                await vh.remove_binding(binding)

    async def exchange_bind(self, channel: Channel, m: commands.Exchange.Bind) -> None:
        await self._bind(
            m.source, m.destination, DestinationKind.EXCHANGE, m.routing_key, m.arguments
        )
        self.reply(channel, _E.BindOk(), m.nowait)

    async def exchange_unbind(self, channel: Channel, m: commands.Exchange.Unbind) -> None:
        await self._unbind(
            m.source, m.destination, DestinationKind.EXCHANGE, m.routing_key, m.arguments
        )
        self.reply(channel, _E.UnbindOk(), m.nowait)

    # --- queues -----------------------------------------------------------------------

    async def queue_declare(self, channel: Channel, m: commands.Queue.Declare) -> None:
        vh = self.state
        if not m.passive:
            check_supported_arguments(m.arguments or {}, m.queue, vh.name)
        async with vh.lock:
            queue, new = declare_queue(
                vh.topology,
                m.queue,
                connection_id=self.id,
                passive=m.passive,
                durable=m.durable,
                exclusive=m.exclusive,
                auto_delete=m.auto_delete,
                arguments=m.arguments,
            )
            if new:
                await vh.add_queue(queue)
                if queue.exclusive:
                    self.exclusive_queues.add(queue.name)
            vh.touch(queue.name)
            engine = vh.engine(queue.name)
        reply = make_method(
            _Q.DeclareOk,
            queue=queue.name,
            message_count=engine.message_count,
            consumer_count=engine.consumer_count,
        )
        self.reply(channel, reply, m.nowait)

    async def queue_bind(self, channel: Channel, m: commands.Queue.Bind) -> None:
        await self._bind(m.exchange, m.queue, DestinationKind.QUEUE, m.routing_key, m.arguments)
        self.reply(channel, _Q.BindOk(), m.nowait)

    async def queue_unbind(self, channel: Channel, m: commands.Queue.Unbind) -> None:
        await self._unbind(m.exchange, m.queue, DestinationKind.QUEUE, m.routing_key, m.arguments)
        self.reply(channel, _Q.UnbindOk())

    async def queue_purge(self, channel: Channel, m: commands.Queue.Purge) -> None:
        vh = self.state
        queue = check_queue_access(vh.topology, m.queue, self.id)
        purged = await vh.engine(queue.name).purge()
        self.reply(channel, make_method(_Q.PurgeOk, message_count=purged), m.nowait)

    async def queue_delete(self, channel: Channel, m: commands.Queue.Delete) -> None:
        vh = self.state
        async with vh.lock:
            name = m.queue
            engine = vh.engines.get(name) if name in vh.topology.queues else None
            queue = check_queue_delete(
                vh.topology,
                name,
                self.id,
                if_unused=m.if_unused,
                if_empty=m.if_empty,
                consumers=engine.consumer_count if engine else 0,
                messages=engine.message_count if engine else 0,
            )
            count = 0
            if queue is not None:
                count = vh.engine(queue.name).message_count
                await vh.delete_queue(queue.name)
                self.exclusive_queues.discard(queue.name)
        self.reply(channel, make_method(_Q.DeleteOk, message_count=count), m.nowait)

    # --- basic: consumers -------------------------------------------------------------

    async def basic_qos(self, channel: Channel, m: commands.Basic.Qos) -> None:
        if m.prefetch_size:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_:
            channel.global_prefetch = m.prefetch_count
        else:
            channel.prefetch = m.prefetch_count
        self.send(channel.number, _B.QosOk())
        self.kick(channel)

    async def basic_consume(self, channel: Channel, m: commands.Basic.Consume) -> None:
        vh = self.state
        queue = check_queue_access(vh.topology, m.queue, self.id)
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
        self.reply(channel, make_method(_B.ConsumeOk, consumer_tag=tag), m.nowait)
        engine.add_consumer(consumer)

    async def basic_cancel(self, channel: Channel, m: commands.Basic.Cancel) -> None:
        consumer = channel.consumers.pop(m.consumer_tag, None)
        self.reply(channel, make_method(_B.CancelOk, consumer_tag=m.consumer_tag), m.nowait)
        if consumer is not None:
            consumer.active = False
            consumer.engine.remove_consumer(consumer)
            await self.state.maybe_auto_delete(consumer.engine)

    async def basic_get(self, channel: Channel, m: commands.Basic.Get) -> None:
        vh = self.state
        queue = check_queue_access(vh.topology, m.queue, self.id)
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
            self.send(channel.number, _B.GetEmpty())
            return
        delivery, redelivered = got
        tag = channel.next_tag
        channel.next_tag += 1
        if m.no_ack:
            engine.settle([delivery], was_outstanding=True)
        else:
            channel.unacked[tag] = Unacked(tag, engine, delivery, None)
        message = delivery.message
        reply = make_method(
            _B.GetOk,
            delivery_tag=tag,
            redelivered=redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
            message_count=engine.message_count,
        )
        self.send_content(channel.number, reply, message.body, message.properties_raw)

    # --- basic: settlement ------------------------------------------------------------

    def _settle(self, channel: Channel, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
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

    def kick(self, channel: Channel, extra: dict[int, QueueEngine] | None = None) -> None:
        engines = dict(extra or {})
        for consumer in channel.consumers.values():
            engines[id(consumer.engine)] = consumer.engine
        if channel.global_prefetch and self.vhost is not None:
            engines.update({id(e): e for e in self.vhost.engines.values()})
        for engine in engines.values():
            engine.kick()

    async def basic_ack(self, channel: Channel, m: commands.Basic.Ack) -> None:
        if channel.tx is not None:
            self._hold_in_tx(channel.tx, TX_SETTLEMENT_COST)
            channel.tx.settlements.append(("ack", m.delivery_tag, m.multiple, False))
            return
        self._settle(channel, "ack", m.delivery_tag, m.multiple, False)

    async def basic_nack(self, channel: Channel, m: commands.Basic.Nack) -> None:
        if channel.tx is not None:
            self._hold_in_tx(channel.tx, TX_SETTLEMENT_COST)
            channel.tx.settlements.append(("nack", m.delivery_tag, m.multiple, m.requeue))
            return
        self._settle(channel, "nack", m.delivery_tag, m.multiple, m.requeue)

    async def basic_reject(self, channel: Channel, m: commands.Basic.Reject) -> None:
        if channel.tx is not None:
            self._hold_in_tx(channel.tx, TX_SETTLEMENT_COST)
            channel.tx.settlements.append(("nack", m.delivery_tag, False, m.requeue))
            return
        self._settle(channel, "nack", m.delivery_tag, False, m.requeue)

    async def basic_recover(self, channel: Channel, m: base.Frame) -> None:
        if not getattr(m, "requeue", True):
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        self._requeue_all(channel)
        if isinstance(m, _B.Recover):
            self.send(channel.number, _B.RecoverOk())

    def _requeue_all(self, channel: Channel) -> None:
        for engine, deliveries in _by_engine(channel.take(0, True)).values():
            engine.requeue(deliveries)

    # --- publishing -------------------------------------------------------------------

    def _publish(self, channel: Channel, event: ContentReceived) -> None:
        method = event.method
        if method.immediate:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        vh = self.state
        authorize_publish(self.access, self.namespace, vh.name, method.exchange)
        properties = event.properties
        headers = properties.headers if isinstance(properties.headers, dict) else None
        queues = route(
            vh.topology,
            method.exchange,
            method.routing_key,
            headers,
            sender_selected_keys(headers),
        )
        expiration = _expiration(properties.expiration)
        message = AmqpMessage(
            method.exchange,
            method.routing_key,
            event.properties_raw,
            event.body,
            properties.delivery_mode == 2,
            expiration,
            int(time.time() * 1000),
        )
        if channel.tx is not None:
            self._hold_in_tx(channel.tx, tx_cost(message))
            channel.tx.publishes.append((queues, message, method.mandatory))
            return
        pending: PendingConfirm | None = None
        if channel.confirm:
            channel.publish_seq += 1
            pending = PendingConfirm(channel.publish_seq)
            channel.confirms.append(pending)
        refused = False
        if queues:
            queues, full = vh.overflow(queues, message)
            refused = bool(full)
            if pending is not None and refused:
                pending.ok = False  # basic.nack, as RabbitMQ for x-overflow reject-publish
        if not queues:
            if method.mandatory and not refused:
                self._return(channel, message)
            if pending is not None:
                pending.done = True
                self._flush_confirms(channel)
            return
        cost = tx_cost(message) * len(queues) + PUBLISH_OVERHEAD
        self.in_flight_bytes += cost
        alarm = self.limits.alarm
        if alarm is not None:
            alarm.add(cost)
        if self._unblocked.is_set():
            # RabbitMQ says "low on memory" (its node-wide alarm); here, which bound it is
            if self.in_flight_bytes >= self.limits.max_in_flight_bytes:
                self._block("publishes awaiting storage exceed amqp.max_in_flight_bytes")
            elif alarm is not None and alarm.raised:
                self._block(
                    "the gateway's publishes awaiting storage exceed amqp.max_total_in_flight_bytes"
                )
        write = vh.write(
            queues, message, lambda t: self._published(channel, pending, cost, t, queues, message)
        )
        channel.writing[write] = queues
        self._writes.add(write)

    def _block(self, reason: str) -> None:
        self._unblocked.clear()
        self.connection.set_blocked(True, reason)
        self.request_flush()

    def _maybe_unblock(self) -> None:
        """Read the peer again once its own publishes are down to half their bound and the
        gateway-wide alarm is not raised (called after each store, and when the alarm clears)."""
        if self._unblocked.is_set() or self.closed:
            return
        if self.in_flight_bytes > self.limits.max_in_flight_bytes // 2:
            return
        if self.limits.alarm is not None and self.limits.alarm.raised:
            return
        self._unblocked.set()
        self.connection.set_blocked(False)
        self.request_flush()

    def _published(
        self,
        channel: Channel,
        pending: PendingConfirm | None,
        cost: int,
        task: asyncio.Future[None],
        queues: frozenset[str],
        message: AmqpMessage,
    ) -> None:
        channel.writing.pop(task, None)
        self._writes.discard(task)
        self.in_flight_bytes -= cost
        if self.limits.alarm is not None:
            self.limits.alarm.remove(cost)
        self._maybe_unblock()
        error = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if error is not None:
            log.warning("amqp publish failed: %s", error)
        if pending is not None:
            pending.ok = pending.ok and error is None
            copies = self._own_deliveries(channel, queues) if pending.ok else 0
            if copies:
                channel.hold(pending, message, copies)
                return
            pending.done = True
            self._flush_confirms(channel)

    def _own_deliveries(self, channel: Channel, queues: frozenset[str]) -> int:
        """How many copies of a stored publish this channel's consumers are about to get
        (one per queue it went to where a consumer here has credit): its confirm
        follows them. A queue that also has consumers on other channels does not count:
        its copy may go to one of those (RabbitMQ orders nothing across channels), and
        holding the confirm for it would only delay it by Channel.hold's time limit."""
        if not channel.consumers or channel.closed:
            return 0
        return len(
            {
                consumer.engine.name
                for consumer in channel.consumers.values()
                if consumer.engine.name in queues
                and consumer.active
                and consumer.has_credit()
                and all(getattr(c, "channel", None) is channel for c in consumer.engine.consumers)
            }
        )

    def confirms_ready(self, channel: Channel) -> None:
        """A held confirm was released (Channel.hold): send what is now in order."""
        self._flush_confirms(channel)

    def _return(self, channel: Channel, message: AmqpMessage) -> None:
        method = make_method(
            _B.Return,
            reply_code=ReplyCode.NO_ROUTE,
            reply_text="NO_ROUTE",
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        self.send_content(channel.number, method, message.body, message.properties_raw)

    def _flush_confirms(self, channel: Channel) -> None:
        if channel.closed:
            return
        done = channel.confirmed_prefix()
        index = 0
        while index < len(done):
            item = done[index]
            end = index
            while end + 1 < len(done) and done[end + 1].ok == item.ok:
                end += 1
            kind = _B.Ack if item.ok else _B.Nack
            self.send(
                channel.number,
                make_method(kind, delivery_tag=done[end].seq, multiple=end > index),
            )
            index = end + 1

    async def confirm_select(self, channel: Channel, m: commands.Confirm.Select) -> None:
        if channel.tx is not None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
        channel.confirm = True
        self.reply(channel, commands.Confirm.SelectOk(), m.nowait)

    # --- transactions -----------------------------------------------------------------

    async def tx_select(self, channel: Channel, m: commands.Tx.Select) -> None:
        if channel.confirm:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if channel.tx is None:
            channel.tx = TxBuffer()
        self.send(channel.number, _T.SelectOk())

    def _hold_in_tx(self, tx: TxBuffer, cost: int) -> None:
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
        limit = self.limits.max_tx_bytes
        if self.tx_bytes and self.tx_bytes + cost > limit:
            if tx.size + cost > limit:
                where = f"transaction size would reach {tx.size + cost} bytes"
            else:
                where = (
                    f"the open transactions of this connection would hold "
                    f"{self.tx_bytes + cost} bytes"
                )
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"{where}, over the limit of {limit} bytes of uncommitted publishes "
                "(amqp.max_tx_bytes); commit smaller transactions",
            )
        tx.size += cost
        self.tx_bytes += cost

    def _drop_tx(self, tx: TxBuffer | None) -> None:
        """A transaction's buffer is committed, rolled back or closed with its channel."""
        if tx is not None:
            self.tx_bytes -= tx.size
            tx.size = 0

    async def tx_commit(self, channel: Channel, m: commands.Tx.Commit) -> None:
        if channel.tx is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        buffer = channel.tx
        channel.tx = TxBuffer()
        vh = self.state
        writes: list[asyncio.Future[None]] = []
        try:
            for routed, message, mandatory in buffer.publishes:
                queues, full = vh.overflow(routed, message) if routed else (routed, [])
                if full:
                    continue  # refused by a full reject-publish queue: dropped
                if not queues:
                    if mandatory:
                        self._return(channel, message)
                    continue
                writes.append(vh.write(queues, message))
            await asyncio.gather(*writes)
        finally:
            self._drop_tx(buffer)  # stored (or failed): no longer the transaction's to hold
        for kind, tag, multiple, requeue in buffer.settlements:
            self._settle(channel, kind, tag, multiple, requeue)
        self.send(channel.number, _T.CommitOk())

    async def tx_rollback(self, channel: Channel, m: commands.Tx.Rollback) -> None:
        if channel.tx is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        self._drop_tx(channel.tx)
        channel.tx = TxBuffer()
        self.send(channel.number, _T.RollbackOk())

    # --- closing ----------------------------------------------------------------------

    async def _channel_closed(self, number: int) -> None:
        channel = self.channels.pop(number, None)
        if channel is None or channel.closed:
            return
        channel.closed = True
        self._drop_tx(channel.tx)
        channel.tx = None
        engines: dict[int, QueueEngine] = {}
        for consumer in list(channel.consumers.values()):
            consumer.active = False
            consumer.engine.remove_consumer(consumer)
            engines[id(consumer.engine)] = consumer.engine
        channel.consumers.clear()
        channel.drop_holds()
        channel.confirms.clear()
        self._requeue_all(channel)
        if self.vhost is not None:
            for engine in engines.values():
                with contextlib.suppress(Exception):
                    await self.vhost.maybe_auto_delete(engine)

    async def publishes_stored(self, timeout: float) -> bool:
        """Wait until every publish this connection handed to the store is stored (or
        failed), at most ``timeout`` seconds; True when none is left.

        The listener holds connection.close-ok until then: a client that published and
        closed takes close-ok as "the broker has my messages", so a basic.get on another
        connection right after must find them, as on RabbitMQ (docs/architecture.md,
        "Data path: AMQP publish and deliver", step 9).
        """
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=timeout)
        return not self._writes

    async def connection_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.limits.alarm is not None:
            self.limits.alarm.unwatch(self._maybe_unblock)
        for number in list(self.channels):
            await self._channel_closed(number)
        vh = self.vhost
        if vh is None:
            return
        for name in sorted(self.exclusive_queues):
            try:
                async with vh.lock:
                    await vh.delete_queue(name)
            except Exception as exc:
                log.warning("deleting exclusive queue %s failed: %s", name, exc)
        self.exclusive_queues.clear()


def _by_engine(items: list[Unacked]) -> dict[int, tuple[QueueEngine, list[StoredDelivery]]]:
    """Settled deliveries grouped by the engine they came from (keyed by its id),
    so each engine acts once on its share."""
    groups: dict[int, tuple[QueueEngine, list[StoredDelivery]]] = {}
    for item in items:
        groups.setdefault(id(item.engine), (item.engine, []))[1].append(item.delivery)
    return groups


def _expiration(value: Any) -> int | None:
    """The expiration property as a per-message TTL in ms (None when unset); a
    value that is not a non-negative integer is refused with 406, as RabbitMQ does."""
    text = text_or_none(value)
    if text is None or not text:
        return None
    try:
        number = int(text)
    except ValueError:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}'") from None
    if number < 0:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}'")
    return number


Handler = Callable[[ConnectionBroker, Channel, Any], Awaitable[None]]
_HANDLERS: Mapping[type[base.Frame], Handler] = MappingProxyType(
    {
        _E.Declare: ConnectionBroker.exchange_declare,
        _E.Delete: ConnectionBroker.exchange_delete,
        _E.Bind: ConnectionBroker.exchange_bind,
        _E.Unbind: ConnectionBroker.exchange_unbind,
        _Q.Declare: ConnectionBroker.queue_declare,
        _Q.Bind: ConnectionBroker.queue_bind,
        _Q.Unbind: ConnectionBroker.queue_unbind,
        _Q.Purge: ConnectionBroker.queue_purge,
        _Q.Delete: ConnectionBroker.queue_delete,
        _B.Qos: ConnectionBroker.basic_qos,
        _B.Consume: ConnectionBroker.basic_consume,
        _B.Cancel: ConnectionBroker.basic_cancel,
        _B.Get: ConnectionBroker.basic_get,
        _B.Ack: ConnectionBroker.basic_ack,
        _B.Nack: ConnectionBroker.basic_nack,
        _B.Reject: ConnectionBroker.basic_reject,
        _B.Recover: ConnectionBroker.basic_recover,
        _B.RecoverAsync: ConnectionBroker.basic_recover,
        commands.Confirm.Select: ConnectionBroker.confirm_select,
        _T.Select: ConnectionBroker.tx_select,
        _T.Commit: ConnectionBroker.tx_commit,
        _T.Rollback: ConnectionBroker.tx_rollback,
    }
)
