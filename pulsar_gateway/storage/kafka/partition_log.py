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
import bisect
import contextlib
import heapq
import itertools
import logging
import time
from typing import Any

from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST, ReaderStream
from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
from pulsar_gateway.gateway.messages import (
    LogEntry,
    MessageKey,
    OutMessage,
    StoredMessage,
    records_in,
)
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import OffsetOutOfRange

log = logging.getLogger("gateway.partition")

INDEX_PREFIX = "offset-index/"


class _Cursor:
    """A reader below the tail, positioned by counting from a checkpoint."""

    def __init__(self, stream: ReaderStream, next_offset: int, resends: ResendFilter) -> None:
        self.stream = stream
        self.next_offset = next_offset
        self.resends = resends
        self.last_used = time.monotonic()


class PartitionLog:
    def __init__(
        self,
        backend: PulsarBackend,
        metadata: MetadataStore,
        topic: str,
        index_interval: int = 1000,
        tail_records: int = 20000,
        tail_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.backend = backend
        self.metadata = metadata
        self.topic = topic
        self.index_interval = index_interval
        self.tail_records = tail_records
        self.tail_bytes = tail_bytes
        self.log_start = 0
        self.next_offset = 0
        self.last_used = time.monotonic()
        self._checkpoint_offsets: list[int] = []
        self._checkpoint_ids: list[MessageKey] = []
        self._checkpoint_states: list[dict[str, int]] = []
        self._resends = ResendFilter()
        self._resent_ids: dict[MessageKey, int] = {}  # recent resends -> first copy's offset
        self._tail: list[StoredMessage] = []
        self._tail_offsets: list[int] = []  # offset of each tail message's first record
        self._tail_head = 0
        self._tail_size = 0
        self._last_id: MessageKey | None = None
        # (message id, tie-breaker, future): resolved by the first message indexed at or after it
        self._id_waiters: list[tuple[MessageKey, int, asyncio.Future[int]]] = []
        self._waiter_seq = itertools.count()
        self._data_waiters: list[asyncio.Future[None]] = []
        self._stream: ReaderStream | None = None
        self._task: asyncio.Task[None] | None = None
        self._cursors: dict[int, _Cursor] = {}
        self._ready = asyncio.Event()
        self._failure: BaseException | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def _load_checkpoints(self) -> None:
        prefix = f"{INDEX_PREFIX}{self.topic}/"
        entries = sorted(
            (int(key[len(prefix) :]), value) for key, value in self.metadata.children(prefix)
        )
        self._checkpoint_offsets = [offset for offset, _ in entries]
        self._checkpoint_ids = [tuple(value["id"]) for _, value in entries]  # type: ignore[misc]
        self._checkpoint_states = [value["resends"] for _, value in entries]

    async def open(self) -> None:
        self._load_checkpoints()
        if self._checkpoint_offsets:
            self.next_offset = self._checkpoint_offsets[-1]
            start = self._checkpoint_ids[-1]
            self._resends = ResendFilter(self._checkpoint_states[-1])
        else:
            self.next_offset = 0
            start = EARLIEST
        self._stream = await self.backend.open_reader(self.topic, start, receiver_queue_size=2000)
        self._task = asyncio.create_task(self._tail_loop(), name=f"tail {self.topic}")
        # The partition is ready once it has caught up with what is already stored.
        await self._catch_up()

    async def _catch_up(self) -> None:
        """Wait until the tailer has indexed everything stored before now."""
        assert self._stream is not None
        while await self._stream.has_more():
            if self._failure:
                raise self._failure
            await asyncio.wait([self.data_future()], timeout=0.5)
        self._ready.set()

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._stream:
            await self._stream.close()
        for cursor in self._cursors.values():
            await cursor.stream.close()
        self._cursors.clear()
        self._fail_waiters(BackendError("partition closed"))
        self._wake_data_waiters()

    # ---- tailing ---------------------------------------------------------------------------

    async def _tail_loop(self) -> None:
        assert self._stream is not None
        try:
            while True:
                batch = await self._stream.read_batch(2000, timeout=2.0)
                if batch:
                    self._index(batch)
                elif not self._stream.connected:
                    # the client's reconnect backoff can reach a minute after a broker restart
                    log.warning("tailer of %s disconnected; reopening it", self.topic)
                    await self._stream.reopen()
                elif (self._id_waiters or self._data_waiters) and await self._stream.has_more():
                    # connected, data waiting, nothing dispatched: pulsar-lite stops
                    # dispatching to readers whose connection it dropped (BACKEND.md, acks)
                    log.warning("tailer of %s stalled; reopening it", self.topic)
                    await self._stream.reopen()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - surfaced to every waiter
            log.error("tailing %s failed: %s", self.topic, exc)
            self._failure = exc
            self._fail_waiters(BackendError(f"partition {self.topic} failed: {exc}"))
            self._wake_data_waiters()

    def _fail_waiters(self, error: Exception) -> None:
        for _, _, future in self._id_waiters:
            if not future.done():
                future.set_exception(error)
        self._id_waiters.clear()

    def _index(self, batch: list[StoredMessage]) -> None:
        offset = self.next_offset
        waiters = self._id_waiters
        interval = self.index_interval
        resends = self._resends
        checkpoints = self._checkpoint_offsets
        for message in batch:
            # one checkpoint per `interval` offsets, at the first message starting past it
            due = offset // interval > (checkpoints[-1] // interval if checkpoints else -1)
            before = resends.snapshot() if due else None
            original = resends.original_offset(message, offset)
            if original is not None:
                # a resend of a message already numbered: no offset of its own
                self._resent_ids[message.id] = original
                if len(self._resent_ids) > 10000:
                    self._resent_ids.pop(next(iter(self._resent_ids)))
                while waiters and waiters[0][0] <= message.id:
                    future = heapq.heappop(waiters)[2]
                    if not future.done():
                        future.set_result(original)
                continue
            if before is not None:
                self._checkpoint(offset, message.id, before)
            self._tail.append(message)
            self._tail_offsets.append(offset)
            self._tail_size += message.size
            while waiters and waiters[0][0] <= message.id:
                future = heapq.heappop(waiters)[2]
                if not future.done():
                    future.set_result(offset)
            offset += records_in(message)
        if batch:
            self._last_id = batch[-1].id
        self.next_offset = offset
        self._trim_tail()
        self._wake_data_waiters()

    def _checkpoint(self, offset: int, mid: MessageKey, resends: dict[str, int]) -> None:
        """Where offset `offset` is, and the resend filter's state just before it."""
        self._checkpoint_offsets.append(offset)
        self._checkpoint_ids.append(mid)
        self._checkpoint_states.append(resends)
        task = asyncio.ensure_future(
            self.metadata.put(
                f"{INDEX_PREFIX}{self.topic}/{offset:020d}", {"id": list(mid), "resends": resends}
            )
        )
        task.add_done_callback(_log_failure)

    def _trim_tail(self) -> None:
        tail, offsets = self._tail, self._tail_offsets
        while self._tail_head < len(tail) and (
            len(tail) - self._tail_head > self.tail_records or self._tail_size > self.tail_bytes
        ):
            self._tail_size -= tail[self._tail_head].size
            tail[self._tail_head] = None  # type: ignore[call-overload]
            self._tail_head += 1
        if self._tail_head > 4096 and self._tail_head * 2 > len(tail):
            del tail[: self._tail_head]
            del offsets[: self._tail_head]
            self._tail_head = 0

    def _wake_data_waiters(self) -> None:
        waiters, self._data_waiters = self._data_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    # ---- writing ---------------------------------------------------------------------------

    async def append(self, messages: list[OutMessage]) -> int:
        """Store messages; returns the offset of the first, as the tailer numbered it."""
        self.last_used = time.monotonic()
        # Unbatched: a pulsar-lite reader's own cumulative ack of a batched entry makes the
        # broker drop the client connection, after which its readers get nothing more.
        first, last = await self.backend.send(self.topic, messages, batching=False)
        base = await self.offset_of(first)
        if last != first:
            # Kafka's high watermark covers every acknowledged record: answer only once the
            # tailer has numbered the last one too, or a fetch right after sees a short log.
            await self.offset_of(last)
        return base

    async def offset_of(self, mid: MessageKey) -> int:
        """Offset of the first message at or after `mid` (a send callback's id)."""
        if self._failure:
            raise BackendError(f"partition {self.topic} failed: {self._failure}")
        if self._last_id is not None and mid <= self._last_id:
            if mid in self._resent_ids:
                return self._resent_ids[mid]
            found = self._find_in_tail(mid)
            return found if found is not None else await self._offset_by_scan(mid)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._id_waiters, (mid, next(self._waiter_seq), future))
        return await asyncio.shield(future)

    def _find_in_tail(self, mid: MessageKey) -> int | None:
        tail = self._tail
        if self._tail_head >= len(tail) or tail[self._tail_head].id > mid:
            return None
        low, high = self._tail_head, len(tail)
        while low < high:
            middle = (low + high) // 2
            if tail[middle].id < mid:
                low = middle + 1
            else:
                high = middle
        return self._tail_offsets[low]

    async def _offset_by_scan(self, mid: MessageKey) -> int:
        """Slow path: the id fell out of the tail before its producer asked for it."""
        position = bisect.bisect_right(self._checkpoint_ids, mid) - 1
        cursor = await self._cursor_at(position)
        try:
            while True:
                batch = await cursor.stream.read_batch(1000, timeout=5, expect_more=True)
                if not batch:
                    raise BackendError(f"offset of {mid} not found in {self.topic}")
                for message in batch:
                    original = cursor.resends.original_offset(message, cursor.next_offset)
                    if message.id >= mid:
                        return cursor.next_offset if original is None else original
                    if original is None:
                        cursor.next_offset += records_in(message)
        finally:
            await cursor.stream.close()

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

    async def read(self, offset: int, max_bytes: int) -> list[LogEntry]:
        """Messages from the one holding `offset` on (at least one if any), up to about
        `max_bytes`, each with the offset of its first record."""
        self.last_used = time.monotonic()
        if offset < self.log_start or offset > self.next_offset:
            raise OffsetOutOfRange(offset)
        if offset == self.next_offset:
            return []
        if offset >= self.tail_start:
            return self._read_tail(offset, max_bytes)
        return await self._read_history(offset, max_bytes)

    def _read_tail(self, offset: int, max_bytes: int) -> list[LogEntry]:
        tail, offsets = self._tail, self._tail_offsets
        index = bisect.bisect_right(offsets, offset, self._tail_head) - 1
        out = []
        size = 0
        end = len(tail)
        while index < end:
            message = tail[index]
            size += message.size
            if out and size > max_bytes:
                break
            out.append(LogEntry(offsets[index], message))
            index += 1
        return out

    async def _read_history(self, offset: int, max_bytes: int) -> list[LogEntry]:
        cursor = self._cursors.pop(offset, None)
        if cursor is None:
            cursor = await self._open_cursor(offset)
        out: list[LogEntry] = []
        size = 0
        limit = self.tail_start
        try:
            while cursor.next_offset < limit:
                batch = await cursor.stream.read_batch(1000, timeout=5, expect_more=True)
                if not batch:
                    raise BackendError(
                        f"history read of {self.topic} stalled at {cursor.next_offset}"
                    )
                for message in batch:
                    if cursor.next_offset >= limit:
                        break
                    if cursor.resends.original_offset(message, cursor.next_offset) is not None:
                        continue
                    count = records_in(message)
                    if cursor.next_offset + count > offset:
                        out.append(LogEntry(cursor.next_offset, message))
                        size += message.size
                    cursor.next_offset += count
                if out and size >= max_bytes:
                    break
        except BaseException:
            await cursor.stream.close()
            raise
        if cursor.next_offset < limit and len(self._cursors) < 16:
            cursor.last_used = time.monotonic()
            self._cursors[cursor.next_offset] = cursor
        else:
            await cursor.stream.close()
        return out

    async def _open_cursor(self, offset: int) -> _Cursor:
        return await self._cursor_at(bisect.bisect_right(self._checkpoint_offsets, offset) - 1)

    async def _cursor_at(self, position: int) -> _Cursor:
        """A reader at checkpoint `position` (-1: the start), counting as the tailer did."""
        if position >= 0:
            stream = await self.backend.open_reader(self.topic, self._checkpoint_ids[position])
            return _Cursor(
                stream,
                self._checkpoint_offsets[position],
                ResendFilter(self._checkpoint_states[position]),
            )
        stream = await self.backend.open_reader(self.topic, EARLIEST)
        return _Cursor(stream, 0, ResendFilter())

    async def entry_at(self, offset: int) -> LogEntry:
        """The message holding `offset`, with the offset of its first record."""
        if not self.log_start <= offset < self.next_offset:
            raise OffsetOutOfRange(offset)
        entries = await self.read(offset, 1)
        if not entries:
            raise OffsetOutOfRange(offset)
        return entries[0]

    async def message_id_at(self, offset: int) -> MessageKey:
        """The Pulsar message id holding `offset` (for moving subscriptions to an offset)."""
        return (await self.entry_at(offset)).message.id

    async def close_idle_cursors(self, idle_seconds: float) -> None:
        now = time.monotonic()
        for key, cursor in list(self._cursors.items()):
            if now - cursor.last_used > idle_seconds:
                del self._cursors[key]
                await cursor.stream.close()

    @property
    def tail_start(self) -> int:
        """Offset of the first record still in memory (next_offset when none is)."""
        if self._tail_head < len(self._tail):
            return self._tail_offsets[self._tail_head]
        return self.next_offset


def _log_failure(task: Any) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("offset checkpoint failed: %s", task.exception())
