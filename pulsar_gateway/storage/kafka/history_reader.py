"""Reads of a partition below its in-memory tail: a reader opened at the nearest checkpoint
before the offset asked for, counting forward as the tailer did (docs/offsets.md).

A consumer reading history asks for the offset where its last read ended, so the reader it
used is kept (`Cursor`, at most `MAX_CURSORS`, closed when idle) and the next read goes on
from there instead of counting again from a checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import NamedTuple

from pulsar_gateway.gateway.backend.pulsar_backend import BackendError, LogReader, PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
from pulsar_gateway.gateway.messages import (
    RECORDS,
    LogEntry,
    MessageKey,
    StoredMessage,
    WholeEntry,
    records_in,
)
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.storage.kafka.offset_checkpoints import OffsetCheckpoints
from pulsar_gateway.storage.kafka.read_batches import first_sequence, is_read_batch, messages_of
from pulsar_gateway.storage.kafka.whole_batches import BatchEdges
from pulsar_gateway.storage.kafka.whole_entry import kafka_batch

log = logging.getLogger("gateway.partition")

MAX_CURSORS = 16
# A history reader asks pulsar-lite for as many entries at once as this holds of entries
# the size of the last one (at least the wire client's 20, at most 100: `wire.Consumer`):
# entries of a few records no longer come 20 to a round trip (a cold fetch of 10-record
# entries took 0.99-1.57 s against 1.38-1.75 s, same runs), entries of hundreds of records
# come 20 at a time as before (larger windows drew more replayed copies and were slower).
WINDOW_BYTES = 256 * 1024
# A kept cursor reads on while its consumer handles the last answer, waiting at most this
# long for entries (`Cursor.read_ahead`).
READ_AHEAD_SECONDS = 0.2


class Cursor:
    """A reader below the tail, positioned by counting from a checkpoint."""

    def __init__(self, stream: LogReader, next_offset: int, resends: ResendFilter) -> None:
        self.stream = stream
        self.next_offset = next_offset
        self.resends = resends
        self.last_used = time.monotonic()
        # read from the stream but not yet counted: the rest of a batch that a read left at
        # its byte limit, and what was read ahead; the first one holds `next_offset`
        self.pending: list[StoredMessage] = []
        self.ahead: asyncio.Task[None] | None = None  # reading ahead (`read_ahead`)

    async def read_ahead(self, whole: WholeEntry | None, max_bytes: int) -> None:
        """Entries the reader holds (or that come within READ_AHEAD_SECONDS) made into
        messages now, while the loop would otherwise wait for the consumer's next fetch:
        the next read, likely of `max_bytes` again, finds them pending (one read of the
        stream ahead at most, as a read that stops at its limit leaves). Only `max_bytes`
        of them: making all the broker had sent (5-6 MB, 50 ms beside a busy loop) held
        up the Fetch that waited for this cursor, and its consumer with it. A failure is
        left for that read to meet."""
        held = sum(message.size for message in self.pending)
        if held >= max_bytes:
            return
        with contextlib.suppress(Exception):
            self.pending += await self.stream.read_batch(
                1000, timeout=READ_AHEAD_SECONDS, whole=whole, max_bytes=max_bytes - held
            )

    async def settle(self) -> None:
        """Wait for a read ahead to end (nothing happens to the cursor while it runs)."""
        if self.ahead is not None:
            ahead, self.ahead = self.ahead, None
            await ahead

    async def close(self) -> None:
        if self.ahead is not None:
            self.ahead.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.ahead
            self.ahead = None
        await self.stream.close()


class HistoryRead(NamedTuple):
    entries: list[LogEntry]
    # the last entry is a batch's first part and the tail, from `limit` on, begins with its
    # rest: a fetch must see a batch whole
    rest_in_tail: bool


class HistoryReader:
    """One partition's reads from Pulsar, for what its tail cache no longer holds."""

    def __init__(self, backend: PulsarBackend, topic: str, checkpoints: OffsetCheckpoints) -> None:
        self.backend = backend
        self.topic = topic
        self.checkpoints = checkpoints
        self._cursors: dict[int, Cursor] = {}  # by the offset each would read next
        # cursors being opened ahead of a read (`prepare`), by the offset it will ask for
        self._preparing: dict[int, asyncio.Task[None]] = {}

    def prepare(self, offset: int, max_bytes: int) -> None:
        """Open the cursor a read at `offset` will need, and read ahead on it, now: a Fetch
        naming several partitions reads them one after another, and each first read after
        a restart waited for its own reader to be opened and sent its first entries
        (issue 32). Prepared together, every partition's reader gets its entries while the
        first is being read. Nothing happens when a cursor is kept (or being prepared) for
        `offset`, or when MAX_CURSORS are."""
        if offset in self._cursors or offset in self._preparing:
            return
        if len(self._cursors) + len(self._preparing) >= MAX_CURSORS:
            return
        self._preparing[offset] = asyncio.create_task(self._prepare(offset, max_bytes))

    async def _prepare(self, offset: int, max_bytes: int) -> None:
        cursor: Cursor | None = None
        try:
            cursor = await self._cursor_at(self.checkpoints.before_offset(offset))
            await cursor.read_ahead(kafka_batch, max_bytes)
        except BaseException as exc:
            if cursor is not None:
                await cursor.close()
            if not isinstance(exc, Exception):
                raise
            # the read opens a cursor of its own, and meets the failure if it lasts
            log.debug("%s: a cursor prepared at %d failed: %r", self.topic, offset, exc)
            return
        finally:
            self._preparing.pop(offset, None)
        if offset in self._cursors or len(self._cursors) >= MAX_CURSORS:
            await cursor.close()
        else:
            self._cursors[offset] = cursor

    async def read(
        self,
        offset: int,
        max_bytes: int,
        limit: int,
        batches: bool = True,
        room: int | None = None,
        wait: bool = True,
    ) -> HistoryRead:
        """Messages from the one holding `offset` up to `limit` (where the tail began),
        at least one (unless it alone is over `room` bytes) and up to about `max_bytes`,
        each with the offset of its first record. What a read leaves waits in its cursor
        for the next read, which finds it only if it asks for the offset this one ended at:
        a fetch that read more than it served (a message over what its response had left:
        `room`) made the next read count again from a checkpoint (issue 32).
        With `batches`, a batched entry the gateway wrote, read from its first record on,
        comes as one Kafka batch standing for its messages (read_batches.py).
        Without `wait`, only what has come from Pulsar already (`_on_the_way`)."""
        if not wait and self._on_the_way(offset, max_bytes):
            return HistoryRead([], False)
        preparing = self._preparing.get(offset)
        if preparing is not None:
            await asyncio.wait([preparing])  # however it ends; not cancelled with this read
        cursor = self._cursors.pop(offset, None)
        if cursor is None:
            cursor = await self._cursor_at(self.checkpoints.before_offset(offset))
        whole = kafka_batch if batches else None
        try:
            await cursor.settle()
        except BaseException:
            await cursor.close()
            raise
        out: list[LogEntry] = []
        size = 0
        edges = BatchEdges()
        try:
            while cursor.next_offset < limit:
                batch, cursor.pending = cursor.pending, []
                if not batch and not wait:
                    batch = await cursor.stream.read_batch(
                        1000, timeout=0, whole=whole, max_bytes=max_bytes - size
                    )
                    if not batch and edges.at_edge:  # else a batch's rest is waited for
                        break  # the rest is on its way: read ahead below, for the next read
                if not batch:
                    # the messages are stored, so a second without one is a reader that
                    # stopped short (docs/backend.md, 'Readers skip or stall'): reopened
                    # after 1 s, not 5, as a consumer of large records meets it every ~10 MB
                    batch = await cursor.stream.read_batch(
                        1000, timeout=1, expect_more=True, whole=whole, max_bytes=max_bytes - size
                    )
                if not batch:
                    raise BackendError(
                        f"history read of {self.topic} stalled at {cursor.next_offset}"
                    )
                position = 0
                while position < len(batch) and cursor.next_offset < limit:
                    message = batch[position]
                    cost = _served_size(message)
                    if (out and size + cost > max_bytes and edges.may_stop(size, max_bytes)) or (
                        not out and room is not None and cost > room
                    ):
                        # full: the rest waits in the cursor, uncounted, for the next read
                        cursor.pending = batch[position:]
                        break
                    if is_read_batch(message):
                        count = _place_whole(cursor, message, offset, batches)
                        if count is None:  # taken message by message after all
                            batch[position : position + 1] = messages_of(message)
                            continue
                        position += 1
                        if not count:  # a resent copy of an entry already counted
                            continue
                    else:
                        position += 1
                        if cursor.resends.original_offset(message, cursor.next_offset) is not None:
                            continue
                        count = records_in(message)
                    if cursor.next_offset + count > offset:
                        out.append(LogEntry(cursor.next_offset, message))
                        size += cost
                        edges.saw(message)
                    cursor.next_offset += count
                if cursor.pending or (
                    out and size >= max_bytes and edges.may_stop(size, max_bytes)
                ):
                    break
        except BaseException:
            await cursor.close()
            raise
        if cursor.next_offset < limit and len(self._cursors) < MAX_CURSORS:
            cursor.last_used = time.monotonic()
            self._cursors[cursor.next_offset] = cursor
            if batches:
                cursor.ahead = asyncio.create_task(cursor.read_ahead(whole, max_bytes))
        else:
            await cursor.close()
        rest_in_tail = bool(out) and not edges.at_edge and cursor.next_offset == limit
        return HistoryRead(out, rest_in_tail)

    def _on_the_way(self, offset: int, max_bytes: int) -> bool:
        """Whether a read at `offset` would wait for entries already asked of Pulsar: its
        cursor is being opened, or is reading ahead (what it holds is taken with what it
        reads, `Cursor.settle`). A Fetch that has its min_bytes takes none of those
        (docs/offsets.md, "A Fetch answers with what is at hand"): they come for the next
        Fetch. With no cursor at all one is prepared for that next read; only when none
        may be (MAX_CURSORS) is this read left to open its own and wait."""
        if offset in self._preparing:
            return True
        cursor = self._cursors.get(offset)
        if cursor is None:
            self.prepare(offset, max_bytes)
            return offset in self._preparing
        return cursor.ahead is not None and not cursor.ahead.done()

    async def offset_by_scan(self, mid: MessageKey) -> int:
        """Offset of the first message at or after `mid`, counted from the checkpoint before
        it: the slow path, for an id that fell out of the tail before its producer asked."""
        cursor = await self._cursor_at(self.checkpoints.before_id(mid))
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

    async def _cursor_at(self, position: int) -> Cursor:
        """A reader at checkpoint `position` (-1: the start), counting as the tailer did."""
        if position >= 0:
            start = self.checkpoints.start(position)
            stream = await self.backend.open_log_reader(
                self.topic, start.mid, window_bytes=WINDOW_BYTES
            )
            return Cursor(stream, start.offset, start.resends)
        stream = await self.backend.open_log_reader(self.topic, EARLIEST, window_bytes=WINDOW_BYTES)
        return Cursor(stream, 0, ResendFilter())

    async def close_idle(self, idle_seconds: float) -> None:
        now = time.monotonic()
        for key, cursor in list(self._cursors.items()):
            if now - cursor.last_used > idle_seconds:
                del self._cursors[key]
                await cursor.close()

    async def close(self) -> None:
        for task in list(self._preparing.values()):
            await cancel_and_wait(task)
        for cursor in self._cursors.values():
            await cursor.close()
        self._cursors.clear()


