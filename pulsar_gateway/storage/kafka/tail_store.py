"""A partition's tail cache kept off the Python heap: mmapped segments of packed messages.

The tail is the newest stretch of a partition log (up to `kafka.tail_cache_records`
messages), served to fetches at the end of the log without a trip to Pulsar. Held as one
`StoredMessage` per message, a 100-byte record cost about 900 bytes in some eight Python
objects (tuple, id tuple, bytes, str key, properties dict and its strings, ints), and worse:
those objects were scattered over the allocator's pages among long-lived ones, so freeing
them gave almost nothing back to the system (docs/architecture.md, "tail cache").

Here each message is one packed record (`marshal` of its fields, never persisted, so the
interpreter's own format is fine) appended to a segment: an anonymous `mmap` that grows by
doubling from 16 KiB to 1 MiB per partition. Offsets, ids and sizes live in `array`s beside
it. Dropping the oldest segment unmaps it, so memory goes back to the system at once,
whatever else the process holds. A message is unpacked into a `StoredMessage` only when a
fetch reads it.

A Kafka batch the gateway itself just stored in the `pulsar` format (one message per
record) may be kept beside its messages, as produced (`keep_batch`): a fetch at the tail
then gets that batch as one entry, re-based like a stored `kafka`-format batch, instead of
every record unpacked and encoded again. It is kept only when its records took consecutive
offsets (nothing else landed between them) and after every batch kept before it (produce
requests may finish out of order), and goes with its first message. Kept batches have
mmapped segments of their own: as `bytes` in a dictionary, a soak's busy partitions held
31,500 of them with their index on the heap, and the index's small objects pinned the
allocator's arenas after the partitions closed (docs/architecture.md, "Memory").

A big payload (`HELD_PAYLOAD_BYTES` or more: a whole Kafka batch the wire client's tailer
numbers as one item, messages.WHOLE_ENTRY) is the exception: its `bytes` object is kept as
it came, beside the packed rest of its message, and a fetch gets that same object back.
Packed, each batch was copied three times on the way in (marshal, the join, the write into
the segment; each a fresh mapping at the gateway's 512 KiB threshold, so page faults) and
twice on the way out (the slice, marshal again). Few and big, such objects are not the
scattered small ones that pinned the allocator's pages; blocks of 512 KiB or more are
mappings of their own, unmapped when dropped. Only exact `bytes` are held: a view would
pin the larger buffer it slices.
"""

from __future__ import annotations

import bisect
import itertools
import marshal
import mmap
from array import array
from collections.abc import Iterator, Sequence

from pulsar_gateway.gateway.messages import (
    RECORDS,
    LogEntry,
    MessageKey,
    StoredMessage,
    records_in,
)
from pulsar_gateway.kafka_codec.entry_format import BATCH
from pulsar_gateway.storage.kafka.whole_batches import BatchEdges

FIRST_SEGMENT_BYTES = 16 * 1024
MAX_SEGMENT_BYTES = 1024 * 1024
# What a produced batch may weigh to be kept beside its records for fetches at the tail.
MAX_KEPT_BATCH_BYTES = 1024 * 1024
# What each cached message and each kept batch costs in the arrays beside the mappings
# (an 8-byte end and offset each; a message's id and fetch size, a batch's record count).
INDEX_BYTES_PER_MESSAGE = 44
INDEX_BYTES_PER_BATCH = 20
# A payload this big or more is held as its own `bytes` object, not packed (module doc);
# what holding one costs beyond its bytes (the object's header, its dictionary entry).
HELD_PAYLOAD_BYTES = 32 * 1024
INDEX_BYTES_PER_HELD = 140


class _Mapped:
    """Byte strings written one after another into an anonymous mapping, each found by
    where it ends (`ends`), with the offset of its first record beside (`offsets`)."""

    __slots__ = ("data", "ends", "offsets", "used")

    def __init__(self, capacity: int) -> None:
        # private: a shared anonymous mapping would count as shmem and outlive a fork
        self.data = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.used = 0
        self.ends = array("Q")
        self.offsets = array("q")

    def room(self, size: int) -> bool:
        return self.used + size <= len(self.data)

    def write(self, raw: bytes | bytearray | memoryview, offset: int) -> None:
        end = self.used + len(raw)
        self.data[self.used : end] = raw
        self.used = end
        self.ends.append(end)
        self.offsets.append(offset)

    def bytes_of(self, index: int) -> bytes:
        return self.data[self.ends[index - 1] if index else 0 : self.ends[index]]

    def length(self, index: int) -> int:
        return self.ends[index] - (self.ends[index - 1] if index else 0)

    def __len__(self) -> int:
        return len(self.offsets)

    def release(self) -> None:
        self.data.close()


