"""In-order reads from a Pulsar reader, handed to the event loop in groups.

One loop wake-up per group of messages instead of one per message: the first message of a
group arrives through `read_next_async`, the rest are popped from the client's receive queue
without blocking (`read_next(0)`). Every message whose id is not greater than the last one
passed on is dropped: pulsar-lite readers replay already delivered messages under load
(docs/backend.md, "Readers replay messages"), and readers started at a checkpoint inclusive
may see earlier batch members."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import _pulsar

from pulsar_gateway.gateway.backend.loop_bridge import message_future, to_loop
from pulsar_gateway.gateway.messages import MessageKey, StoredMessage, WholeEntry
from pulsar_gateway.gateway.waiting import result_within

log = logging.getLogger("gateway.reader")

EARLIEST: MessageKey = (-1, -1, -1)
# A chunked message spans several entries and carries the last chunk's id; its chunks
# are at most this big, so an entry gap is legitimate only behind a payload this large.
CHUNK_BYTES = 4 * 1024 * 1024
COALESCE_SECONDS = 0.001
# How long `has_more` waits before asking again when told "no more" inside a batched entry.
RECHECK_SECONDS = 0.02


class GapDetected(Exception):
    """The reader skipped entries: pulsar-lite dropped a message (seen with chunks)."""


def to_stored(msg: Any) -> StoredMessage:
    mid = msg.message_id()
    return StoredMessage(
        (mid.ledger_id(), mid.entry_id(), mid.batch_index()),
        None if msg.has_null_value() else msg.data(),
        msg.partition_key(),
        msg.properties(),
        msg.event_timestamp(),
        msg.publish_timestamp(),
        msg.producer_name(),
    )


def follows(last: MessageKey, key: MessageKey) -> bool:
    """Whether `key` is the message right after `last`: the next one of the same batch, or
    the first of the next entry of the same ledger. Such a message is in order and leaves no
    gap, so `ReaderStream` passes it on without its general checks."""
    return key[0] == last[0] and (
        (key[1] == last[1] and key[2] == last[2] + 1) or (key[1] == last[1] + 1 and key[2] <= 0)
    )


class ReaderStream:
    """Wraps a raw `_pulsar.Reader`; `first_allowed` is the lowest id passed on.

    Entry ids are dense within a ledger, so a skipped entry is detected; the stream
    then reopens its reader at the last good id through `reopen` and reads on.
    """

    def __init__(
        self,
        reader: Any,
        first_allowed: MessageKey = EARLIEST,
        reopen: Callable[[MessageKey], Awaitable[Any]] | None = None,
    ) -> None:
        self._reader = reader
        self._reopen = reopen
        self.gaps_repaired = 0
        self._loop = asyncio.get_running_loop()
        self._pending: asyncio.Future[Any] | None = None
        self._floor = first_allowed
        self._last: MessageKey | None = None
        self.duplicates_dropped = 0
        self.closed = False
        self._pause: asyncio.Future[None] | None = None
        self._hurried = False

    def _accept(self, stored: StoredMessage) -> bool:
        mid = stored.id
        last = self._last
        if last is None:
            ok = mid >= self._floor
        else:
            ok = mid > last
            if ok and mid[0] == last[0]:
                self._check_dense(last, stored)
        if ok:
            self._last = mid
        else:
            self.duplicates_dropped += 1
        return ok

    @staticmethod
    def _check_dense(last: MessageKey, stored: StoredMessage) -> None:
        mid = stored.id
        if mid[1] == last[1]:
            if mid[2] != last[2] + 1:
                raise GapDetected(f"batch index jumped from {last} to {mid}")
            return
        gap = mid[1] - last[1] - 1
        if mid[2] > 0:
            raise GapDetected(f"entry {mid} starts mid-batch after {last}")
        if gap and len(stored.payload or b"") <= gap * CHUNK_BYTES:
            raise GapDetected(f"{gap} entries skipped between {last} and {mid}")

    def _drain(self, out: list[StoredMessage], limit: int) -> None:
        """Take what the client has received, without waiting. The hot path of every
        partition tailer: a message that `follows` the last one is passed on without
        `_accept`'s general checks. At most `limit` reads, whether or not they are passed on:
        a reopened reader replaying a long stretch that is dropped as duplicates must not
        hold the event loop until the replay ends."""
        read = self._reader.read_next
        append = out.append
        last = self._last
        for _ in range(limit - len(out)):
            try:
                msg = read(0)
            except _pulsar.Timeout:
                break
            stored = to_stored(msg)
            key = stored.id
            if last is not None and follows(last, key):
                last = self._last = key
                append(stored)
            elif self._accept(stored):
                last = key
                append(stored)

    def _arm(self) -> asyncio.Future[Any]:
        future, done = message_future(
            self._loop, lambda result: ConnectionError(f"pulsar read failed: {result}")
        )
        self._reader.read_next_async(done)
        return future

    async def read_batch(
        self,
        limit: int = 1000,
        timeout: float | None = None,
        expect_more: bool = False,
        whole: WholeEntry | None = None,
        max_bytes: int | None = None,
    ) -> list[StoredMessage]:
        """Up to `limit` new messages, waiting up to `timeout` (None: forever) for the first.

        `expect_more`: the caller knows messages are stored past this reader (a history
        read, a load to a marker). A wait that times out empty then asks the broker,
        and a reader that has stopped short of stored messages (pulsar-lite, seen with
        chunked messages) is reopened at the last message it passed on. `whole` and
        `max_bytes` are not used: pulsar-client hands out messages one by one, never an
        entry whole, so `limit` bounds what a read makes.
        """
        del whole, max_bytes
        out: list[StoredMessage] = []
        for _ in range(3):
            try:
                await self._read_into(out, limit, timeout)
            except GapDetected as gap:
                if self._reopen is None:
                    raise
                await self._repair(gap)
                if not out:
                    continue
            if out or not expect_more or self._reopen is None or not await self.has_more():
                return out
            await self._repair(GapDetected("reader stopped with messages left"))
        return out

    async def _read_into(self, out: list[StoredMessage], limit: int, timeout: float | None) -> None:
        """Fill `out`; returns once something was accepted or `timeout` ran out (replays
        that the filter drops do not end the wait)."""
        deadline = None if timeout is None else self._loop.time() + timeout
        while not out:
            if self._pending is None:
                self._drain(out, limit)
                if out:
                    return
                self._pending = self._arm()
            left = None if deadline is None else max(0.0, deadline - self._loop.time())
            try:
                msg = await result_within(self._pending, left)
            except TimeoutError:
                return
            except ConnectionError:
                self._pending = None
                raise
            self._pending = None
            stored = to_stored(msg)
            if self._accept(stored):
                out.append(stored)
            # Let more arrive before draining: an empty non-blocking read costs 20-80 us,
            # and without a pause every message of a steady stream would cost a wake-up.
            await self._coalesce()
            self._drain(out, limit)
            if deadline is not None and self._loop.time() >= deadline:
                return

    async def _coalesce(self) -> None:
        """The pause before draining: COALESCE_SECONDS, or none at all once `hurry` asked."""
        if self._hurried:
            self._hurried = False
            return
        pause = self._pause = self._loop.create_future()
        timer = self._loop.call_later(COALESCE_SECONDS, _finish, pause)
        try:
            await pause
        finally:
            timer.cancel()
            self._pause = None

    def hurry(self) -> None:
        """Pass on what the reader holds without the pause: somebody waits for a message
        the broker has stored (a producer whose send receipt came in waits for its offset),
        and the pause would add up to COALESCE_SECONDS to the answer. Cuts a pause under
        way short, and skips the next one too: the message may not have reached the reader
        yet (its receipt often comes first), and a pause cut short before it came left it
        to wait out the whole next pause. docs/backend.md, "Reads drained in groups"."""
        self._hurried = True
        if self._pause is not None:
            _finish(self._pause)

    async def _repair(self, gap: GapDetected) -> None:
        """Reopen at the last message passed on; the filter drops it again on arrival."""
        assert self._reopen is not None
        self.gaps_repaired += 1
        log.warning("reader gap (%s): reopening at %s", gap, self._last)
        old = self._reader
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        self._pending = None
        # asynchronous: a blocking close waits for the broker, and a stalled broker would
        # hold the whole event loop for the client's operation timeout
        with contextlib.suppress(Exception):
            old.close_async(_ignore)
        start = self._last if self._last is not None else self._floor
        self._reader = await self._reopen(start)

    @property
    def last_passed(self) -> MessageKey | None:
        """The id of the last message this stream accepted to pass on (None: none yet)."""
        return self._last

    @property
    def connected(self) -> bool:
        return bool(self._reader.is_connected())

    async def reopen(self) -> None:
        """Replace a reader stuck in the client's reconnect backoff."""
        await self._repair(GapDetected("reader disconnected"))

    async def has_more(self, timeout: float = 30) -> bool:
        """Whether the topic holds messages this reader has not returned yet; TimeoutError
        when the broker does not answer within `timeout` seconds.

        pulsar-lite answers UnknownError on an empty topic: that means no.

        A "no" while the last message passed on is inside a batched entry is asked again
        after RECHECK_SECONDS (unless more came meanwhile): pulsar-lite names the last
        entry without its batch index, so the client, which compares it with the last
        message taken, says "no more" whenever its queue is empty there, and its queue is
        empty for a moment while its I/O thread is still adding the entry's messages
        (`tests/integration/test_partition_open.py` beside busy loops: a partition opened
        with 42 of an entry's 528 messages counted). Asked again, the rest is queued.
        """
        available = await self._ask_available(timeout)
        last = self._last
        if available or last is None or last[2] < 0:
            return available
        await asyncio.sleep(RECHECK_SECONDS)
        return self._last != last or await self._ask_available(timeout)

    async def _ask_available(self, timeout: float) -> bool:
        future = self._loop.create_future()
        loop = self._loop

        def done(result: Any, available: bool) -> None:
            to_loop(loop, lambda: None if future.done() else future.set_result((result, available)))

        self._reader.has_message_available_async(done)
        result, available = await asyncio.wait_for(future, timeout)
        if result == _pulsar.Result.Ok:
            return bool(available)
        if result == _pulsar.Result.UnknownError:
            return False
        raise ConnectionError(f"pulsar has_message_available failed: {result}")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        with contextlib.suppress(Exception):
            future = self._loop.create_future()

            def closed(result: Any) -> None:
                to_loop(self._loop, lambda: None if future.done() else future.set_result(result))

            self._reader.close_async(closed)
            await asyncio.wait_for(future, 5)


def _finish(pause: asyncio.Future[None]) -> None:
    if not pause.done():
        pause.set_result(None)


def _ignore(result: Any) -> None:
    """The callback of a close nobody waits for."""