def _served_size(message: StoredMessage) -> int:
    """About the bytes a fetch serves of `message`, at least: its size, and for one with
    properties beside its stamp (a record's headers), theirs. Counted by size alone, a read
    of headered records ended past the bytes the fetch then served; the fetch cut the batch
    and the next read, asking for the first record cut, found no cursor there and counted
    again from a checkpoint (issue 32)."""
    properties = message.properties
    size = message.size
    if len(properties) > 1:
        for name, value in properties.items():
            size += len(name) + len(value) + 4  # a header's lengths take at most 4 bytes
    return size


def _place_whole(cursor: Cursor, batch: StoredMessage, offset: int, batches: bool) -> int | None:
    """How many offsets a Kafka batch made from a whole entry takes at the cursor: its
    record count (recorded by the resend filter as the item for a whole entry it is), 0 for
    a resent copy of an entry the cursor counted already, None when it must be taken
    message by message: the read wants messages, starts inside it, or a resend overlaps it
    in part."""
    count = int(batch.properties[RECORDS])
    start = cursor.next_offset
    if not batches or start < offset < start + count:
        return None
    first = first_sequence(batch)
    resends = cursor.resends
    seen = resends.last_of(batch.producer)
    if seen is not None and first <= seen:
        return 0 if first + count - 1 <= seen else None
    resends.original_offset(batch, start)
    return count
