"""One Kafka partition over one Pulsar topic, with dense and stable offsets.

Pulsar message ids are not offsets (ledgers roll, batches nest), so each open
partition is tailed in order by one reader and every message, whoever wrote it,
gets the next offset (a message holding a stored Kafka record batch gets as many
offsets as it has records: `records_in`). Every `index_interval` offsets a checkpoint (offset ->
message id) goes to the metadata store; a reopened partition resumes counting
from its last checkpoint, and a read below the in-memory tail starts a reader at
the nearest checkpoint and counts forward. The same messages in the same order
always get the same offsets, across gateway and broker restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, LogReader, PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
from pulsar_gateway.gateway.messages import (
    LogEntry,
    MessageKey,
    OutMessage,
    StoredMessage,
    last_id,
    records_in,
)
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.kafka.port import OffsetOutOfRange, ProducerSnapshot, ProducerStamp
from pulsar_gateway.storage.kafka.append_offsets import IdWaiters, NumberedWhileAppending, at_once
from pulsar_gateway.storage.kafka.history_reader import HistoryReader
from pulsar_gateway.storage.kafka.offset_checkpoints import OffsetCheckpoints
from pulsar_gateway.storage.kafka.producer_state import ProducerStateIndex, produced, stamp
from pulsar_gateway.storage.kafka.read_batches import as_numbered
from pulsar_gateway.storage.kafka.send_order import SendOrder
from pulsar_gateway.storage.kafka.tail_store import TailStore
from pulsar_gateway.storage.kafka.transaction_index import TransactionIndex
from pulsar_gateway.storage.kafka.whole_batches import WholeBatches
from pulsar_gateway.storage.kafka.whole_entry import kafka_batch

log = logging.getLogger("gateway.partition")

# Opening: the pauses between asking the broker whether the tailer has caught up.
CATCH_UP_FIRST_PAUSE = 0.01
CATCH_UP_MAX_PAUSE = 0.5
CATCH_UP_DOUBTS = 8  # "nothing more" answers doubted at most (`reach_end`): 1.6 s of pauses
# The tailer's back-off between attempts to reopen a failed reader, doubling from the first.
RETRY_FIRST_SECONDS = 0.1
RETRY_MAX_SECONDS = 1.0
# How long the tailer's stall check waits for the broker to say whether more is stored.
STALL_PROBE_SECONDS = 5.0
# How long the tailer waits for its next message: while an append waits for a message the
# broker has acknowledged (it is stored, so the reader is owed it), and otherwise.
OWED_READ_SECONDS = 0.25
IDLE_READ_SECONDS = 2.0
# A batch held back until its last message comes (`_index_whole`): at most this many
# messages (a longer run of "more follows" stamps is no batch of ours: a native producer may
# set any property), and for at most this long after the reader found nothing more.
HELD_MAX_MESSAGES = 50_000
HELD_MAX_SECONDS = 5.0


class TailBudget(Protocol):
    """What all open partitions' tail caches may hold together (`kafka.tail_cache_bytes`):
    told of every change in a partition's tail, it may ask partitions to `shrink_tail`."""

    def charge(self, partition: PartitionLog, delta: int) -> None: ...