def _grown(mappings: Sequence[_Mapped], size: int) -> int:
    """The capacity of the next mapping of a list: twice the last one's (16 KiB at first,
    1 MiB at most), or `size` when that is more."""
    last = len(mappings[-1].data) if mappings else FIRST_SEGMENT_BYTES // 2
    return max(min(last * 2, MAX_SEGMENT_BYTES), size)


class _Segment(_Mapped):
    """Packed messages in one mapping, with their offsets, ids and sizes beside."""

    __slots__ = ("entries", "held", "ledgers", "sizes", "slots")

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.ledgers = array("q")
        self.entries = array("q")
        self.slots = array("i")  # batch index
        self.sizes = array("Q")  # each message's size as the fetch budget counts it
        self.held: dict[int, bytes] = {}  # index -> a big payload, held as it came

    def add_many(
        self,
        packed: list[bytes],
        ends: list[int],
        offsets: list[int],
        messages: list[StoredMessage],
        first: int,
        held: dict[int, bytes],
    ) -> int:
        """`add` for the messages from index `first` on, as many as fit; how many did.
        `ends` are the packed records' running byte totals; `held`, by index in
        `messages`, the payloads packed without (`HELD_PAYLOAD_BYTES`)."""
        base = ends[first - 1] if first else 0
        room = len(self.data) - self.used + base
        stop = bisect.bisect_right(ends, room, first)
        if stop == first:
            return 0
        used = self.used
        end = used + ends[stop - 1] - base
        self.data[used:end] = b"".join(packed[first:stop])
        self.used = end
        if held:
            shift_index = len(self.offsets) - first
            for index, payload in held.items():
                if first <= index < stop:
                    self.held[index + shift_index] = payload
        shift = used - base
        self.ends.extend([e + shift for e in ends[first:stop]])
        self.offsets.extend(offsets[first:stop])
        chosen = messages[first:stop]
        self.ledgers.extend([m[0][0] for m in chosen])
        self.entries.extend([m[0][1] for m in chosen])
        self.slots.extend([m[0][2] for m in chosen])
        self.sizes.extend([len(m[1] or b"") + len(m[2]) + 16 for m in chosen])  # .size
        return stop - first

    def id(self, index: int) -> MessageKey:
        return (self.ledgers[index], self.entries[index], self.slots[index])

    def cost(self, index: int) -> int:
        """What the message at `index` holds: packed, and its held payload if any."""
        payload = self.held.get(index) if self.held else None
        if payload is None:
            return self.length(index) + INDEX_BYTES_PER_MESSAGE
        return self.length(index) + INDEX_BYTES_PER_MESSAGE + len(payload) + INDEX_BYTES_PER_HELD

    def message(self, index: int) -> StoredMessage:
        payload, key, properties, event_time, publish_time, producer = marshal.loads(
            self.bytes_of(index)
        )
        if self.held and index in self.held:
            payload = self.held[index]
        return StoredMessage(
            self.id(index), payload, key, properties, event_time, publish_time, producer
        )


class _BatchSegment(_Mapped):
    """Kept batches in one mapping, in offset order, with their offsets beside."""

    __slots__ = ("records",)

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.records = array("I")

    def add(self, batch: bytes | bytearray | memoryview, offset: int, records: int) -> None:
        self.write(batch, offset)
        self.records.append(records)


