"""One vhost in this process: its topology, its queue engines, and what RabbitMQ
does on its own (x-expires, dead-lettering, cascading deletes).

Topology changes go through `VhostState` so the stored records always follow
the in-memory topology: a caller validates with topology_rules.py while
holding `lock`, then calls `add_*` / `remove_binding` / `delete_*`, which
write the store before (or right after) changing memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, BrokerStore, StoredDelivery
from pulsar_gateway.handlers.amqp.dead_letters import dead_letter_copy, message_headers
from pulsar_gateway.handlers.amqp.delayed_exchange import DelayedMessages, uses_delays
from pulsar_gateway.handlers.amqp.direct_reply import ReplyRoutes
from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.amqp.exchange_routing import route, sender_selected_keys
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine
from pulsar_gateway.handlers.amqp.stream_engine import StreamEngine
from pulsar_gateway.handlers.amqp.topology import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Queue,
    Topology,
)

log = logging.getLogger("gateway.amqp")

EXPIRY_SWEEP_SECONDS = 0.25


class VhostState:
    """One vhost in this process: its topology and one engine per used queue."""

    def __init__(
        self, store: BrokerStore, name: str, topology: Topology, reader_idle_seconds: float
    ) -> None:
        self.name = name
        self.topology = topology
        self.store = store
        self.reader_idle_seconds = reader_idle_seconds
        self.engines: dict[str, QueueEngine] = {}
        self.streams: dict[str, StreamEngine] = {}  # stream queues (stream_engine.py)
        self.replies = ReplyRoutes()  # direct reply-to consumers by address
        self._delayed: DelayedMessages | None = None  # x-delayed-message exchanges' holds
        # held across a check (topology_rules) and the change it allows
        self.lock = asyncio.Lock()
        self.queue_used: dict[str, float] = {q: time.monotonic() for q in topology.queues}
        self._sweeper = asyncio.ensure_future(self._sweep_expired())
        self._wake_expiring()
        if uses_delays(topology):
            self.delayed.start()

    @property
    def delayed(self) -> DelayedMessages:
        """The vhost's delayed messages (delayed_exchange.py), opened on first use."""
        if self._delayed is None:
            self._delayed = DelayedMessages(self.store, self.name, self)
        return self._delayed

    async def route_due(self, message: AmqpMessage) -> None:
        """A delayed message is due: routed by its exchange now, and stored."""
        headers = message_headers(message.properties_raw)
        try:
            queues = route(
                self.topology,
                message.exchange,
                message.routing_key,
                headers,
                sender_selected_keys(headers),
            )
        except AmqpError:
            return  # the exchange is gone: so is the message, as with the plugin
        if queues:
            await self.write(queues, message)

    def _wake_expiring(self) -> None:
        """After a start, messages left in a queue may be due to expire (a TTL, or the
        delay queues of task frameworks: per-message TTLs into a dead-letter exchange)
        with nobody reading the queue: such queues fetch their heads now, so those expire
        on time as on RabbitMQ, whose queue processes start with the node."""
        for name, queue in self.topology.queues.items():
            if queue.message_ttl is None and queue.dead_letter_exchange is None:
                continue
            engine = self.engine(name)
            if engine.count > 0:
                engine.look_at_head()

    def engine(self, name: str) -> QueueEngine:
        engine = self.engines.get(name)
        if engine is None or engine.closed:
            engine = self.engines[name] = QueueEngine(self, self.topology.queues[name], self.store)
        return engine

    def stream(self, name: str) -> StreamEngine:
        engine = self.streams.get(name)
        if engine is None or engine.closed:
            queue = self.topology.queues[name]
            engine = self.streams[name] = StreamEngine(self.name, queue, self.store)
        return engine

    def consumed(self, name: str) -> QueueEngine | StreamEngine:
        """The engine of a queue for queue.declare-ok's counts and queue.delete's checks."""
        if self.topology.queues[name].is_stream:
            return self.stream(name)
        return self.engine(name)

    def touch(self, queue: str) -> None:
        """The queue was used (declared again, read with basic.get): x-expires restarts."""
        self.queue_used[queue] = time.monotonic()

    # --- topology changes (the caller holds `lock`) -----------------------------------

    async def add_exchange(self, exchange: Exchange) -> None:
        await self.store.save_exchange(self.name, exchange)
        self.topology.add_exchange(exchange)
        if exchange.type is ExchangeType.DELAYED:
            await self.delayed.start()

    async def add_queue(self, queue: Queue) -> None:
        await self.store.save_queue(self.name, queue)
        self.topology.add_queue(queue)

    async def add_binding(self, binding: Binding) -> None:
        """Add a binding unless it exists (binding twice is harmless); only a
        binding between durable ends is stored, as only those survive a restart."""
        if self.topology.has_binding(binding):
            return
        if self._durable_binding(binding):
            await self.store.save_binding(self.name, binding)
        self.topology.add_binding(binding)

    async def remove_binding(self, binding: Binding) -> None:
        await self._forget(lambda: self.topology.remove_binding(binding))

    async def delete_exchange(self, name: str) -> None:
        await self._forget(lambda: self.topology.remove_exchange(name))

    async def delete_queue(self, name: str) -> None:
        """Delete the queue: its consumers are cancelled, its bindings and records go."""
        if name not in self.topology.queues:
            return
        engine = self.engines.pop(name, None)
        if engine is not None:
            engine.cancel_consumers()
            await engine.close()
        stream = self.streams.pop(name, None)
        if stream is not None:
            stream.cancel_consumers()
            await stream.close()
        self.queue_used.pop(name, None)
        await self._forget(lambda: self.topology.remove_queue(name))
        await self.store.remove_queue(self.name, name)

    async def maybe_auto_delete(self, engine: QueueEngine) -> None:
        """An auto-delete queue goes when its last consumer does (never before one came)."""
        queue = engine.queue
        if queue.auto_delete and engine.ever_consumed and not engine.consumers:
            async with self.lock:
                if self.engines.get(queue.name) is engine and not engine.consumers:
                    await self.delete_queue(queue.name)

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

    async def _sweep_expired(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_SWEEP_SECONDS)
            await self.sweep(time.monotonic())

    async def sweep(self, now: float) -> None:
        """x-expires: a queue unused (no consumers, no get, no redeclare) that long goes.
        Also closes the Pulsar consumers of queues nobody has read for a while, and lets
        every queue forget the acked ids past their time: a queue that went quiet would
        otherwise keep its last two minutes of ids (50,000 small objects after the soak,
        pinning the allocator's arenas; docs/architecture.md, "Memory") until its next
        ack."""
        for engine in list(self.engines.values()):
            engine.forget_old(now)
            if engine.idle and now - engine.last_used > self.reader_idle_seconds:
                await engine.release_reader()
        for name, queue in list(self.topology.queues.items()):
            expires = queue.expires
            if expires is None:
                continue
            open_engine = self.engines.get(name)
            if open_engine is not None and open_engine.consumers:
                self.touch(name)
                continue
            used = max(self.queue_used.get(name, now), open_engine.last_used if open_engine else 0)
            if now - used >= expires / 1000:
                try:
                    async with self.lock:
                        await self.delete_queue(name)
                except Exception as exc:
                    log.warning("expiring queue %s failed: %s", name, exc)

    # --- messages ---------------------------------------------------------------------

    def write(
        self,
        queues: frozenset[str],
        message: AmqpMessage,
        then: Callable[[asyncio.Future[Any]], None] | None = None,
    ) -> asyncio.Future[Any]:
        """Start storing one copy per queue; done when every copy is stored.

        The queues' engines count the copies as on their way meanwhile (a
        consumer may see a copy before the store answers) and as stored or
        failed when the write ends, before any callback the caller adds; `then` runs
        right after that, in the same callback (one loop callback per publish, not two).
        """
        size = len(message.body)
        expiring = message.expiration_ms is not None
        self._writing(queues, size)
        task = asyncio.ensure_future(self.store.publish(self.name, queues, message))

        def written(done: asyncio.Future[Any]) -> None:
            ok = not done.cancelled() and done.exception() is None
            self._written(queues, size, ok, expiring)
            if then is not None:
                then(done)

        task.add_done_callback(written)
        return task

    def _writing(self, queues: Iterable[str], size: int) -> None:
        for name in queues:
            queue = self.topology.queues.get(name)
            # a queue without arguments is no stream (the check parses them: per publish)
            if queue is not None and (not queue.arguments or not queue.is_stream):
                self.engine(name).publishing(1, size)

    def _written(self, queues: Iterable[str], size: int, ok: bool, expiring: bool) -> None:
        for name in queues:
            engine = self.engines.get(name)
            if engine is not None and not engine.closed:
                if ok:
                    engine.stored(1, size, expiring)
                else:
                    engine.publish_failed(1, size)

    def overflow(
        self, queues: frozenset[str], message: AmqpMessage
    ) -> tuple[frozenset[str], list[Queue]]:
        """x-overflow reject-publish and reject-publish-dlx: the routed queues that take
        the message, and those that refuse it for being full.

        RabbitMQ counts ready messages (not unacknowledged ones) against x-max-length,
        and refuses a message whose body would take the ready bytes over
        x-max-length-bytes; here the publishes on their way to the store count too, so
        pipelined publishes cannot overshoot. A refused publish is nacked to a
        confirming publisher even if other queues took it, and is not returned (it was
        routed). reject-publish-dlx
        dead-letters it (reason maxlen) as drop-head does the heads it drops.
        """
        rejected: list[Queue] = []
        for name in queues:
            queue = self.topology.queues.get(name)
            if queue is None or not queue.arguments or queue.overflow == "drop-head":
                continue  # no arguments: no limits (the check parses them: per publish)
            limit, byte_limit = queue.max_length, queue.max_length_bytes
            if limit is None and byte_limit is None:
                continue
            engine = self.engine(name)
            ready = max(0, engine.count - engine.outstanding) + engine.pending_stores
            ready_bytes = engine.ready_bytes + engine.pending_bytes + len(message.body)
            if (limit is not None and ready >= limit) or (
                byte_limit is not None and ready_bytes > byte_limit
            ):
                rejected.append(queue)
        if not rejected:
            return queues, rejected
        for queue in rejected:
            if queue.overflow == "reject-publish-dlx":
                copy = dead_letter_copy(self.topology, queue, message, "maxlen")
                if copy is not None:
                    self.write(*copy).add_done_callback(_log_failed_dead_letter)
        return queues - {q.name for q in rejected}, rejected

    def dead_letter(
        self, engine: QueueEngine, deliveries: list[StoredDelivery], reason: str
    ) -> None:
        """Messages leaving `engine`'s queue unconsumed (expired, maxlen, rejected)."""
        dlx = engine.queue.dead_letter_exchange
        if dlx is None or dlx not in self.topology.exchanges:
            engine.settle(deliveries, was_outstanding=False)
            return
        engine.settle(deliveries, was_outstanding=False, ack=False)
        copies = [
            copy
            for delivery in deliveries
            if (copy := dead_letter_copy(self.topology, engine.queue, delivery.message, reason))
        ]
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

    async def close(self) -> None:
        self._sweeper.cancel()
        if self._delayed is not None:
            await self._delayed.close()
        for stream in list(self.streams.values()):
            await stream.close()
        for engine in list(self.engines.values()):
            await engine.flush_count()
            await engine.close()


def _log_failed_dead_letter(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("dead-lettering a refused publish failed: %s", task.exception())