class PartitionLog:
    def __init__(
        self,
        backend: PulsarBackend,
        metadata: MetadataStore,
        topic: str,
        index_interval: int = 1000,
        tail_records: int = 1_000_000,
        tail_bytes: int = 64 * 1024 * 1024,
        tail_budget: TailBudget | None = None,
        batched: bool = True,
    ) -> None:
        self.backend = backend
        self.metadata = metadata
        self.topic = topic
        self.index_interval = index_interval
        self.tail_records = tail_records
        self.tail_bytes = tail_bytes
        self.tail_budget = tail_budget
        # whether appends go through the backend's batching producer (module `_append`)
        self.batched = batched
        self._tail_charged = 0  # what tail_budget was last told this tail holds
        self.log_start = 0
        self.next_offset = 0
        self.last_used = time.monotonic()
        self._checkpoints = OffsetCheckpoints(metadata, topic)
        self._resends = ResendFilter()
        self._producers = ProducerStateIndex()
        self._transactions = TransactionIndex()
        self._resent_ids: dict[MessageKey, int] = {}  # recent resends -> first copy's offset
        self._tail = TailStore()  # the newest messages, packed (tail_store.py)
        # also counts the appends under way: the idle sweep must not close under them
        self._numbered = NumberedWhileAppending()
        self._send_order = SendOrder()  # appends keep their batches in the order sent
        self._last_id: MessageKey | None = None
        self._resumed_at: MessageKey | None = None  # the checkpoint `open` resumed from
        self._id_waiters = IdWaiters()  # appends waiting for the tailer to number an id
        self._data_waiters: list[asyncio.Future[None]] = []
        self._stream: LogReader | None = None
        self._task: asyncio.Task[None] | None = None
        self._history = HistoryReader(backend, topic, self._checkpoints)
        # messages passed on by the reader and not numbered yet: a Kafka batch whose last
        # message has not come (`_index_whole`), since when
        self._whole = WholeBatches(HELD_MAX_MESSAGES)

    # ---- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        self._producers, self._transactions = self._checkpoints.load()
        last = self._checkpoints.last()
        start, self.next_offset = EARLIEST, 0
        if last is not None:
            start, self.next_offset, self._resends = last
            self._resumed_at = start
        self._stream = await self.backend.open_log_reader(
            self.topic, start, receiver_queue_size=2000, as_one=True
        )
        self._task = asyncio.create_task(self._tail_loop(), name=f"tail {self.topic}")
        # The partition is ready once it has caught up with what is already stored.
        try:
            await self.reach_end()
        except BaseException:
            await self.close()  # not served: nothing of it may outlive the failed open
            raise

    async def reach_end(self) -> None:
        """Return once all stored before the call is numbered (so in `producer_state`): an
        open log's view may lag the log (docs/cluster.md, "Idempotent producers after a
        takeover"). BackendError: the broker does not say where it ends, or the log closed."""
        stream = self._stream
        assert stream is not None
        pause, doubts, resumed = CATCH_UP_FIRST_PAUSE, 0, self._resumed_at or EARLIEST
        while True:
            if self._task is None or self._task.done():
                raise BackendError(f"{self.topic}: the partition log is closed")
            # Taken before the question: what the tailer numbers while the broker answers
            # (a new reader's first answer takes some 10 ms) must end the wait below at once;
            # else a whole pause is waited out for nothing (0.5 s per partition opened).
            numbered = self.next_offset
            try:
                more = await stream.has_more()
            except (TimeoutError, ConnectionError) as exc:
                raise BackendError(f"{self.topic}: where the log ends: {exc}") from exc
            if not more and stream.last_passed == self._last_id:  # all passed on is numbered
                # but a reopened log owes its checkpoint's message, which is stored: a "no
                # more" before it is numbered came too early (docs/offsets.md, "Checkpoints")
                if (self._last_id or EARLIEST) >= resumed or doubts == CATCH_UP_DOUBTS:
                    break
                doubts += 1
            # takes its waiter along however it ends (one left would keep the log busy)
            await self.wait_for_data(numbered, pause)
            # messages that number nothing (resends) end no wait: ask again, less often
            pause = CATCH_UP_FIRST_PAUSE if self.next_offset > numbered else pause * 2
            pause = min(pause, CATCH_UP_MAX_PAUSE)

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        if self._stream:
            await self._stream.close()
        await self._history.close()
        await self._checkpoints.finish_saving()
        self._id_waiters.fail(BackendError("partition closed"))
        self._wake_data_waiters()
        self._tail.clear()
        if self.tail_budget is not None and self._tail_charged:
            self.tail_budget.charge(self, -self._tail_charged)
            self._tail_charged = 0

    # ---- tailing ---------------------------------------------------------------------------

    async def _tail_loop(self) -> None:
        """Number what the reader passes on, for as long as the partition is open.

        Only `close` ends it. A read that fails (the broker restarted, stalled or dropped the
        connection) is answered by reopening the reader at the last message it passed on,
        after a back-off that grows to RETRY_MAX_SECONDS while the backend stays unreachable:
        the partition heals by itself, and a producer waiting for its offset simply waits
        (its Produce answers REQUEST_TIMED_OUT by its own timeout). docs/backend.md, 'A
        broker that stalls'.
        """
        stream = self._stream
        assert stream is not None
        failures = 0
        reopen = False
        while True:
            try:
                if reopen:
                    await stream.reopen()
                    reopen = False
                # short waits while an append waits for its messages to be numbered
                waited = OWED_READ_SECONDS if self._numbered.wanted else IDLE_READ_SECONDS
                # a whole entry one item, known or not (after a restart): read_batches.py
                batch = await stream.read_batch(2000, timeout=waited, whole=kafka_batch)
                if batch:
                    self._index_whole(batch)
                    failures = 0
                    if self._id_waiters.pending:  # its hurry went on the part that came
                        stream.hurry()
                elif self._whole.held and self._held_too_long():
                    log.info(
                        "%s: numbering %d messages of a Kafka batch whose rest did not come",
                        self.topic,
                        len(self._whole.held),
                    )
                    self._index_whole([], release=True)
                elif not stream.connected:
                    # the client's reconnect backoff can reach a minute after a broker restart
                    log.warning("tailer of %s disconnected; reopening it", self.topic)
                    reopen = True
                elif self._owed_a_stored_message() and self.backend.reachable:
                    # a send receipt proved the message stored, yet the reader got nothing
                    # from a broker that answers: pulsar-lite stopped dispatching to it
                    # (docs/backend.md, "Readers skip or stall"); no need to ask what it holds
                    log.info(
                        "tailer of %s stopped short of a stored message; reopening", self.topic
                    )
                    reopen = True
                elif (self._id_waiters.heap or self._data_waiters) and await self._stalled(stream):
                    # waited for, nothing dispatched (docs/backend.md, "Readers skip or stall")
                    log.warning("tailer of %s stalled; reopening it", self.topic)
                    reopen = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried until the backend answers again
                failures += 1
                if failures == 1 or failures % 30 == 0:
                    log.warning(
                        "tailing %s failed (%d in a row): %s; reopening at %s",
                        self.topic,
                        failures,
                        exc,
                        self._last_id,
                    )
                reopen = True
                await asyncio.sleep(min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2**failures))

    def _owed_a_stored_message(self) -> bool:
        """Whether an append waits for a message past the reader's: its receipt proves it."""
        first = self._id_waiters.first
        last = self._whole.last_id or self._last_id
        return first is not None and (last is None or first > last)

    async def _stalled(self, stream: LogReader) -> bool:
        """Whether the broker holds messages the reader is not being sent. A broker that does
        not answer at all (stalled, or gone while the connection looks up) is no reason to
        reopen: the reader goes on where it is once the broker answers, or the client sees
        the connection drop. Entries that came while it answered were late, not stalled:
        they are numbered and the reader kept (docs/backend.md, "Readers skip or stall")."""
        try:
            if not await stream.has_more(timeout=STALL_PROBE_SECONDS):
                return False
        except (TimeoutError, ConnectionError) as exc:
            log.debug("tailer of %s: no answer on what is stored: %r", self.topic, exc)
            return False
        late = await stream.read_batch(2000, timeout=0, whole=kafka_batch)
        if late:
            log.info("tailer of %s: %d came while asked if it stalled", self.topic, len(late))
            self._index_whole(late)
        return not late

    def _index_whole(self, batch: list[StoredMessage], release: bool = False) -> None:
        """Number what the reader passed on, but never part of a Kafka record batch: the
        messages from where a batch begins that has not ended yet are held back until its
        last message arrives (whole_batches.py), so that a fetch sees a batch whole or not at
        all. `release`: number what is held, ended or not."""
        ready = self._whole.release() if release else self._whole.take(batch)
        if ready:
            self._index(ready)

    def _held_too_long(self) -> bool:
        """Whether the rest of a held batch should have come by now: the reader found
        nothing more for a while from a broker that answers. A send that failed part-way
        (the producer gave up) never sends the rest; after a restart the new tailer meets
        the same cut batch at the end of the log."""
        if self._owed_a_stored_message():
            return False  # an append's receipt proves more is stored: the reader is behind
        return self.backend.reachable and time.monotonic() - self._whole.since >= HELD_MAX_SECONDS

    def _index(self, batch: list[StoredMessage]) -> None:
        offset = self.next_offset
        waiters = self._id_waiters
        waiting = waiters.heap
        interval = self.index_interval
        resends = self._resends
        producers = self._producers
        transactions = self._transactions
        tail = self._tail
        numbered = self._numbered
        appending = numbered.wanted
        if appending:
            numbered.trim()
        # one checkpoint per `interval` offsets, at the first message starting past it
        next_due = self._checkpoints.next_due(interval)
        # what goes to the tail cache, there in one go after the loop (nothing in it reads it)
        cached: list[StoredMessage] = []
        cached_at: list[int] = []
        for message in as_numbered(batch, resends):
            due = offset >= next_due
            before = resends.snapshot() if due else None
            original = resends.original_offset(message, offset)
            last = last_id(message)  # an item for a whole entry: its last message's
            if original is not None:
                # a resend of a message already numbered: no offset of its own
                self._resent_ids[message.id] = original
                if last is not message.id:
                    self._resent_ids[last] = original + last[2] - message.id[2]
                if len(self._resent_ids) > 10000:
                    self._resent_ids.pop(next(iter(self._resent_ids)))
                if waiting and waiting[0][0] <= last:
                    waiters.numbered(message.id, original, last)
                continue
            if before is not None:
                self._checkpoints.add(
                    offset, message.id, before, producers.snapshot(), transactions.snapshot()
                )
                next_due = (offset // interval + 1) * interval
            producers.observe(message, offset)
            aborted = transactions.observe(message, offset)
            if aborted is not None:
                self._checkpoints.save_aborted(aborted)
            cached.append(message)
            cached_at.append(offset)
            if appending:
                numbered.add(message.id, offset, last)
            if waiting and waiting[0][0] <= last:
                waiters.numbered(message.id, offset, last)
            offset += records_in(message)
        tail.extend(cached, cached_at)
        if batch:
            self._last_id = last_id(batch[-1])
        self.next_offset = offset
        self._trim_tail()
        self._wake_data_waiters()

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the oldest open transaction's first offset."""
        return self._transactions.last_stable_offset(self.next_offset)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction with records in
        [start, end), for a read_committed Fetch."""
        return [
            (a.producer_id, a.first_offset) for a in self._transactions.aborted_between(start, end)
        ]

    def open_transaction_start(self, producer_id: int) -> int | None:
        return self._transactions.open_start(producer_id)

    def _trim_tail(self, max_bytes: int | None = None) -> None:
        tail = self._tail
        limit = self.tail_bytes if max_bytes is None else min(max_bytes, self.tail_bytes)
        while tail.count and (tail.count > self.tail_records or tail.size > limit):
            tail.drop_oldest()
        if self.tail_budget is not None and tail.size != self._tail_charged:
            delta, self._tail_charged = tail.size - self._tail_charged, tail.size
            self.tail_budget.charge(self, delta)

    def shrink_tail(self, excess: int) -> None:
        """Drop the oldest cached messages until `excess` bytes are gone (or all are): the
        tail budget's eviction. Reads below the tail go to Pulsar instead."""
        self._trim_tail(max(self._tail.size - excess, 0))

    def _wake_data_waiters(self) -> None:
        waiters, self._data_waiters = self._data_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    # ---- writing ---------------------------------------------------------------------------

    def append(
        self,
        messages: Sequence[OutMessage],
        producer: ProducerStamp | None = None,
        encoded: bytes | memoryview | None = None,
    ) -> asyncio.Future[int]:
        """Store messages; the future gives the offset of the first, as the tailer numbered
        it, once the whole batch is numbered (and so visible to fetches).

        The messages' place in the partition is fixed before this call returns: appends are
        stored in the order called (docs/offsets.md, "One connection's order").

        `encoded`: the Kafka batch whose records the messages are, one each; kept in the
        tail cache for fetches when its records took consecutive offsets (tail_store.py).

        An idempotent producer's batch is stamped, so the tailer learns it (`producer_state`),
        and stored whole once: a retry of a batch the log holds whole stores nothing, one of
        a batch a crash cut short stores only the records after what is there (module
        `producer_state`). Both answer the batch's base offset.
        """
        self.last_used = time.monotonic()
        floor = self._last_id
        self._numbered.begin(floor)
        try:
            pending = self._queue(messages, producer, encoded)
        except BaseException:
            self._numbered.end(floor)
            raise
        return asyncio.ensure_future(self._appended(pending, floor))

    async def _appended(self, pending: Awaitable[int], floor: MessageKey | None) -> int:
        try:
            return await pending
        finally:
            self._numbered.end(floor)
            self.last_used = time.monotonic()

    @property
    def busy(self) -> bool:
        """Whether a request is waiting on this partition (an append, a long poll, an offset
        lookup): the idle sweep leaves it open, however long a stalled broker makes it wait."""
        if self._numbered.wanted:
            return True
        # a long poll cancels its future when it is answered: only a pending one is a waiter
        self._data_waiters = [f for f in self._data_waiters if not f.done()]
        return bool(self._data_waiters) or self._id_waiters.pending

    def _queue(
        self,
        messages: Sequence[OutMessage],
        producer: ProducerStamp | None,
        encoded: bytes | memoryview | None,
    ) -> Awaitable[int]:
        """`append`'s part that fixes the messages' place, with no await; what it returns
        waits for their offsets."""
        base: int | None = None
        if producer is not None:
            whole = self._producers.stored(producer)
            if whole is not None:
                return at_once(whole)
            resumed = self._producers.resume_from(producer)
            skip = 0
            if resumed is not None:
                base, skip = resumed
                log.info("%s: completing a batch cut short at %d records", self.topic, skip)
            messages = stamp(messages, producer, skip)
            if not messages:
                return at_once(base if base is not None else self.next_offset)
        # `pulsar` format: batched, many records per entry, which Pulsar consumers read
        # natively; the backend keeps a batch from opening a ledger (docs/backend.md, "A
        # batch must not open a ledger"). `kafka` format: each message is already a whole
        # Kafka batch, and the producer's batching would only hold it back (up to 1 ms, a
        # third of the append's time at low rates); every append of the topic, markers
        # included, takes the same producer, so they keep their order.
        if encoded is None or base is not None:
            sent = self.backend.send(self.topic, messages, batching=self.batched, whole=True)
            return self._first_offset(sent, base)
        # a batch produced as one may be kept whole for tail fetches (the wire client's
        # tailer numbers it as one: `produced`), in the order sent
        ticket = self._send_order.ticket()
        kept = produced(messages, encoded)
        try:
            sent = self.backend.send(self.topic, messages, self.batched, True, kept)
        except BaseException:
            self._send_order.done(ticket, None)
            raise
        return self._kept(sent, ticket, messages, encoded)

    async def _first_offset(
        self, sent: Awaitable[tuple[MessageKey, MessageKey]], base: int | None
    ) -> int:
        first_offset, _ = await self._offsets(sent)
        return first_offset if base is None else base

    async def _kept(
        self,
        sent: Awaitable[tuple[MessageKey, MessageKey]],
        ticket: int,
        messages: Sequence[OutMessage],
        encoded: bytes | memoryview,
    ) -> int:
        keep: Callable[[], None] | None = None
        try:
            first_offset, last_offset = await self._offsets(sent)
            if last_offset - first_offset == len(messages) - 1:  # nothing landed between
                keep = functools.partial(self._keep_batch, first_offset, len(messages), encoded)
        finally:
            self._send_order.done(ticket, keep)
        return first_offset

    async def _offsets(self, sent: Awaitable[tuple[MessageKey, MessageKey]]) -> tuple[int, int]:
        """The offsets of the first and the last message sent, as the tailer numbered them."""
        first, last = await sent
        first_offset = await self.offset_of(first)
        last_offset = first_offset
        if last != first:
            # Kafka's high watermark covers every acknowledged record: answer only once the
            # tailer has numbered the last one too, or a fetch right after sees a short log.
            last_offset = await self.offset_of(last)
        return first_offset, last_offset

    def _keep_batch(self, base: int, records: int, encoded: bytes | memoryview) -> None:
        self._tail.keep_batch(base, records, encoded)
        self._trim_tail()

    def producer_ids(self) -> list[int]:
        """The idempotent producers whose state this partition holds (DescribeProducers)."""
        return self._producers.ids()

    def producer_state(self, producer_id: int) -> ProducerSnapshot | None:
        """What this partition holds of an idempotent producer, as far as it is numbered."""
        return self._producers.get(producer_id)

    async def offset_of(self, mid: MessageKey) -> int:
        """Offset of the first message at or after `mid` (a send callback's id); waits as
        long as the tailer needs to get there (it never gives up while the log is open)."""
        if self._last_id is not None and mid <= self._last_id:
            if mid in self._resent_ids:
                return self._resent_ids[mid]
            found = self._tail.offset_of(mid)
            if found is None:
                found = self._numbered.offset_of(mid)
            return found if found is not None else await self._history.offset_by_scan(mid)
        future = self._id_waiters.wait(mid)
        if self._stream is not None:
            self._stream.hurry()  # the receipt came in: the reader holds it, or soon will
        return await asyncio.shield(future)

    # ---- reading ---------------------------------------------------------------------------

    async def wait_for_data(self, offset: int, timeout: float) -> None:
        """Return when `next_offset > offset` or after `timeout` seconds."""
        if self.next_offset > offset or timeout <= 0:
            return
        future = asyncio.get_running_loop().create_future()
        self._data_waiters.append(future)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, timeout)

    def data_future(self) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self._data_waiters.append(future)
        return future

    async def read(
        self, offset: int, max_bytes: int, room: int | None = None, wait: bool = True
    ) -> list[LogEntry]:
        """Messages from the one holding `offset` on (at least one if any, unless over `room`
        bytes), up to about `max_bytes`, each with the offset of its first record."""
        self.last_used = time.monotonic()
        if offset < self.log_start or offset > self.next_offset:
            raise OffsetOutOfRange(offset)
        if offset == self.next_offset:
            return []
        if offset < self.tail_start:
            return await self._read_history(offset, max_bytes, True, room, wait)
        entries = self._tail.read(offset, max_bytes)
        return [] if entries and room is not None and entries[0].message.size > room else entries

    def prepare_read(self, offset: int, max_bytes: int) -> None:  # (port.PartitionLog)
        if self.log_start <= offset < self.tail_start:
            self._history.prepare(offset, max_bytes)

    async def _read_history(
        self, offset: int, size: int, batches: bool, room: int | None = None, wait: bool = True
    ) -> list[LogEntry]:
        limit = self.tail_start
        out, rest_in_tail = await self._history.read(offset, size, limit, batches, room, wait)
        if rest_in_tail and limit >= self.tail_start:
            out += self._tail.read(limit, 1)  # the batch's rest, which the tail begins with
        return out

    async def entry_at(self, offset: int) -> LogEntry:
        """The message holding `offset`, with the offset of its first record."""
        if not self.log_start <= offset < self.next_offset:
            raise OffsetOutOfRange(offset)
        self.last_used = time.monotonic()
        if offset >= self.tail_start:
            # message by message: a kept batch stands for several messages, not one
            return self._tail.message_at(offset)
        entries = await self._read_history(offset, 1, False)
        if not entries:
            raise OffsetOutOfRange(offset)
        return entries[0]

    async def close_idle_cursors(self, idle_seconds: float) -> None:
        await self._history.close_idle(idle_seconds)

    @property
    def tail_start(self) -> int:
        """Offset of the first record still in memory (next_offset when none is)."""
        first = self._tail.first_offset
        return self.next_offset if first is None else first