class TailStore:
    """The messages a tailer indexed last, oldest first; trimmed from the oldest end.

    `size` is what the tail holds, which is what `kafka.tail_cache_*` limit: every packed
    message and kept batch with its bytes in the arrays beside. It once
    counted messages as the fetch budget does (`StoredMessage.size`), which leaves out the
    packing and the index: a tail of 10-byte records then held about five times its limit. The
    mappings hold `size` plus up to one partly used segment each.
    """

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._head = 0  # first live message of the first segment
        self._kept: list[_BatchSegment] = []
        self._kept_head = 0  # first live batch of the first kept segment
        self.size = 0
        self.count = 0
        self._end = 0  # the offset after the last message's records

    def append(self, message: StoredMessage, offset: int) -> None:
        self.extend([message], [offset])

    def extend(self, messages: list[StoredMessage], offsets: list[int]) -> None:
        """`append` for each message with its offset, in order, in one pass."""
        if not messages:
            return
        held: dict[int, bytes] = {}
        packed = []
        for index, m in enumerate(messages):
            payload = m[1]
            if type(payload) is bytes and len(payload) >= HELD_PAYLOAD_BYTES:
                held[index] = payload
                payload = None
            packed.append(marshal.dumps((payload, m[2], m[3], m[4], m[5], m[6])))  # _pack
        ends = list(itertools.accumulate(map(len, packed)))
        segments = self._segments
        done = 0
        while done < len(packed):
            if segments:
                done += segments[-1].add_many(packed, ends, offsets, messages, done, held)
                if done == len(packed):
                    break
            segments.append(_Segment(_grown(segments, len(packed[done]))))
        self.size += ends[-1] + INDEX_BYTES_PER_MESSAGE * len(packed)
        self.size += sum(len(p) + INDEX_BYTES_PER_HELD for p in held.values())
        self.count += len(packed)
        self._end = offsets[-1] + records_in(messages[-1])

    def keep_batch(self, base: int, records: int, batch: bytes | bytearray | memoryview) -> None:
        """Keep the Kafka batch whose `records` records are the cached messages from offset
        `base` on (one record each, all of them already appended). A batch that finished
        after a later one is not kept: its records are read one by one instead."""
        if not self.count or len(batch) > MAX_KEPT_BATCH_BYTES or base < self.first_offset:  # type: ignore[operator]
            return
        if self._records_at(base) != 1:
            return  # the tailer cached it as one item already (messages.WHOLE_ENTRY)
        kept = self._kept
        if kept and kept[-1].offsets[-1] >= base:
            return
        if not kept or not kept[-1].room(len(batch)):
            kept.append(_BatchSegment(_grown(kept, len(batch))))
        kept[-1].add(batch, base, records)
        self.size += len(batch) + INDEX_BYTES_PER_BATCH

    def drop_oldest(self) -> None:
        """Forget the oldest message, and the batch kept from it; a segment left empty is
        unmapped."""
        first = self._segments[0]
        kept = self._kept
        if kept and kept[0].offsets[self._kept_head] == first.offsets[self._head]:
            self.size -= kept[0].length(self._kept_head) + INDEX_BYTES_PER_BATCH
            self._kept_head += 1
            if self._kept_head == len(kept[0]):
                kept.pop(0).release()
                self._kept_head = 0
        self.size -= first.cost(self._head)
        if first.held:
            first.held.pop(self._head, None)
        self.count -= 1
        self._head += 1
        if self._head == len(first):
            first.release()
            del self._segments[0]
            self._head = 0

    def clear(self) -> None:
        for segment in self._segments:
            segment.release()
        self._segments.clear()
        for batches in self._kept:
            batches.release()
        self._kept.clear()
        self._head = self._kept_head = 0
        self.size = self.count = 0

    @property
    def first_offset(self) -> int | None:
        if not self.count:
            return None
        return self._segments[0].offsets[self._head]

    def offset_of(self, mid: MessageKey) -> int | None:
        """Offset of the first message at or after `mid`; None when `mid` precedes the tail
        (or nothing is cached). The caller knows `mid` was indexed already."""
        if not self.count:
            return None
        segments = self._segments
        if segments[0].id(self._head) > mid:
            return None
        # the last segment whose first message is at or before mid, then within it
        low, high = 0, len(segments)
        while high - low > 1:
            middle = (low + high) // 2
            if segments[middle].id(0) <= mid:
                low = middle
            else:
                high = middle
        segment = segments[low]
        start, end = (self._head if low == 0 else 0), len(segment)
        while start < end:
            middle = (start + end) // 2
            if segment.id(middle) < mid:
                start = middle + 1
            else:
                end = middle
        if start == len(segment) or segment.id(start) != mid:
            # inside the item before? (one standing for a whole entry: messages.WHOLE_ENTRY)
            before = segment.id(start - 1)
            if before[:2] == mid[:2] and before[2] >= 0:
                within = mid[2] - before[2]
                if within < self._records_from(low, start - 1):
                    return segment.offsets[start - 1] + within
        if start == len(segment):  # past this segment's last: the next one's first
            if low + 1 == len(segments):
                return None
            return segments[low + 1].offsets[0]
        return segment.offsets[start]

    def _records_from(self, segment_index: int, index: int) -> int:
        """How many records the cached message at (`segment_index`, `index`) holds: the
        offsets of cached messages follow one another."""
        segments = self._segments
        segment = segments[segment_index]
        if index + 1 < len(segment):
            after = segment.offsets[index + 1]
        elif segment_index + 1 < len(segments):
            after = segments[segment_index + 1].offsets[0]
        else:
            after = self._end
        return after - segment.offsets[index]

    def _records_at(self, offset: int) -> int:
        """How many records the cached message starting at `offset` holds (0: none starts
        there)."""
        segments = self._segments
        for position in range(len(segments) - 1, -1, -1):
            segment = segments[position]
            first = self._head if position == 0 else 0
            if segment.offsets[first] <= offset:
                index = bisect.bisect_left(segment.offsets, offset, first)
                if index == len(segment) or segment.offsets[index] != offset:
                    return 0
                return self._records_from(position, index)
        return 0

    def message_at(self, offset: int) -> LogEntry:
        """The cached message holding `offset` (which must be cached), with the offset of
        its first record: one look-up, where `read` would go on to the end of its batch."""
        first, index = self._holder_of(offset)
        segment = self._segments[first]
        return LogEntry(segment.offsets[index], segment.message(index))

    def _holder_of(self, offset: int) -> tuple[int, int]:
        """(segment position, index in it) of the cached message holding `offset`."""
        segments = self._segments
        first = 0
        while first + 1 < len(segments) and segments[first + 1].offsets[0] <= offset:
            first += 1
        start = self._head if first == 0 else 0
        return first, bisect.bisect_right(segments[first].offsets, offset, start) - 1

    def read(self, offset: int, max_bytes: int, batches: bool = True) -> list[LogEntry]:
        """Cached messages from the one holding `offset` on (at least one), up to about
        `max_bytes`, each with the offset of its first record; `offset` must be cached.
        With `batches`, a kept batch stands for its messages (from its first on)."""
        segments = self._segments
        first, index = self._holder_of(offset)
        kept = self._kept_from(offset) if batches and self._kept else None
        next_kept = next(kept, None) if kept else None  # (offset, segment, index)
        out: list[LogEntry] = []
        size = 0
        edges = BatchEdges()  # a read stops at a batch's end only
        skip = 0  # messages a kept batch already stands for
        for segment in segments[first:]:
            offsets, sizes = segment.offsets, segment.sizes
            while index < len(segment):
                if skip:
                    skip -= 1
                    index += 1
                    continue
                at = offsets[index]
                if next_kept is not None and next_kept[0] == at:
                    _, holder, slot = next_kept
                    raw, records = holder.bytes_of(slot), holder.records[slot]
                    next_kept = next(kept, None)  # type: ignore[arg-type]
                    size += len(raw) + 16
                    if out and size > max_bytes:
                        return out
                    out.append(LogEntry(at, _batch_message(segment.id(index), raw, records)))
                    skip = records - 1
                    index += 1
                    continue
                size += sizes[index]
                if out and size > max_bytes and edges.may_stop(size, max_bytes):
                    return out
                message = segment.message(index)
                edges.saw(message)
                out.append(LogEntry(at, message))
                index += 1
            index = 0
        return out

    def _kept_from(self, offset: int) -> Iterator[tuple[int, _BatchSegment, int]]:
        """The kept batches from the first whose first record is at or after `offset`."""
        kept = self._kept
        first = 0
        while first + 1 < len(kept) and kept[first + 1].offsets[0] <= offset:
            first += 1
        start = self._kept_head if first == 0 else 0
        index = bisect.bisect_left(kept[first].offsets, offset, start)
        for segment in kept[first:]:
            offsets = segment.offsets
            while index < len(segment):
                yield offsets[index], segment, index
                index += 1
            index = 0


def _batch_message(first: MessageKey, raw: bytes, records: int) -> StoredMessage:
    """A kept batch as a fetch reads a stored `kafka`-format batch (entry_format.py)."""
    return StoredMessage(first, raw, "", {BATCH: "2", RECORDS: str(records)}, 0, 0)
