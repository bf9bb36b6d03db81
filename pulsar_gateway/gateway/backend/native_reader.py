"""A Kafka partition's reads through the wire client: `ReaderStream`'s contract over a wire
reader (`wire.Consumer.reader`), for `pulsar.client = "native"`.

Through pulsar-client every message read costs about 5.5 µs of client calls (`read_next`
and the ten accessors of `reader_stream.to_stored`: docs/backend.md, "What pulsar-client
costs per message from Python"), and reading back is the largest share of a produced
record's time. The wire reader hands out whole entries; a batched entry is split into its
messages in one pass (`wire.batch.split_batch`), each message becoming the `StoredMessage`
pulsar-client's reader would give: id (ledger, entry, batch index; -1 unbatched), value or
None, partition key ("" for none), properties, event time, and the entry's publish time
and producer name.

The wire reader already drops replayed entries and resubscribes after a lost connection
(docs/pulsar-protocol.md, "Reconnection"); this stream keeps the rest of the contract:
messages before `first_allowed` (a checkpoint inside a batch) are dropped, an entry cut by
the caller's limit is handed out over several reads, `has_more` asks the broker for the
topic's last entry, and `reopen` starts a new reader after the last message passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque

from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.backend.wire import EARLIEST as WIRE_EARLIEST
from pulsar_gateway.gateway.backend.wire import (
    Client,
    Consumer,
    MessageId,
    PulsarError,
    ReceivedEntry,
    ServerError,
)
from pulsar_gateway.gateway.backend.wire.messages import MessageMetadata
from pulsar_gateway.gateway.backend.written_entries import WrittenEntries, WrittenEntry
from pulsar_gateway.gateway.messages import MessageKey, StoredMessage, WholeEntry, last_id

log = logging.getLogger("gateway.reader")

# Entries taken from the wire reader per read: about a loop wake-up's worth.
ENTRIES_PER_READ = 64
# Pulsar's ServerError UnknownError: pulsar-lite's answer about an empty topic.
UNKNOWN_ERROR = 0


def stored_messages(
    entry: ReceivedEntry,
    written: WrittenEntries | None = None,
    as_one: bool = False,
    whole: WholeEntry | None = None,
) -> list[StoredMessage]:
    """The entry's messages as pulsar-client's reader would give them; an entry this
    gateway wrote (`written`) is made from what it was built from, not parsed. `as_one`:
    such an entry holding a whole produced Kafka batch is ONE item standing for all its
    messages (`WrittenEntry.as_one`), for the partition's tailer; a batched entry it does
    not know is offered to `whole`, whose item (if any) stands for the entry the same way
    (`messages.WHOLE_ENTRY`)."""
    metadata = entry.metadata
    ledger, entry_id = entry.id.ledger_id, entry.id.entry_id
    publish_time = metadata.publish_time or 0
    producer = metadata.producer_name or ""
    count = metadata.num_messages_in_batch
    if count is not None and not entry.chunk_ids:
        mine = entry.claimed  # (taken from `written` as it arrived: `claim_written`)
        if not isinstance(mine, WrittenEntry):
            mine = (
                None
                if written is None
                else written.take(producer, metadata.sequence_id or 0, count)
            )
        if mine is not None:
            one = mine.as_one(ledger, entry_id, publish_time, producer) if as_one else None
            if one is not None:
                return [one]
            return mine.stored(ledger, entry_id, publish_time, producer)
        if whole is not None:
            made = whole((ledger, entry_id, 0), entry.data(), count, publish_time, producer)
            if made is not None:
                return [made]
    make = StoredMessage
    return [
        make(
            (ledger, entry_id, m.batch_index),
            m.payload,
            m.key or "",
            m.properties,
            m.event_time,
            publish_time,
            producer,
        )
        for m in entry.messages()
    ]


def claim_written(written: WrittenEntries, metadata: MessageMetadata) -> WrittenEntry | None:
    """The note of a batched entry this gateway wrote, taken as the entry arrives: a
    partition's tailer makes the entry from it (`stored_messages`), so its payload is not
    copied out of the frame (`wire.Consumer.claim`), only checked. Taken, not looked at:
    a note dropped between the arrival and the read would leave an entry with nothing."""
    count = metadata.num_messages_in_batch
    if count is None or metadata.num_chunks_from_msg is not None:
        return None
    return written.take(metadata.producer_name or "", metadata.sequence_id or 0, count)


class NativeReaderStream:
    """In-order reads of one topic from `first_allowed` on (see the module's docstring)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        first_allowed: MessageKey = EARLIEST,
        receiver_queue_size: int = 1000,
        written: WrittenEntries | None = None,
        as_one: bool = False,
        window_bytes: int | None = None,
    ) -> None:
        self._client = client
        # the reader's window sized by the bytes of its entries (`wire.Consumer`; None: a
        # fixed number of entries)
        self._window_bytes = window_bytes
        self._written = written  # what this gateway wrote and need not parse back
        # an entry written whole from a produced Kafka batch handed out as one item (the
        # partition tailer's reads only: `stored_messages`)
        self._as_one = as_one
        self._topic = topic
        self._floor = first_allowed
        self._queue_size = receiver_queue_size
        self._consumer: Consumer | None = None
        self._last: MessageKey | None = None  # the last message handed out
        self._seen: MessageKey | None = None  # the last message received (held ones too)
        self._held: list[StoredMessage] = []  # passed over by a read's limit, in order
        # entries taken from the reader and not split yet: a read splits only what its
        # limit needs, as a cursor closed after one read would waste the rest
        self._entries: deque[ReceivedEntry] = deque()
        self.closed = False
        self.gaps_repaired = 0
        self.duplicates_dropped = 0

    async def open(self) -> None:
        start = self._last if self._last is not None else self._floor
        at = WIRE_EARLIEST if start == EARLIEST else MessageId(start[0], start[1], -1)
        try:
            self._consumer = await self._client.create_reader(
                self._topic,
                at,
                receiver_queue_size=self._queue_size,
                window_bytes=self._window_bytes,
            )
        except PulsarError as exc:
            raise ConnectionError(f"cannot open a reader on {self._topic}: {exc}") from exc
        if self._as_one and self._written is not None:
            # the tailer meets this gateway's own entries first: their notes stand for them
            self._consumer.claim = functools.partial(claim_written, self._written)

    async def read_batch(
        self,
        limit: int = 1000,
        timeout: float | None = None,
        expect_more: bool = False,
        whole: WholeEntry | None = None,
        max_bytes: int | None = None,
    ) -> list[StoredMessage]:
        """Up to `limit` new messages, waiting up to `timeout` (None: forever) for the first;
        `expect_more`: messages are known to be stored past this reader, so an empty wait
        asks the broker and reopens a reader that stopped short (ReaderStream's rule).
        `whole`: a batched entry that is new from its first message on is offered to it
        whole, and what it makes stands for the entry's messages (None: split as usual).
        `max_bytes`: entries stop being made into messages once those made hold this many
        bytes (at least one entry is); the rest wait as they came. A whole entry is one
        item of up to a megabyte, so `limit` alone let one read make every entry the broker
        had sent (a read ahead of 1 MB made 5-6 MB, 50 ms a fetch then waited out)."""
        out = self._take_held(limit)
        if out:
            return out
        out = await self._receive(limit, timeout, whole, max_bytes)
        if out or not expect_more or not await self.has_more():
            return out
        await self.reopen()
        return await self._receive(limit, timeout, whole, max_bytes)

    def _take_held(self, limit: int) -> list[StoredMessage]:
        held = self._held
        if not held:
            return []
        out, self._held = held[:limit], held[limit:]
        self._last = last_id(out[-1])
        return out

    async def _receive(
        self,
        limit: int,
        timeout: float | None,
        whole: WholeEntry | None = None,
        max_bytes: int | None = None,
    ) -> list[StoredMessage]:
        consumer = self._consumer
        if consumer is None:
            raise ConnectionError(f"the reader of {self._topic} is not open")
        entries = self._entries
        out: list[StoredMessage] = []
        last = self._seen
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        # bytes still to make into messages (-1: no bound); once out of room, entries are
        # taken only until one gives a message (an entry all replayed gives none)
        room = -1 if max_bytes is None else max(max_bytes, 0)
        while not out:  # entries that were all before the start end no wait
            if not entries:
                left = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    entries.extend(await consumer.receive_many(ENTRIES_PER_READ, left))
                except PulsarError as exc:
                    raise ConnectionError(f"reading {self._topic} failed: {exc}") from exc
                if not entries:
                    break  # the timeout ran out
            while entries and len(out) < limit and (room or not out):
                entry = entries.popleft()
                if self._as_one:
                    # one item only for an entry wholly new: one met from inside (a start in
                    # it, a replay) is passed on message by message, from where it is new;
                    # an entry this gateway wrote is made from what it was built from, any
                    # other offered to `whole` (after a restart: all of them)
                    first = (entry.id.ledger_id, entry.id.entry_id, 0)
                    one = first > last if last is not None else first >= self._floor
                    messages = stored_messages(entry, self._written, one, whole if one else None)
                else:
                    made = None if whole is None else self._whole(entry, whole, last)
                    messages = made if made is not None else stored_messages(entry, self._written)
                if not messages:
                    continue
                first = messages[0].id
                if room > 0:
                    room = max(room - sum(message.size for message in messages), 0)
                if (first > last) if last is not None else (first >= self._floor):
                    # the whole entry is new (ids rise within it): no check per message
                    out += messages
                    last = last_id(messages[-1])
                    continue
                for message in messages:
                    key = message.id
                    if (last is None and key < self._floor) or (last is not None and key <= last):
                        self.duplicates_dropped += 1
                        continue
                    last = last_id(message)
                    out.append(message)
        self._seen = last
        if len(out) > limit:
            out, self._held = out[:limit], out[limit:]
        if out:
            self._last = last_id(out[-1])
        return out

    def _whole(
        self, entry: ReceivedEntry, whole: WholeEntry, last: MessageKey | None
    ) -> list[StoredMessage] | None:
        """What `whole` makes of a batched entry all of which is new, or None (split it)."""
        metadata = entry.metadata
        count = metadata.num_messages_in_batch
        if count is None or entry.chunk_ids:
            return None
        first = (entry.id.ledger_id, entry.id.entry_id, 0)
        if (first <= last) if last is not None else (first < self._floor):
            return None  # a replay, or a start inside the entry: message by message
        made = whole(
            first, entry.data(), count, metadata.publish_time or 0, metadata.producer_name or ""
        )
        return None if made is None else [made]

    def hurry(self) -> None:
        """Nothing to cut short: entries are handed out as they arrive."""

    @property
    def last_passed(self) -> MessageKey | None:
        """The id of the last message handed out (None: none yet)."""
        return self._last

    @property
    def connected(self) -> bool:
        return self._consumer is not None and not self._consumer.closed

    async def reopen(self) -> None:
        """A new reader right after the last message passed on."""
        self.gaps_repaired += 1
        log.warning("reader of %s: reopening at %s", self._topic, self._last)
        old, self._consumer = self._consumer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.close(), 5)
        self._held = []
        self._entries.clear()
        self._seen = self._last
        await self.open()

    async def has_more(self, timeout: float = 30) -> bool:
        """Whether the topic holds messages this stream has not returned yet; TimeoutError
        when the broker does not answer within `timeout` seconds."""
        if self._held or self._entries:
            return True
        consumer = self._consumer
        if consumer is None:
            raise ConnectionError(f"the reader of {self._topic} is not open")
        if consumer.queued:
            return True
        try:
            last, _ = await asyncio.wait_for(consumer.get_last_message_id(), timeout)
        except ServerError as exc:
            if exc.code == UNKNOWN_ERROR:
                return False
            raise ConnectionError(f"last message of {self._topic}: {exc}") from exc
        except PulsarError as exc:
            raise ConnectionError(f"last message of {self._topic}: {exc}") from exc
        if last.ledger_id < 0 or last.entry_id < 0:
            return False
        # pulsar-lite names the last entry without a batch index; entries are handed out
        # whole, so comparing entries is exact
        stored = (last.ledger_id, last.entry_id)
        if self._last is not None:
            return stored > self._last[:2]
        return self._floor == EARLIEST or stored >= self._floor[:2]

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.close(), 5)
