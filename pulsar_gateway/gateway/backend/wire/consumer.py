"""A consumer: a subscription's entries in, acknowledgements out.

Durable subscriptions (Exclusive, Shared, Failover, Key_Shared) and readers (a non-durable
Exclusive subscription from a message id) are the same class. Entries arrive whole
(`entries.ReceivedEntry`); the caller splits batches when it wants messages, and may have
something stand for an entry's payload, which is then not copied (`claim`).

Memory is bounded by flow control: the broker may send as many messages as it was given
permits; the consumer gives `receiver_queue_size` at first and more only as the application
takes entries (half a queue at a time), not while the queue holds `max_queue_bytes`.
pulsar-lite counts permits per entry (except on Shared, where it counts messages as Apache
Pulsar does) and is given at most 20 at once (docs/pulsar-protocol.md, "Flow control").

Acknowledgements are grouped: those made within `ack_delay` go in one ACK. After a lost
connection or a broker's CLOSE_CONSUMER the consumer subscribes again (looking the topic
up anew). What it held and had not handed out is dropped: a durable subscription gets
every unacknowledged entry again from the broker; a reader resumes right after the last
entry it handed out. Readers drop every entry whose id is not above the last one they
handed out or queued: pulsar-lite replays delivered entries under load (docs/backend.md,
"Readers replay messages"), and a reader resumed after a reconnect may be sent its last
entry again (docs/pulsar-protocol.md, "Reconnection").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pulsar_gateway.gateway.backend.wire import acks
from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.connection import Connection
from pulsar_gateway.gateway.backend.wire.entries import ChunkAssembler, ReceivedEntry
from pulsar_gateway.gateway.backend.wire.errors import (
    ConnectionClosed,
    ConsumerClosed,
    OperationTimeout,
    PulsarError,
    ServerError,
)
from pulsar_gateway.gateway.backend.wire.flow_window import (
    PER_ENTRY_BROKERS,
    PER_ENTRY_WINDOW,
    window_for,
)
from pulsar_gateway.gateway.backend.wire.frames import EntryClaim, Frame
from pulsar_gateway.gateway.backend.wire.ids import EARLIEST, LATEST, MessageId, partition_index
from pulsar_gateway.gateway.backend.wire.messages import MessageIdData

if TYPE_CHECKING:
    from pulsar_gateway.gateway.backend.wire.client import Client

log = logging.getLogger("gateway.pulsar.wire")

DEFAULT_RECEIVER_QUEUE = 1000
DEFAULT_MAX_QUEUE_BYTES = 64 * 1024 * 1024
RECONNECT_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
FATAL_ERRORS = frozenset({4, 11, 12, 15, 17, 22})
# on per-entry brokers, an empty queue that gets nothing asks again (an empty FLOW) after this long,
# then after twice as long each time, up to the maximum
NUDGE_FIRST_SECONDS = 0.05
NUDGE_MAX_SECONDS = 2.0

AckItem = MessageId | ReceivedEntry


class Consumer:
    def __init__(
        self,
        client: Client,
        topic: str,
        subscription: str,
        *,
        subscription_type: int = c.SubscriptionType.EXCLUSIVE,
        durable: bool = True,
        initial_position: int = c.InitialPosition.LATEST,
        start: MessageId | None = None,
        start_inclusive: bool = True,
        receiver_queue_size: int = DEFAULT_RECEIVER_QUEUE,
        max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        name: str | None = None,
        drop_replays: bool | None = None,
        chunks: ChunkAssembler | None = None,
        permits_per_entry: bool | None = None,
        per_entry_window: int = PER_ENTRY_WINDOW,
        window_bytes: int | None = None,
        ack_delay: float = acks.DELAY_SECONDS,
        idle_nudge: bool = False,
    ) -> None:
        if receiver_queue_size < 1:
            raise ValueError("receiver_queue_size must be at least 1")
        if per_entry_window < 1:
            raise ValueError("per_entry_window must be at least 1")
        self.client = client
        self.topic = topic
        self.subscription = subscription
        self.subscription_type = subscription_type
        self.durable = durable
        self.initial_position = initial_position
        self.start_id = start
        self.start_inclusive = start_inclusive
        self.receiver_queue_size = receiver_queue_size
        self.max_queue_bytes = max_queue_bytes
        self.name = name or f"gw-{uuid.uuid4().hex[:12]}"
        self.drop_replays = (not durable) if drop_replays is None else drop_replays
        self.chunks = chunks or ChunkAssembler()
        # Pulsar counts a permit per message, pulsar-lite one per entry: granting it messages
        # lets it run ahead (docs/pulsar-protocol.md, "Flow control"). None: by broker name.
        self.permits_per_entry = permits_per_entry
        self._per_entry = bool(permits_per_entry)
        # entries asked for at once per entry (with `window_bytes` the least: window_for)
        self.per_entry_window = per_entry_window
        self.window_bytes = window_bytes
        self.idle_nudge = idle_nudge  # `_wait`'s empty FLOWs on any subscription type
        self._window = receiver_queue_size  # permits asked for at once
        self._loop = asyncio.get_running_loop()
        self._connection: Connection | None = None
        self._consumer_id = 0
        self._queue: deque[ReceivedEntry] = deque()
        self._queued_bytes = 0
        self._owed = 0  # messages taken or dropped since the last FLOW (below 0: owed back)
        self._taken = 0  # of those, entries taken or dropped (per entry)
        self._arrival: asyncio.Future[None] | None = None
        self._last_passed: MessageId | None = None  # the last entry handed out
        self._last_seen: MessageId | None = None  # the last entry queued (readers' filter)
        self._acks = acks.AckGroup(self._send_acks, ack_delay)
        self._reconnector: asyncio.Task[None] | None = None
        self.ready = False
        self.closed = False
        self.end_of_topic = False
        self.reconnects = 0
        self.replays_dropped = 0
        self.nudges = 0
        self.received = 0  # entries queued, in all
        self.claim: EntryClaim | None = None  # (frames.FrameReader.claim)

    @classmethod
    def reader(
        cls,
        client: Client,
        topic: str,
        start: MessageId = EARLIEST,
        *,
        inclusive: bool = True,
        **options: object,
    ) -> Consumer:
        """A reader: entries from `start` (its entry included when `inclusive`) on, in
        order, on a non-durable subscription of its own."""
        return cls(
            client,
            topic,
            f"reader-{uuid.uuid4().hex[:10]}",
            durable=False,
            start=start,
            start_inclusive=inclusive,
            **options,  # type: ignore[arg-type]
        )

    def __repr__(self) -> str:
        return f"<Consumer {self.subscription} on {self.topic}>"

    async def start(self) -> None:
        deadline = self._loop.time() + self.client.operation_timeout
        attempt = 0
        while True:
            try:
                await self._subscribe()
                break
            except PulsarError as exc:
                if not _retriable(exc) or self._loop.time() >= deadline:
                    raise
                delay = RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)]
                attempt += 1
                await asyncio.sleep(min(delay, max(0.0, deadline - self._loop.time())))
        self.client.register(self)

    def _start_data(self) -> MessageIdData | None:
        """Where a reader's subscription starts: right after the last entry handed out,
        else at its start. On Apache Pulsar an id with a batch index places the cursor AT
        its entry and one without right AFTER it; pulsar-lite starts at the entry either
        way, and the replay filter drops what comes before the start."""
        if self.durable:
            return None
        if self._last_passed is not None:
            return MessageId(*self._last_passed.entry).to_data()
        start = self.start_id or LATEST
        if start in (EARLIEST, LATEST):
            return start.to_data()
        data = MessageId(*start.entry).to_data()
        if self.start_inclusive:
            data.batch_index = max(start.batch_index, 0)
        return data

    async def _subscribe(self) -> None:
        connection = await self.client.connection_for(self.topic)
        consumer_id = self.client.next_id()
        connection.add_consumer(consumer_id, self)
        request = c.Subscribe(
            topic=self.topic,
            subscription=self.subscription,
            sub_type=self.subscription_type,
            consumer_id=consumer_id,
            request_id=connection.new_request_id(),
            consumer_name=self.name,
            durable=self.durable,
            start_message_id=self._start_data(),
            initial_position=self.initial_position,
        )
        try:
            await connection.request(request)
        except BaseException as exc:
            connection.remove_consumer(consumer_id)
            if isinstance(exc, OperationTimeout):
                with contextlib.suppress(ConnectionClosed):
                    connection.send(c.CloseConsumer(consumer_id, connection.new_request_id()))
            raise
        if self.closed:
            connection.remove_consumer(consumer_id)
            with contextlib.suppress(ConnectionClosed):
                connection.send(c.CloseConsumer(consumer_id, connection.new_request_id()))
            raise ConsumerClosed(f"{self} closed while subscribing")
        self._connection = connection
        self._consumer_id = consumer_id
        self._per_entry = (
            connection.server_version.startswith(PER_ENTRY_BROKERS)
            and self.subscription_type != c.SubscriptionType.SHARED
            if self.permits_per_entry is None
            else self.permits_per_entry
        )
        self._window = (
            min(self.receiver_queue_size, self.per_entry_window)
            if self._per_entry
            else self.receiver_queue_size
        )
        self.ready = True
        self._owed = self._taken = 0
        held = self._acks.take_held()
        if held:  # before the permits: the broker must not send these again
            connection.send_encoded(c.encode_ack(consumer_id, c.AckType.INDIVIDUAL, held))
        connection.send(c.Flow(consumer_id, self._permits_to_give()))

    def _permits_to_give(self) -> int:
        """A full queue's worth, less what is queued (nothing, right after subscribing)."""
        queued = sum(self._permits_of(entry) for entry in self._queue)
        return max(1, self._window - queued)

    def _permits_of(self, entry: ReceivedEntry) -> int:
        return 1 if self._per_entry else entry.num_messages

    def on_disconnect(self, connection: Connection, reason: str) -> None:
        if connection is not self._connection:
            return
        self._connection = None
        self.ready = False
        self._drop_queue()
        self._acks.flush()  # into the held ones, sent after the next subscribe
        if self.closed or self._reconnector is not None:
            return
        log.info("%s disconnected (%s): subscribing again", self, reason)
        self._reconnector = self._loop.create_task(self._reconnect())

    def _drop_queue(self) -> None:
        """Forget what was received and not handed out: it comes again after the next
        subscribe (durable: unacknowledged; reader: after the last entry handed out)."""
        self._queue.clear()
        self._queued_bytes = 0
        self._last_seen = self._last_passed
        self.chunks.clear()

    async def _reconnect(self) -> None:
        attempt = 0
        try:
            while not self.closed:
                try:
                    await self._subscribe()
                    self.reconnects += 1
                    log.info("%s subscribed again", self)
                    return
                except ServerError as exc:
                    if exc.code in FATAL_ERRORS:
                        log.error("%s cannot subscribe again: %s", self, exc)
                        self._finish(exc)
                        return
                    log.warning("%s subscribe failed: %s", self, exc)
                except PulsarError as exc:
                    log.warning("%s subscribe failed: %s", self, exc)
                delay = RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)]
                attempt += 1
                await asyncio.sleep(delay)
        finally:
            self._reconnector = None

    def on_end_of_topic(self) -> None:
        self.end_of_topic = True
        log.info("%s reached the end of a terminated topic", self)

    def on_message(self, frame: Frame) -> None:
        command = frame.command
        metadata = frame.metadata
        assert isinstance(command, c.Message)
        data = command.message_id
        if metadata is None or data is None:
            log.warning("%s: MESSAGE without metadata or id ignored", self)
            return
        mid = MessageId(data.ledger_id, data.entry_id)
        if metadata.num_chunks_from_msg is not None and metadata.num_chunks_from_msg > 1:
            entry = self.chunks.add(mid, metadata, frame.payload, command.redelivery_count)
            if entry is None:
                self._owe(1)  # a chunk held (or dropped): its permit is given back now
                return
            self._owe(len(entry.chunk_ids))
        else:
            entry = ReceivedEntry(mid, metadata, frame.payload, command.redelivery_count)
            entry.broker_entry, entry.claimed = frame.broker_entry, frame.claimed
        if self.drop_replays:
            last = self._last_seen
            if last is None:
                start = self.start_id
                if start is not None and start != EARLIEST and start != LATEST:
                    # an exclusive start inside a batch still wants the rest of its entry
                    if mid.entry < start.entry or (
                        mid.entry == start.entry
                        and not self.start_inclusive
                        and start.batch_index < 0
                    ):
                        self._replay(entry)
                        return
            elif mid <= last:
                self._replay(entry)
                return
            self._last_seen = mid
        self._queue.append(entry)
        self._queued_bytes += len(entry.payload)
        self.received += 1
        if self.window_bytes is not None and self._per_entry:
            self._resize_window(len(entry.payload))
        if self._queued_bytes > self.max_queue_bytes and len(self._queue) > 2 * self._window + 2:
            self._overrun()
            return
        arrival = self._arrival
        if arrival is not None:
            self._arrival = None
            if not arrival.done():
                arrival.set_result(None)

    def _overrun(self) -> None:
        """The broker sent far past the permits it was given: memory is bounded, so the
        connection goes (and the consumer subscribes again, its queue dropped)."""
        connection = self._connection
        log.warning(
            "%s: %d entries (%d bytes) queued, past its permits: closing the connection",
            self,
            len(self._queue),
            self._queued_bytes,
        )
        if connection is not None:
            connection.close("a consumer was sent past its permits", abort=True)

    def _resize_window(self, entry_bytes: int) -> None:
        """The window for entries of this size (`flow_window.window_for`); permits given
        or held back by the change (`_owed`, below zero until the ones given are used)."""
        assert self.window_bytes is not None
        window = window_for(entry_bytes, self.window_bytes, self.per_entry_window)
        if window != self._window:
            change, self._window = window - self._window, window
            self._owe(change, taken=False)

    def _replay(self, entry: ReceivedEntry) -> None:
        self.replays_dropped += 1
        self._owe(self._permits_of(entry))

    def _owe(self, messages: int, taken: bool = True) -> None:
        """Messages taken (or dropped) count toward the next FLOW, half a queue at a time, none
        while the queue is over its byte bound; per entry a FLOW also goes while permits are
        owed back: pulsar-lite sends <= 20 entries a FLOW, fewer from disk (issue 32)."""
        self._owed += messages
        self._taken += messages if taken else 0
        half = (self._window + 1) // 2
        if (
            (self._owed >= half or (self._per_entry and self._taken >= half))
            and self._queued_bytes < self.max_queue_bytes
            and self.ready
            and self._connection is not None
        ):
            self._flow(max(self._owed, 0))

    def _flow(self, permits: int) -> None:  # of owed ones (a debt stays, never sent)
        assert self._connection is not None
        self._owed -= permits
        self._taken = 0
        with contextlib.suppress(ConnectionClosed):
            self._connection.send(c.Flow(self._consumer_id, permits))

    def _give_owed(self) -> None:
        """Every permit owed goes back now: the queue is empty, nothing is held."""
        if self._owed > 0 and self.ready and self._connection is not None:
            self._flow(self._owed)

    def _take(self) -> ReceivedEntry:
        entry = self._queue.popleft()
        self._queued_bytes -= len(entry.payload)
        self._last_passed = entry.id
        self._owe(self._permits_of(entry))
        return entry

    async def _wait(self, timeout: float | None) -> bool:
        """Wait for an entry; False on timeout. Empty, it gives back the permits it owes (in
        its nudges, with `idle_nudge`) and nudges (docs/pulsar-protocol.md, "Flow control")."""
        deadline = None if timeout is None else self._loop.time() + timeout
        pause = NUDGE_FIRST_SECONDS
        while not self._queue:
            if self.closed:
                raise ConsumerClosed(f"{self} is closed")
            if not self.idle_nudge:  # else owed permits go with the nudges: one FLOW less
                self._give_owed()
            if self._arrival is None or self._arrival.done():
                self._arrival = self._loop.create_future()
            wait = None if deadline is None else max(0.0, deadline - self._loop.time())
            if self._per_entry or self.idle_nudge:
                wait = pause if wait is None else min(wait, pause)
            done, _ = await asyncio.wait([self._arrival], timeout=wait)
            if done:
                continue
            if deadline is not None and self._loop.time() >= deadline:
                return False
            self._nudge()
            pause = min(pause * 2, NUDGE_MAX_SECONDS)
        return True

    def _nudge(self) -> None:
        """A FLOW of the permits owed, if any: pulsar-lite dispatches on one (`_wait`)."""
        if self.ready and self._connection is not None:
            self.nudges += 1
            self._flow(max(self._owed, 0))

    async def receive(self, timeout: float | None = None) -> ReceivedEntry:
        """The next entry; TimeoutError when none comes within `timeout` seconds."""
        if not await self._wait(timeout):
            raise TimeoutError
        return self._take()

    async def receive_many(
        self, max_entries: int = 100, timeout: float | None = None, max_messages: int = 0
    ) -> list[ReceivedEntry]:
        """Up to `max_entries` entries, waiting up to `timeout` for the first (an empty list
        when none came): the entries a loop wake-up brings, taken together. `max_messages`
        (0: no bound): no entry is taken once the ones taken hold that many messages."""
        if not await self._wait(timeout):
            return []
        out: list[ReceivedEntry] = []
        messages = 0
        while self._queue and len(out) < max_entries and messages < (max_messages or 1 << 62):
            entry = self._take()
            out.append(entry)
            messages += entry.num_messages
        return out

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    @property
    def last_passed(self) -> MessageId | None:
        return self._last_passed

    def ack(self, items: Iterable[AckItem]) -> None:
        """Acknowledge entries (or ids; a batch index is ignored: the whole entry is
        acknowledged, a chunked message with all its chunks). Grouped (`acks.py`): sent
        within `ack_delay` seconds, one ACK for all; held while disconnected, then sent."""
        if self.closed:
            raise ConsumerClosed(f"{self} is closed")
        self._acks.add(acks.ack_ids(items))

    def flush_acks(self) -> None:
        """Send the grouped acknowledgements now (held instead while disconnected)."""
        self._acks.flush()

    def ack_cumulative(self, item: AckItem) -> None:
        """Acknowledge everything up to and including this entry (not on Shared)."""
        if self.closed:
            raise ConsumerClosed(f"{self} is closed")
        self._acks.flush()
        mid = item.id if isinstance(item, ReceivedEntry) else item
        connection = self._connection
        if connection is not None and self.ready:
            with contextlib.suppress(ConnectionClosed):
                command = c.encode_ack(self._consumer_id, c.AckType.CUMULATIVE, [mid.entry])
                connection.send_encoded(command)

    def _send_acks(self, entries: list[tuple[int, int]]) -> bool:
        connection = self._connection
        if connection is None or not self.ready:
            return False
        try:
            connection.send_encoded(c.encode_ack(self._consumer_id, c.AckType.INDIVIDUAL, entries))
        except ConnectionClosed:
            return False
        return True

    def redeliver(self, items: Iterable[AckItem] | None = None) -> None:
        """Ask for unacknowledged entries again: these (Shared, Key_Shared), or all of them
        (None; the local queue is dropped too, as its entries come again)."""
        connection = self._connection
        if connection is None or not self.ready:
            return  # a new subscribe redelivers everything unacknowledged anyway
        self._acks.flush()  # what was acknowledged before must not come again
        if items is None:
            dropped = sum(self._permits_of(entry) for entry in self._queue)
            self._drop_queue()
            self._last_passed = self._last_seen = None if self.durable else self._last_passed
            with contextlib.suppress(ConnectionClosed):
                connection.send(c.RedeliverUnacknowledged(self._consumer_id))
            self._owe(dropped)
            return
        # named with the topic's partition index: pulsar-lite looks a redelivery up by id,
        # partition included, and ignores one without it on a partition's topic
        # (docs/backend.md, "Named redelivery needs the partition index")
        partition = partition_index(self.topic)
        ids = [MessageId(*entry).to_data(partition) for entry in acks.ack_ids(items)]
        if ids:
            with contextlib.suppress(ConnectionClosed):
                connection.send(c.RedeliverUnacknowledged(self._consumer_id, ids))

    async def _request(self, make: type, **fields: object) -> object:
        connection = self._connection
        if connection is None or not self.ready:
            raise ConnectionClosed(f"{self} is not connected")
        return await connection.request(
            make(consumer_id=self._consumer_id, request_id=connection.new_request_id(), **fields)
        )

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id (its entry comes next) or to a publish
        time in milliseconds. What is queued is dropped."""
        if isinstance(target, MessageId):
            await self._request(c.Seek, message_id=target.to_data())
            self.start_id, self.start_inclusive = target, True
        else:
            await self._request(c.Seek, message_publish_time=int(target))
            self.start_id = None
        self._drop_queue()
        self._last_passed = self._last_seen = None

    async def get_last_message_id(self) -> tuple[MessageId, MessageId | None]:
        """The topic's last message id, and the subscription's mark-delete position when
        the broker says it."""
        answer = await self._request(c.GetLastMessageId)
        assert isinstance(answer, c.GetLastMessageIdResponse)
        last = answer.last_message_id or MessageIdData()
        mark = answer.consumer_mark_delete_position
        return MessageId.from_data(last), None if mark is None else MessageId.from_data(mark)

    async def unsubscribe(self) -> None:
        """Delete the subscription (its cursor goes), then close."""
        await self._request(c.Unsubscribe)
        self._finish(ConsumerClosed(f"{self} unsubscribed"))

    async def close(self) -> None:
        """Close; unacknowledged entries of a durable subscription stay in it."""
        if self.closed:
            return
        self._acks.flush()
        connection, consumer_id = self._connection, self._consumer_id
        self._finish(ConsumerClosed(f"{self} closed"))
        if connection is not None and not connection.closed:
            with contextlib.suppress(PulsarError):
                await connection.request(
                    c.CloseConsumer(consumer_id, connection.new_request_id()),
                    timeout=min(5.0, self.client.operation_timeout),
                )

    def _finish(self, why: Exception) -> None:
        self.closed = True
        self.ready = False
        self._acks.cancel_timer()
        self.client.unregister(self)
        if self._reconnector is not None and self._reconnector is not asyncio.current_task():
            self._reconnector.cancel()
        if self._connection is not None:
            self._connection.remove_consumer(self._consumer_id)
            self._connection = None
        self._drop_queue()
        arrival, self._arrival = self._arrival, None
        if arrival is not None and not arrival.done():
            arrival.set_result(None)  # waiters wake, see `closed` and raise
        log.debug("%s: %s", self, why)


def _retriable(exc: PulsarError) -> bool:
    if isinstance(exc, ServerError):
        return exc.retriable
    return isinstance(exc, ConnectionClosed | OperationTimeout)
