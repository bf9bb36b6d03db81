"""The AMQP broker layer: what each channel method does, on top of a `BrokerStore`.

`AmqpBroker` is the process-wide part (vhosts, their topology and queue
engines); `ConnectionBroker` acts on the events of one `AmqpConnection`.
Validation (declare rules, reply codes and texts) comes from topology.py and
exchange_routing.py; storage only through the store, so this file is
testable with a fake store and never sees Pulsar.

Methods of one connection are handled in order, each awaited before the next
(declares, deletes, gets). Publishes are the exception: the store write runs
as a task so a publisher streams, and the confirm is sent when it is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, BrokerStore, StoredDelivery
from pulsar_gateway.handlers.amqp.channel import (
    Channel,
    Consumer,
    PendingConfirm,
    TxBuffer,
    Unacked,
)
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection
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
from pulsar_gateway.handlers.amqp.frames import encode_properties, make_method
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.topology import Binding, DestinationKind, Topology
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

log = logging.getLogger("gateway.amqp")

_B = commands.Basic
_Q = commands.Queue
_E = commands.Exchange
_T = commands.Tx
BLOCK_HIGH_WATER = 2000  # publishes in flight per connection before it stops reading
BLOCK_LOW_WATER = 500
EXPIRY_SWEEP_SECONDS = 0.25
READER_IDLE_SECONDS = 30.0  # close a queue's Pulsar consumer after this long unread
_connection_ids = itertools.count(1)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


class VhostState:
    """One vhost in this process: its topology and one engine per used queue."""

    def __init__(self, broker: AmqpBroker, name: str, topology: Topology) -> None:
        self.broker = broker
        self.name = name
        self.topology = topology
        self.store = broker.store
        self.engines: dict[str, QueueEngine] = {}
        self.lock = asyncio.Lock()
        self.queue_used: dict[str, float] = {q: time.monotonic() for q in topology.queues}
        self._sweeper = asyncio.ensure_future(self._sweep_expired())

    def engine(self, name: str) -> QueueEngine:
        engine = self.engines.get(name)
        if engine is None or engine.closed:
            engine = self.engines[name] = QueueEngine(self, self.topology.queues[name], self.store)
        return engine

    def touch(self, queue: str) -> None:
        self.queue_used[queue] = time.monotonic()

    # --- removal with cascades ---------------------------------------------------------

    def _durable_binding(self, binding: Binding) -> bool:
        source = self.topology.exchanges.get(binding.source)
        if source is None or not source.durable:
            return False
        if binding.destination_kind is DestinationKind.QUEUE:
            queue = self.topology.queues.get(binding.destination)
            return queue is not None and queue.durable
        target = self.topology.exchanges.get(binding.destination)
        return target is not None and target.durable

    async def _forget(self, change: Callable[[], list[str]]) -> None:
        """Apply a topology removal and drop every record it took with it."""
        before = {b.key: (b, self._durable_binding(b)) for b in self.topology.bindings()}
        exchanges_before = dict(self.topology.exchanges)
        removed_exchanges = change()
        after = {b.key for b in self.topology.bindings()}
        for key, (binding, durable) in before.items():
            if key not in after and durable:
                await self.store.remove_binding(self.name, binding)
        for name in removed_exchanges:
            exchange = exchanges_before.get(name)
            if exchange is not None and exchange.durable:
                await self.store.remove_exchange(self.name, name)

    async def delete_queue(self, name: str) -> None:
        if name not in self.topology.queues:
            return
        engine = self.engines.pop(name, None)
        if engine is not None:
            engine.cancel_consumers()
            await engine.close()
        self.queue_used.pop(name, None)
        await self._forget(lambda: self.topology.remove_queue(name))
        await self.store.remove_queue(self.name, name)
        self.broker.owned_queues.pop((self.name, name), None)

    async def maybe_auto_delete(self, engine: QueueEngine) -> None:
        queue = engine.queue
        if queue.auto_delete and engine.ever_consumed and not engine.consumers:
            async with self.lock:
                if self.engines.get(queue.name) is engine and not engine.consumers:
                    await self.delete_queue(queue.name)

    async def _sweep_expired(self) -> None:
        """x-expires: a queue unused (no consumers, no get, no redeclare) that long goes.
        Also closes the Pulsar consumers of queues nobody has read for a while."""
        while True:
            await asyncio.sleep(EXPIRY_SWEEP_SECONDS)
            now = time.monotonic()
            for engine in list(self.engines.values()):
                if engine.idle and now - engine.last_used > self.broker.reader_idle_seconds:
                    await engine.release_reader()
            for name, queue in list(self.topology.queues.items()):
                expires = queue.expires
                if expires is None:
                    continue
                engine = self.engines.get(name)
                if engine is not None and engine.consumers:
                    self.touch(name)
                    continue
                used = max(self.queue_used.get(name, now), engine.last_used if engine else 0)
                if now - used >= expires / 1000:
                    try:
                        async with self.lock:
                            await self.delete_queue(name)
                    except Exception as exc:
                        log.warning("expiring queue %s failed: %s", name, exc)

    # --- dead-lettering ---------------------------------------------------------------

    def dead_letter(
        self, engine: QueueEngine, deliveries: list[StoredDelivery], reason: str
    ) -> None:
        """Messages leaving `engine`'s queue unconsumed (expired, maxlen, rejected)."""
        dlx = engine.queue.dead_letter_exchange
        if dlx is None or dlx not in self.topology.exchanges:
            engine.settle(deliveries, was_outstanding=False)
            return
        engine.settle(deliveries, was_outstanding=False, ack=False)
        copies: list[tuple[frozenset[str], AmqpMessage]] = []
        for delivery in deliveries:
            message = delivery.message
            key = engine.queue.dead_letter_routing_key or message.routing_key
            raw, headers = _dead_letter_properties(message, engine.queue.name, reason)
            try:
                queues = route(self.topology, dlx, key, headers, sender_selected_keys(headers))
            except AmqpError:
                continue
            copy = AmqpMessage(
                dlx, key, raw, message.body, message.persistent, None, int(time.time() * 1000)
            )
            if queues:
                copies.append((queues, copy))
        ids = [d.message_id for d in deliveries]

        async def publish() -> None:
            try:
                for queues, copy in copies:
                    await self.write(queues, copy)
            except Exception as exc:
                log.warning("dead-lettering from %s failed: %s", engine.name, exc)
                return  # not acked: Pulsar redelivers after a restart
            engine.ack_stored(ids)

        asyncio.ensure_future(publish())

    def publishing(self, queues: Iterable[str]) -> None:
        for name in queues:
            if name in self.topology.queues:
                self.engine(name).publishing(1)

    def published(self, queues: Iterable[str], ok: bool) -> None:
        for name in queues:
            engine = self.engines.get(name)
            if engine is not None and not engine.closed:
                if ok:
                    engine.stored(1)
                else:
                    engine.publish_failed(1)

    async def write(self, queues: frozenset[str], message: AmqpMessage) -> None:
        """Store one copy per queue, keeping the queues' counts right meanwhile."""
        self.publishing(queues)
        try:
            await self.store.publish(self.name, queues, message)
        except BaseException:
            self.published(queues, False)
            raise
        self.published(queues, True)

    async def close(self) -> None:
        self._sweeper.cancel()
        for engine in list(self.engines.values()):
            await engine.flush_count()
            await engine.close()


