"""One queue inside this gateway process: its Pulsar reader and its AMQP consumers.

A queue has ONE Pulsar consumer per process (the store's `QueueReader` on the
queue's Shared subscription); this engine hands what it fetches to the AMQP
consumers itself. That is what lets it behave like a RabbitMQ queue: round
robin over consumers with credit (basic.qos), single active consumer,
basic.get from the same head as basic.consume, requeue to the message's original place
with `redelivered` set (the message stays unacked in Pulsar meanwhile, so a
crash still redelivers it), TTL at the head, max-length drop-head and purge.

x-max-length-bytes counts the body bytes of ready messages, as RabbitMQ does.
That total is kept in memory only (`ready_bytes`): after a gateway restart it
counts what is published from then on plus what the pump has fetched, so a
queue left over its byte limit is trimmed as its heads are fetched.

Acks to Pulsar are sent in the background, so a broker crash can lose the last ones;
the engine remembers what it acked and delivered lately (message_memory.py), so such a
message is acked again rather than delivered twice, and `redelivered` stays right.

Only the pump task calls `fetch`, so a pending Pulsar receive never hands one
message to two waiters. Everything else runs synchronously on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Hashable, Iterable

from pulsar_gateway.handlers.amqp.broker_model import BrokerStore, QueueReader, StoredDelivery
from pulsar_gateway.handlers.amqp.delivery_limits import DeliveryCounts, delivery_limit
from pulsar_gateway.handlers.amqp.message_memory import AckedIds, DeliveredIds
from pulsar_gateway.handlers.amqp.queue_roles import QueueConsumer, QueueVhost
from pulsar_gateway.handlers.amqp.queue_stats import QueueStats
from pulsar_gateway.handlers.amqp.queue_timers import (
    GatherWindow,
    HeadExpiryTimer,
    IdleNudge,
    now_ms,
)
from pulsar_gateway.handlers.amqp.ready_messages import ReadyMessages, body_bytes, fetch_more
from pulsar_gateway.handlers.amqp.saved_count import SavedCount
from pulsar_gateway.handlers.amqp.topology import Queue

log = logging.getLogger("gateway.amqp.queue")

FETCH_BATCH = 500
PRIORITY_GATHER_SECONDS = 0.2  # see ready_messages.fetch_more
READY_LOW_WATER = 200  # fetch more when fewer than this are ready in memory
GET_WAIT_SECONDS = 2.0  # basic.get waits this long for a message the count says exists
# ... and, for one this process stored itself (`owed`), this long in all
GET_OWED_SECONDS = 30.0
PURGE_WAIT_SECONDS = 1.0  # queue.purge: a quiet store this long has nothing more


class QueueEngine:
    """A queue's delivery state in this process (see the module docstring)."""

    def __init__(self, vhost: QueueVhost, queue: Queue, store: BrokerStore) -> None:
        self.vhost = vhost
        self.queue = queue
        self.name = queue.name
        self.store = store
        self.reader: QueueReader | None = None
        self._opening: asyncio.Task[QueueReader] | None = None
        self.ready = ReadyMessages(queue.max_priority)
        self.consumers: list[QueueConsumer] = []
        self._rr = 0
        self.count = store.load_count(vhost.name, queue.name)  # stored and not acked
        self.outstanding = 0  # delivered, not acked yet
        self.pending_stores = 0  # publishes to this queue not confirmed by Pulsar yet
        self.ready_bytes = 0  # body bytes of ready messages (x-max-length-bytes)
        self.pending_bytes = 0  # body bytes of `pending_stores`
        # stored by this process and not fetched by the pump since: these are in the store
        # for certain, however long Pulsar takes to hand them over, so a fetch that comes
        # back empty is no proof that the count is stale while any is owed
        self.owed = 0
        self._held: set[Hashable] = set()  # ids in `ready` or outstanding
        self._acked = AckedIds()  # acked to the store lately: never deliver again
        self._deliveries = DeliveredIds()  # whether a message was delivered before
        self._pump_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._arrived = asyncio.Event()
        self._demand = 0
        self._saved_count = SavedCount(store, vhost.name, queue.name, lambda: self.count)
        self._expiry = HeadExpiryTimer(self._on_expiry)
        self.closed = False
        # messages here may expire (x-message-ttl, or a per-message TTL seen): the pump
        # fetches the head with no consumer, so it expires on time (docs/compatibility.md)
        self.expiring = queue.message_ttl is not None
        self._gather = GatherWindow(PRIORITY_GATHER_SECONDS, self.dispatch)
        limit = delivery_limit(queue)
        self._counts = DeliveryCounts(limit) if limit is not None else None
        self.ever_consumed = False
        self.last_used = time.monotonic()
        self.stats = QueueStats()  # for the management API's message_stats

    # --- counts -----------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Ready messages (RabbitMQ's message_count excludes unacknowledged ones).

        With x-max-length the heads beyond the limit are as good as dropped: they
        are, as soon as the pump has fetched them (before anything is delivered).
        """
        ready = max(0, self.count - self.outstanding)  # `count` may briefly trail a delivery
        limit = self.queue.max_length
        return ready if limit is None else min(ready, limit)

    @property
    def _ready_uncapped(self) -> int:
        return max(0, self.count - self.outstanding)

    def _over_limit(self) -> bool:
        """More ready than x-max-length or x-max-length-bytes allows."""
        limit, byte_limit = self.queue.max_length, self.queue.max_length_bytes
        if limit is not None and self._ready_uncapped > limit:
            return True
        return byte_limit is not None and self.ready_bytes > byte_limit

    def _ready_bytes_changed(self, delta: int) -> None:
        self.ready_bytes = max(0, self.ready_bytes + delta)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def _count_changed(self) -> None:
        if self.queue.durable and not self.closed:
            self._saved_count.changed()

    def publishing(self, copies: int = 1, size: int = 0) -> None:
        """`copies` messages of `size` body bytes are on their way to the queue's topic
        (not stored yet): the consumer may see them before `stored` counts them."""
        self.pending_stores += copies
        self.pending_bytes += copies * size

    def publish_failed(self, copies: int = 1, size: int = 0) -> None:
        self.pending_stores -= copies
        self.pending_bytes -= copies * size

    def stored(self, copies: int = 1, size: int = 0, expiring: bool = False) -> None:
        """`copies` messages of `size` body bytes were stored in the queue (a
        confirmed publish); `expiring`: they carry a per-message TTL."""
        self.pending_stores -= copies
        self.pending_bytes -= copies * size
        self.ready_bytes += copies * size
        self.count += copies
        self.stats.publish += copies
        self.owed += copies
        self._count_changed()
        self.last_used = time.monotonic()
        if self.queue.arguments and self._over_limit():  # none: no limits, nothing to parse
            self._ensure_pump()
            self._trim()
        if expiring:
            self.expiring = True
        if self.consumers or self.expiring:
            self._ensure_pump()
        self._wake.set()

    def look_at_head(self) -> None:
        """Fetch the head even with no consumer: it may carry a per-message TTL."""
        self.expiring = True
        self._ensure_pump()

    # --- reader and pump --------------------------------------------------------------

    async def ensure_reader(self) -> QueueReader:
        if self.reader is not None:
            return self.reader
        if self._opening is None:
            self._opening = asyncio.ensure_future(self.store.open_queue(self.vhost.name, self.name))
        try:
            reader = await asyncio.shield(self._opening)
        except Exception:
            self._opening = None
            raise
        if self.reader is None:
            self.reader = reader
        return self.reader

    def _ensure_pump(self) -> None:
        if self.closed:
            return
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.ensure_future(self._pump())
        self._wake.set()

    def _need_more(self) -> bool:
        if len(self.ready) >= READY_LOW_WATER:
            return self._demand > 0 and not self.ready
        if self._demand > 0:
            return True
        if self._over_limit():
            return True
        if self.expiring and self.message_count > len(self.ready):
            return True
        return any(c.has_credit() for c in self._active_consumers())

    def _fetch_timeout(self) -> float | None:
        expiry = self.ready.head_expiry(self.queue.message_ttl)
        if expiry is None:
            return 1.0 if self._demand else None
        return max(0.01, (expiry - now_ms()) / 1000)

    async def _pump(self) -> None:
        nudged = False
        idle = IdleNudge()
        me = asyncio.current_task()
        # a pump replaced after `release_reader` stops at its next turn even when its cancel
        # was lost (Python 3.11's wait_for can swallow one): never two pumps on one queue
        while not self.closed and self._pump_task is me:
            if not self._need_more():
                self._wake.clear()
                timeout = self._fetch_timeout() if self.ready else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._expire()
                self.dispatch()
                continue
            # The count says more is stored than this process holds: if Pulsar has
            # nothing for a while, the count is stale (a crash lost its last save).
            expect_more = self._ready_uncapped > len(self.ready) and not self.pending_stores
            timeout = self._fetch_timeout()
            if expect_more and timeout is None:
                timeout = GET_WAIT_SECONDS
            waiting = not self.ready and any(c.has_credit() for c in self._active_consumers())
            if waiting:
                timeout = idle.cap(timeout)
            try:
                reader = await self.ensure_reader()
                batch = await reader.fetch(FETCH_BATCH, timeout)
                if batch and self.queue.max_priority:
                    # a priority queue orders its stored backlog before it delivers
                    missing = self._ready_uncapped - len(self.ready) - len(batch)
                    room = FETCH_BATCH - len(batch)
                    batch += await fetch_more(reader, missing, room, PRIORITY_GATHER_SECONDS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("queue %s: fetch failed: %s", self.name, exc)
                await asyncio.sleep(0.5)
                continue
            if self.closed:
                return
            if not batch and expect_more and not self.ready and not self.pending_stores:
                if not nudged or self.owed:
                    # pulsar-lite can park a message and stop dispatching (docs/backend.md,
                    # "Shared dispatch can park a message")
                    nudged = True
                    await reader.nudge()
                    continue
                self._nothing_ready()
            if batch:
                nudged = False
                idle.reset()
            elif waiting and not expect_more:
                # nothing for consumers that wait: a message parked when its consumer died
                # (a killed gateway's) moves only on the next subscription event
                await reader.nudge()
                idle.back_off()
            self._take(batch)

    def _take(self, batch: list[StoredDelivery]) -> None:
        reacked: list[Hashable] = []
        taken = 0
        for delivery in batch:
            if delivery.message_id in self._held:
                continue
            if delivery.message_id in self._acked:
                reacked.append(delivery.message_id)  # its ack was lost: not a new message
                continue
            self._held.add(delivery.message_id)
            self.ready.append(delivery)
            if delivery.message.expiration_ms is not None:
                self.expiring = True
            taken += 1
        self.owed = max(0, self.owed - taken)
        if reacked and self.reader is not None and not self.closed:
            log.info("queue %s: %d acked messages came back, acked again", self.name, len(reacked))
            self.reader.ack(reacked)
        if self.count + self.pending_stores < len(self.ready) + self.outstanding:
            # published around the gateway (a Pulsar producer), or a lagging saved count
            self.count = len(self.ready) + self.outstanding - self.pending_stores
            self._count_changed()
        if self.queue.max_length_bytes is not None:
            # after a restart the byte total starts at zero: at least what is fetched,
            # and exactly that once every ready message is fetched; a publish not yet
            # confirmed may be fetched already, and `stored` will add its bytes then
            fetched = body_bytes(self.ready)
            if self._ready_uncapped <= len(self.ready) and not self.pending_stores:
                self.ready_bytes = fetched
            else:
                self.ready_bytes = max(self.ready_bytes, fetched - self.pending_bytes)
        self._expire()
        self._trim()
        self.dispatch()
        self._arrived.set()
        self._arrived = asyncio.Event()

    async def _wait_for_messages(self, timeout: float) -> bool:
        """Ask the pump for messages; True when some arrived within `timeout`."""
        self._demand += 1
        arrived = self._arrived
        self._ensure_pump()
        try:
            await asyncio.wait_for(arrived.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._demand -= 1

    # --- head housekeeping: TTL and max-length ----------------------------------------

    def _expire(self) -> None:
        expired = self.ready.pop_expired(self.queue.message_ttl, now_ms())
        if expired:
            self.vhost.dead_letter(self, expired, "expired")
        self._schedule_expiry()

    def _schedule_expiry(self) -> None:
        expiry = None if self.closed else self.ready.head_expiry(self.queue.message_ttl)
        self._expiry.schedule(expiry)

    def _on_expiry(self) -> None:
        self._expire()
        self._wake.set()

    def _trim(self) -> None:
        if self.queue.overflow != "drop-head":
            # reject-publish queues refuse publishes instead (VhostState.overflow); one
            # over its limit all the same (another gateway's publish) keeps its heads
            return
        limit, byte_limit = self.queue.max_length, self.queue.max_length_bytes
        over = self._ready_uncapped - limit if limit is not None else 0
        over_bytes = self.ready_bytes - byte_limit if byte_limit is not None else 0
        dropped = self.ready.pop_over(over, over_bytes)
        if dropped:
            self.vhost.dead_letter(self, dropped, "maxlen")

    def settle(
        self, deliveries: Iterable[StoredDelivery], was_outstanding: bool, ack: bool = True
    ) -> None:
        """The messages are gone from the queue for good; acknowledged in Pulsar
        now, or (ack=False) by `ack_stored` once their dead-letter copy is stored."""
        deliveries = list(deliveries)
        ids = [d.message_id for d in deliveries]
        if not ids:
            return
        for message_id in ids:
            self._held.discard(message_id)
            self._deliveries.forget(message_id)
            if self._counts is not None:
                self._counts.forget(message_id)
        if ack:
            self.ack_stored(ids)
        if not was_outstanding:
            self._ready_bytes_changed(-body_bytes(deliveries))
        self.count -= len(ids)  # below zero only while the publish is being confirmed
        if self.count <= 0 and self.queue.message_ttl is None:
            self.expiring = False  # empty: nothing left that may expire
        if was_outstanding:
            self.outstanding = max(0, self.outstanding - len(ids))
            self.stats.ack += len(ids) if ack else 0
        self._count_changed()
        self._wake.set()

    def ack_stored(self, ids: list[Hashable]) -> None:
        """Acknowledge to the store, and remember the ids: the store may lose the ack."""
        self._acked.add(ids)
        if self.reader is not None and not self.closed:
            self.reader.ack(ids)

    def forget_old(self, now: float | None = None) -> None:
        """Let acked ids past their time go (the vhost's sweep calls it now and then)."""
        self._acked.forget_old(now)

    @property
    def acked_remembered(self) -> int:
        """Ids acked to the store lately and still remembered (`AckedIds`)."""
        return len(self._acked)

    @property
    def idle(self) -> bool:
        """Nothing needs the Pulsar consumer: no AMQP consumer, nothing unacked."""
        return (
            self.reader is not None
            and not self.consumers
            and self.outstanding == 0
            and self._demand == 0
            and not self.expiring
        )

    async def release_reader(self) -> None:
        """Close an idle queue's Pulsar consumer; the messages it had fetched go back
        to the subscription (for any consumer, this gateway's next one included)."""
        if not self.idle or self.reader is None:
            return
        reader, self.reader, self._opening = self.reader, None, None
        for delivery in self.ready:
            self._deliveries.handed_back(delivery.message_id)
            self._held.discard(delivery.message_id)
        self.ready.clear()
        if self._pump_task is not None and not self._pump_task.done():
            self._pump_task.cancel()
        self._pump_task = None
        with contextlib.suppress(Exception):
            await reader.close()
        log.info("amqp queue %s: idle, its Pulsar consumer closed", self.name)

    # --- consumers and dispatch -------------------------------------------------------

    def _active_consumers(self) -> list[QueueConsumer]:
        if self.queue.single_active_consumer:
            return self.consumers[:1]
        return self.consumers

    def add_consumer(self, consumer: QueueConsumer) -> None:
        self.consumers.append(consumer)
        self.ever_consumed = True
        self.last_used = time.monotonic()
        self._ensure_pump()
        self.dispatch()

    def remove_consumer(self, consumer: QueueConsumer) -> None:
        with contextlib.suppress(ValueError):
            self.consumers.remove(consumer)
        self.last_used = time.monotonic()
        self.dispatch()

    def dispatch(self) -> None:
        """Hand ready messages to consumers with credit, round robin (a lone one: runs)."""
        if self.closed:
            return
        if self.ready:
            self._expire()
        active = self._active_consumers()
        if active and self.ready and self._backlog_unfetched():
            self._ensure_pump()  # it fetches the rest, then dispatches
            return
        while self.ready and active:
            consumer = None
            for step in range(len(active)):
                candidate = active[(self._rr + step) % len(active)]
                if candidate.has_credit():
                    consumer = candidate
                    self._rr = (self._rr + step + 1) % max(1, len(active))
                    break
            if consumer is None:
                break
            consumer.deliver_ready(self, len(self.ready) if len(active) == 1 else 1)
            active = self._active_consumers()
        if self._need_more():
            self._ensure_pump()
        self._schedule_expiry()

    def _backlog_unfetched(self) -> bool:
        """A priority queue holds fewer messages than its count says are stored: delivering
        now could pass over a higher priority still in Pulsar (a message fetched alone
        while nobody consumed). Deferred for at most PRIORITY_GATHER_SECONDS, so a stale
        count never stalls the queue."""
        return self._gather.holding(
            bool(self.queue.max_priority)
            and self._ready_uncapped > len(self.ready)
            and not self.pending_stores
        )

    def take_ready(self) -> tuple[StoredDelivery, bool]:
        """The head ready message, delivered now, and whether it was delivered before."""
        delivery = self._stamped(self.ready.popleft())
        redelivered = self._deliveries.mark(delivery)
        self._delivering(delivery)
        return delivery, redelivered

    def _stamped(self, delivery: StoredDelivery) -> StoredDelivery:
        """A delivery going out, with its count when the queue counts them."""
        return delivery if self._counts is None else self._counts.stamp(delivery)

    def _delivering(self, delivery: StoredDelivery) -> None:
        """A ready message goes to a client: unacked now, no longer ready."""
        self.outstanding += 1
        self.stats.deliver_get += 1
        self._ready_bytes_changed(-len(delivery.message.body))

    def _nothing_ready(self) -> None:
        """The store had nothing when the counts said it had: the counts were stale
        (a crash lost a save, or the byte total outlived its messages). What this process
        stored and the pump has not fetched yet is there all the same."""
        if self.owed:
            return
        self.count = self.outstanding
        self.ready_bytes = 0
        self._count_changed()

    def kick(self) -> None:
        """Something gained credit (an ack, qos, flow on): deliver what can go, and
        let the pump fetch more if it went to sleep for want of credit."""
        self.dispatch()
        if self._pump_task is not None and not self._pump_task.done():
            self._wake.set()

    def requeue(self, deliveries: list[StoredDelivery]) -> None:
        """Back to their original places in the queue (RabbitMQ's classic queues do
        the same), marked redelivered; a quorum queue dead-letters those past its delivery
        limit instead (delivery_limits.py)."""
        if self._counts is not None:
            deliveries, spent = self._counts.returned(deliveries)
            self.reject(spent, "delivery_limit")
        if not deliveries:
            return
        self.outstanding = max(0, self.outstanding - len(deliveries))
        self._ready_bytes_changed(body_bytes(deliveries))
        for delivery in deliveries:
            self._deliveries.requeued(delivery.message_id)
        self.ready.put_back(deliveries)
        self.dispatch()

    def reject(self, deliveries: list[StoredDelivery], reason: str = "rejected") -> None:
        """nack/reject without requeue: dead-letter (or drop) delivered messages."""
        if deliveries:
            self.outstanding = max(0, self.outstanding - len(deliveries))
            # back among the ready for a moment: dropping them settles ready messages
            self._ready_bytes_changed(body_bytes(deliveries))
            self.vhost.dead_letter(self, deliveries, reason)
            self.dispatch()

    async def get(self) -> tuple[StoredDelivery, bool] | None:
        """basic.get: the head message and whether it was delivered before."""
        self.last_used = time.monotonic()
        await self.ensure_reader()
        self._expire()
        self._trim()
        if not self.ready and self.message_count > 0:
            waited = 0.0
            while not await self._wait_for_messages(GET_WAIT_SECONDS) and not self.ready:
                waited += GET_WAIT_SECONDS
                if not self.owed:
                    # The count was ahead of the subscription (a crash lost a save): correct it.
                    self._nothing_ready()
                    break
                if waited >= GET_OWED_SECONDS:
                    break  # stored, but Pulsar will not hand it over: empty for now
                # stored here for certain: Pulsar is slow to hand it over (a loaded machine)
                # or parked it (docs/backend.md, "Shared dispatch can park a message")
                log.info("queue %s: basic.get waits on for a stored message", self.name)
            self._expire()
        if not self.ready:
            return None
        return self.take_ready()

    async def purge(self) -> int:
        """Drop every ready message (acked in Pulsar); unacked deliveries stay."""
        await self.ensure_reader()
        purged = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batch = list(self.ready)
            self.ready.clear()
            if batch:
                purged += len(batch)
                self.settle(batch, was_outstanding=False)
            if self.message_count <= 0:
                break
            if not await self._wait_for_messages(PURGE_WAIT_SECONDS) and not self.ready:
                if self.owed:
                    continue  # stored here: still on its way from Pulsar (the deadline bounds it)
                self._nothing_ready()
                break
        return purged

    def cancel_consumers(self) -> None:
        for consumer in list(self.consumers):
            consumer.cancelled_by_server()
        self.consumers.clear()

    async def close(self) -> None:
        """Stop: what was fetched and not acked goes back to Pulsar."""
        self.closed = True
        self._expiry.cancel()
        self._saved_count.close()
        if self._pump_task is not None and not self._pump_task.done():
            self._pump_task.cancel()
        if self.reader is not None:
            with contextlib.suppress(Exception):
                await self.reader.close()
        elif self._opening is not None:
            with contextlib.suppress(BaseException):
                reader = await self._opening
                await reader.close()
        self.reader = None
        self.ready.clear()

    async def flush_count(self) -> None:
        if self.queue.durable and not self.closed:
            await self._saved_count.flush()
