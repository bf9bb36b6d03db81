"""asyncio's StreamReader, which can also read a big frame's body straight into one buffer.

A Kafka connection reads a frame's body with `StreamReader.read` until it has it all. For a
big Produce (a megabyte: a batch of thousands of records) that went through the reader's own
buffer first: grown by every chunk the socket gave (reallocated and copied as it grew), each
read's bytes copied out of it and the buffer shrunk again (copied once more), then the reads
joined into the frame. At the gateway's 512 KiB malloc threshold each of those big blocks
is a fresh mapping whose pages fault in (docs/architecture.md, "Memory"); they were most of
the gateway's page faults on the produce path. `read_into` fills one buffer of the body's
size instead: what the reader already holds, then every chunk the socket gives copied
straight into it, once. Nothing else changes: the buffer is bounded by the frame size the
connection already checked and took from its budget, and a reader not filling one behaves
as asyncio's (`feed_data` passes through).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

# A Kafka connection's StreamReader limit: asyncio stops reading the socket once the reader
# holds twice this, until it is read down to it. At 1 MiB a pipelining producer's next big
# Produce piled up there whole while the one before was handled, in a buffer grown past the
# gateway's 512 KiB mapping threshold (fresh pages faulted in for every request, given back
# as the body was read out: a third of the gateway's page faults producing, perf, Nov 30).
# Now the rest waits in the kernel's socket buffer and goes straight into the body's reused
# buffer (`read_into`): docs/pulsar-protocol.md, "Page faults".
READ_LIMIT = 64 * 1024


class BodyReader(asyncio.StreamReader):
    """A StreamReader with `read_into` (see the module's docstring). It works on the
    StreamReader's own state (`_buffer`, `_eof`, `_exception`, `_wait_for_data`...), the
    same in every Python from 3.8 to 3.13; tests/unit/test_body_reader.py holds it to
    `readexactly`'s answers, split anywhere."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)
        self._into: memoryview | None = None  # the buffer being filled, if any
        self._filled = 0  # how much of it is

    def feed_data(self, data: Any) -> None:
        into = self._into
        if into is None or not data:
            super().feed_data(data)
            return
        room = len(into) - self._filled
        size = len(data)
        if size <= room:
            into[self._filled : self._filled + size] = data
            self._filled += size
            inner: Any = self  # asyncio's private parts, which typeshed does not list
            inner._wakeup_waiter()
            return
        # the body's end and the next frame's start: the rest is buffered as usual
        with memoryview(data) as view:
            into[self._filled :] = view[:room]
            self._filled += room
            super().feed_data(view[room:])  # (wakes the waiter)

    async def read_into(
        self, target: bytearray | memoryview, at: int, progress: Callable[[int], None]
    ) -> None:
        """Fill `target[at:]` with the stream's next bytes; `progress(bytes so far)` after each
        chunk. IncompleteReadError at the end of the stream, as `readexactly` raises."""
        inner: Any = self  # asyncio's private parts, which typeshed does not list
        end = len(target)
        with memoryview(target) as view:
            buffered: bytearray = inner._buffer
            if buffered and at < end:
                take = min(len(buffered), end - at)
                with memoryview(buffered) as held:
                    view[at : at + take] = held[:take]
                del buffered[:take]
                at += take
                inner._maybe_resume_transport()
                progress(at)
            if at == end:
                return
            self._into, self._filled = view, at
            try:
                while self._filled < end:
                    if inner._exception is not None:
                        raise inner._exception
                    if inner._eof:
                        raise asyncio.IncompleteReadError(bytes(view[: self._filled]), end)
                    await inner._wait_for_data("read_into")
                    progress(self._filled)
            finally:
                self._into = None


class BodyBuffers:
    """A few buffers big Produce bodies are read into, again and again (one set a Kafka
    listener, shared by its connections: `KafkaContext.bodies`).

    `bytearray(size)` for each big body was a fresh mapping at the gateway's 512 KiB malloc
    threshold, its pages faulted in as it was zeroed: a megabyte body (librdkafka's batches
    of thousands of records) cost about a millisecond before a byte of it was read
    (docs/pulsar-protocol.md, "Page faults"). A buffer here is handed out as a view and is
    free again once that view and every view of it are gone (the request decoded and
    answered, and nothing kept of it: a compressed batch's bytes kept for tail fetches are
    a view of the body, which then keeps its buffer): until then Python refuses to write
    into it (BufferError), so a body still in use is never overwritten, only passed over,
    as `native_writer.EntryBuffers` does for entries. Bodies outside [`smallest`,
    `largest`] bytes, or when every buffer is held, get a `bytearray` of their own as
    before. What stays allocated is at most `count` x `largest` bytes, and nothing once the
    listener's last connection has gone (`clear`): an idle gateway's resident memory is
    what the hostile-clients test holds to where it was before the attack."""

    def __init__(self, count: int = 2, smallest: int = 512 * 1024, largest: int = 4 << 20) -> None:
        self.count = count
        self.smallest = smallest
        self.largest = largest
        self._buffers: list[io.BytesIO] = []

    def take(self, size: int) -> bytearray | memoryview:
        """A writable buffer of `size` bytes (its old contents: the caller fills it all)."""
        if not self.smallest <= size <= self.largest:
            return bytearray(size)
        for buffer in self._buffers:
            try:
                buffer.write(b"")  # BufferError while a view of it is left
            except BufferError:
                continue
            return _sized(buffer, size)
        if len(self._buffers) == self.count:
            return bytearray(size)
        buffer = io.BytesIO()
        self._buffers.append(buffer)
        return _sized(buffer, size)

    def clear(self) -> None:
        """Let go of every buffer (one still viewed lives on until its views are gone)."""
        self._buffers.clear()


def _sized(buffer: io.BytesIO, size: int) -> memoryview:
    """A view of `buffer`'s first `size` bytes, grown to that first if it is smaller."""
    if buffer.seek(0, io.SEEK_END) < size:
        buffer.seek(size - 1)
        buffer.write(b"\0")
    return buffer.getbuffer()[:size]


async def start_server(
    connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    host: str,
    port: int,
    limit: int,
    **options: Any,
) -> asyncio.Server:
    """`asyncio.start_server` with a `BodyReader` for each connection."""
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.StreamReaderProtocol:
        return asyncio.StreamReaderProtocol(BodyReader(limit), connected)

    return await loop.create_server(factory, host, port, **options)