def _dead_letter_properties(
    message: AmqpMessage, queue: str, reason: str
) -> tuple[bytes, dict[str, Any]]:
    """The message's properties with an x-death entry added and expiration removed."""
    raw = message.properties_raw
    try:
        properties = commands.Basic.Properties()
        properties.unmarshal(int.from_bytes(raw[:2], "big"), raw[2:])
    except Exception:
        return raw, {}
    headers = dict(properties.headers or {})
    deaths = list(headers.get("x-death") or [])
    death = {
        "count": 1,
        "reason": reason,
        "queue": queue,
        "time": _dt_now(),
        "exchange": message.exchange,
        "routing-keys": [message.routing_key],
    }
    if properties.expiration:
        death["original-expiration"] = properties.expiration
    deaths.insert(0, death)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", message.exchange)
    properties.headers = headers
    properties.expiration = None
    return encode_properties(properties), headers


def _dt_now() -> Any:
    import datetime

    return datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)


class AmqpBroker:
    """Process-wide AMQP state over one store."""

    def __init__(
        self, store: BrokerStore, reader_idle_seconds: float = READER_IDLE_SECONDS
    ) -> None:
        self.store = store
        self.reader_idle_seconds = reader_idle_seconds
        self.vhosts: dict[str, VhostState] = {}
        self._opening: dict[str, asyncio.Task[VhostState]] = {}
        # exclusive queues -> the connection that owns them
        self.owned_queues: dict[tuple[str, str], ConnectionBroker] = {}

    async def open_vhost(self, name: str, create: bool) -> VhostState:
        state = self.vhosts.get(name)
        if state is not None:
            return state
        task = self._opening.get(name)
        if task is None:
            task = self._opening[name] = asyncio.ensure_future(self._load(name, create))
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(name, None)

    async def _load(self, name: str, create: bool) -> VhostState:
        if create:
            await self.store.create_vhost(name)
        topology = await self.store.load_topology(name)
        state = VhostState(self, name, topology)
        self.vhosts[name] = state
        return state

    async def close(self) -> None:
        for state in list(self.vhosts.values()):
            await state.close()


Sender = Callable[[], None]


class ConnectionBroker:
    """The broker side of one connection: acts on the events of its `AmqpConnection`."""

    def __init__(
        self,
        broker: AmqpBroker,
        connection: AmqpConnection,
        request_flush: Callable[[], None],
        write_buffer_size: Callable[[], int],
    ) -> None:
        self.broker = broker
        self.connection = connection
        self.id = f"{next(_connection_ids)}"
        self.peer = connection.peer_host
        self.request_flush = request_flush
        self.write_buffer_size = write_buffer_size
        # set when a delivery was held back for a full write buffer; the socket
        # side kicks the channels again once there is room
        self.throttled = False
        self.vhost: VhostState | None = None
        self.channels: dict[int, Channel] = {}
        self.capabilities: dict[str, Any] = {}
        self.exclusive_queues: set[str] = set()
        self.in_flight = 0
        self._unblocked = asyncio.Event()
        self._unblocked.set()
        self.closed = False

    # --- output -----------------------------------------------------------------------

    def send(self, channel: int, method: base.Frame) -> None:
        if self.connection.send_method(channel, method):
            self.request_flush()

    def send_content(
        self, channel: int, method: base.Frame, body: bytes, properties_raw: bytes
    ) -> None:
        if self.connection.send_content(channel, method, body, properties_raw):
            self.request_flush()

    async def wait_unblocked(self) -> None:
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
                await self._fail(event.channel, error.blame(*_ids(event.method)))
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
                await self._fail(event.channel, error.blame(*_ids(event.method)))
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
                await vh.store.save_exchange(vh.name, exchange)
                vh.topology.add_exchange(exchange)
        self.reply(channel, _E.DeclareOk(), m.nowait)

    async def exchange_delete(self, channel: Channel, m: commands.Exchange.Delete) -> None:
        vh = self.state
        async with vh.lock:
            exchange = check_exchange_delete(vh.topology, m.exchange, m.if_unused)
            if exchange is not None:
                await vh._forget(lambda: vh.topology.remove_exchange(exchange.name))
        self.reply(channel, _E.DeleteOk(), m.nowait)

    async def _bind(
        self,
        channel: Channel,
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
            if not vh.topology.has_binding(binding):
                if vh._durable_binding(binding):
                    await vh.store.save_binding(vh.name, binding)
                vh.topology.add_binding(binding)

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
                await vh._forget(lambda: vh.topology.remove_binding(binding))

    async def exchange_bind(self, channel: Channel, m: commands.Exchange.Bind) -> None:
        await self._bind(
            channel, m.source, m.destination, DestinationKind.EXCHANGE, m.routing_key, m.arguments
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
                await vh.store.save_queue(vh.name, queue)
                vh.topology.add_queue(queue)
                if queue.exclusive:
                    self.exclusive_queues.add(queue.name)
                    self.broker.owned_queues[(vh.name, queue.name)] = self
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
        await self._bind(
            channel, m.exchange, m.queue, DestinationKind.QUEUE, m.routing_key, m.arguments
        )
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
        by_engine: dict[int, tuple[QueueEngine, list[StoredDelivery]]] = {}
        for item in items:
            by_engine.setdefault(id(item.engine), (item.engine, []))[1].append(item.delivery)
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
            channel.tx.settlements.append(("ack", m.delivery_tag, m.multiple, False))
            return
        self._settle(channel, "ack", m.delivery_tag, m.multiple, False)

    async def basic_nack(self, channel: Channel, m: commands.Basic.Nack) -> None:
        if channel.tx is not None:
            channel.tx.settlements.append(("nack", m.delivery_tag, m.multiple, m.requeue))
            return
        self._settle(channel, "nack", m.delivery_tag, m.multiple, m.requeue)

    async def basic_reject(self, channel: Channel, m: commands.Basic.Reject) -> None:
        if channel.tx is not None:
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
        items = channel.take(0, True)
        by_engine: dict[int, tuple[QueueEngine, list[StoredDelivery]]] = {}
        for item in items:
            by_engine.setdefault(id(item.engine), (item.engine, []))[1].append(item.delivery)
        for engine, deliveries in by_engine.values():
            engine.requeue(deliveries)

    # --- publishing -------------------------------------------------------------------

    def _publish(self, channel: Channel, event: ContentReceived) -> None:
        method = event.method
        if method.immediate:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        vh = self.state
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
            channel.tx.publishes.append((queues, message, method.mandatory))
            return
        pending: PendingConfirm | None = None
        if channel.confirm:
            channel.publish_seq += 1
            pending = PendingConfirm(channel.publish_seq)
            channel.confirms.append(pending)
        if not queues:
            if method.mandatory:
                self._return(channel, message)
            if pending is not None:
                pending.done = True
                self._flush_confirms(channel)
            return
        self.in_flight += 1
        if self.in_flight >= BLOCK_HIGH_WATER and self._unblocked.is_set():
            self._unblocked.clear()
            self.connection.set_blocked(True, "too many publishes in flight")
            self.request_flush()
        vh.publishing(queues)
        task = asyncio.ensure_future(vh.store.publish(vh.name, queues, message))
        task.add_done_callback(lambda t: self._published(channel, queues, pending, t))

    def _published(
        self,
        channel: Channel,
        queues: frozenset[str],
        pending: PendingConfirm | None,
        task: asyncio.Future[None],
    ) -> None:
        self.in_flight -= 1
        if self.in_flight <= BLOCK_LOW_WATER and not self._unblocked.is_set():
            self._unblocked.set()
            self.connection.set_blocked(False)
            self.request_flush()
        error = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if self.vhost is not None:
            self.vhost.published(queues, error is None)
        if error is not None:
            log.warning("amqp publish failed: %s", error)
        if pending is not None:
            pending.done = True
            pending.ok = error is None
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

    async def tx_commit(self, channel: Channel, m: commands.Tx.Commit) -> None:
        if channel.tx is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        buffer = channel.tx
        channel.tx = TxBuffer()
        vh = self.state
        writes: list[Awaitable[None]] = []
        for queues, message, mandatory in buffer.publishes:
            if not queues:
                if mandatory:
                    self._return(channel, message)
                continue
            writes.append(vh.write(queues, message))
        await asyncio.gather(*writes)
        for kind, tag, multiple, requeue in buffer.settlements:
            self._settle(channel, kind, tag, multiple, requeue)
        self.send(channel.number, _T.CommitOk())

    async def tx_rollback(self, channel: Channel, m: commands.Tx.Rollback) -> None:
        if channel.tx is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        channel.tx = TxBuffer()
        self.send(channel.number, _T.RollbackOk())

    # --- closing ----------------------------------------------------------------------

    async def _channel_closed(self, number: int) -> None:
        channel = self.channels.pop(number, None)
        if channel is None or channel.closed:
            return
        channel.closed = True
        engines: dict[int, QueueEngine] = {}
        for consumer in list(channel.consumers.values()):
            consumer.active = False
            consumer.engine.remove_consumer(consumer)
            engines[id(consumer.engine)] = consumer.engine
        channel.consumers.clear()
        channel.confirms.clear()
        self._requeue_all(channel)
        if self.vhost is not None:
            for engine in engines.values():
                with contextlib.suppress(Exception):
                    await self.vhost.maybe_auto_delete(engine)

    async def connection_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
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


def _expiration(value: Any) -> int | None:
    text = _text(value)
    if text is None or not text:
        return None
    try:
        number = int(text)
    except ValueError:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}'") from None
    if number < 0:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}'")
    return number


def _ids(method: base.Frame) -> tuple[int, int]:
    from pulsar_gateway.handlers.amqp.content_assembly import method_ids

    return method_ids(method)


Handler = Callable[[ConnectionBroker, Channel, Any], Awaitable[None]]
_HANDLERS: dict[type[base.Frame], Handler] = {
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
