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
offsets (nothing else landed between them), all in the newest segment, and that segment has
room for it; it goes with its first message. The batch is written into the segment too:
kept as `bytes` in a dictionary, a soak's busy partitions held 31,500 of them with their
index on the heap, and the index's small objects pinned the allocator's arenas after the
partitions closed (docs/architecture.md, "Memory").
"""

from __future__ import annotations

import bisect
import marshal
import mmap
from array import array

from pulsar_gateway.gateway.messages import RECORDS, LogEntry, MessageKey, StoredMessage
from pulsar_gateway.kafka_codec.entry_format import BATCH

FIRST_SEGMENT_BYTES = 16 * 1024
MAX_SEGMENT_BYTES = 1024 * 1024
# What a produced batch may weigh to be kept beside its records for fetches at the tail.
MAX_KEPT_BATCH_BYTES = 1024 * 1024


def _pack(message: StoredMessage) -> bytes:
    return marshal.dumps(
        (
            message.payload,
            message.key,
            message.properties,
            message.event_time,
            message.publish_time,
            message.producer,
        )
    )


class _Segment:
    """Packed messages in one mapping, with their offsets, ids and sizes beside."""

    __slots__ = (
        "data",
        "ends",
        "entries",
        "kept_ends",
        "kept_head",
        "kept_offsets",
        "kept_records",
        "kept_starts",
        "ledgers",
        "offsets",
        "sizes",
        "slots",
        "starts",
        "used",
    )

    def __init__(self, capacity: int) -> None:
        # private: a shared anonymous mapping would count as shmem and outlive a fork
        self.data = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.used = 0
        self.starts = array("Q")  # where each packed message is in `data` (kept batches
        self.ends = array("Q")  # may lie between two of them)
        self.offsets = array("q")  # offset of each message's first record
        self.ledgers = array("q")
        self.entries = array("q")
        self.slots = array("i")  # batch index
        self.sizes = array("Q")  # each message's size as the fetch budget counts it
        # kept batches, by the offset of their first message, written after it in `data`
        self.kept_offsets = array("q")
        self.kept_starts = array("Q")  # where each is in `data`
        self.kept_ends = array("Q")
        self.kept_records = array("I")
        self.kept_head = 0  # the first kept batch whose first message is still cached

    def room(self, size: int) -> bool:
        return self.used + size <= len(self.data)

    def add(self, packed: bytes, offset: int, mid: MessageKey, size: int) -> None:
        end = self.used + len(packed)
        self.data[self.used : end] = packed
        self.starts.append(self.used)
        self.used = end
        self.ends.append(end)
        self.offsets.append(offset)
        self.ledgers.append(mid[0])
        self.entries.append(mid[1])
        self.slots.append(mid[2])
        self.sizes.append(size)

    def keep(self, offset: int, records: int, batch: bytes | bytearray | memoryview) -> None:
        end = self.used + len(batch)
        self.data[self.used : end] = batch
        self.used = end
        self.kept_offsets.append(offset)
        self.kept_starts.append(end - len(batch))
        self.kept_ends.append(end)
        self.kept_records.append(records)

    def kept(self, index: int) -> bytes:
        return self.data[self.kept_starts[index] : self.kept_ends[index]]

    def id(self, index: int) -> MessageKey:
        return (self.ledgers[index], self.entries[index], self.slots[index])

    def message(self, index: int) -> StoredMessage:
        payload, key, properties, event_time, publish_time, producer = marshal.loads(
            self.data[self.starts[index] : self.ends[index]]
        )
        return StoredMessage(
            self.id(index), payload, key, properties, event_time, publish_time, producer
        )

    def __len__(self) -> int:
        return len(self.offsets)

    def release(self) -> None:
        self.data.close()


class TailStore:
    """The messages a tailer indexed last, oldest first; trimmed from the oldest end.

    `size` counts messages as the fetch budget does (`StoredMessage.size`), which is what
    `kafka.tail_cache_*` limit; the mappings hold that plus the packing's few bytes per
    message and up to one partly used segment.
    """

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._head = 0  # first live message of the first segment
        self.size = 0
        self.count = 0

    def append(self, message: StoredMessage, offset: int) -> None:
        packed = _pack(message)
        segments = self._segments
        if not segments or not segments[-1].room(len(packed)):
            last = len(segments[-1].data) if segments else FIRST_SEGMENT_BYTES // 2
            capacity = max(min(last * 2, MAX_SEGMENT_BYTES), len(packed))
            segments.append(_Segment(capacity))
        size = message.size
        segments[-1].add(packed, offset, message.id, size)
        self.size += size
        self.count += 1

    def keep_batch(self, base: int, records: int, batch: bytes | bytearray | memoryview) -> None:
        """Keep the Kafka batch whose `records` records are the cached messages from offset
        `base` on (one record each, all of them already appended). Produce requests finish
        in any order: a batch older than one kept already is not kept (fetched record by
        record instead), so that kept batches stay in offset order."""
        if not self.count or len(batch) > MAX_KEPT_BATCH_BYTES or base < self.first_offset:  # type: ignore[operator]
            return
        last = self._segments[-1]
        kept = last.kept_offsets
        if last.offsets[0] <= base and (not kept or kept[-1] < base) and last.room(len(batch)):
            last.keep(base, records, batch)
            self.size += len(batch)

    def drop_oldest(self) -> None:
        """Forget the oldest message (and a batch kept from it); a segment left empty is
        unmapped."""
        first = self._segments[0]
        offset = first.offsets[self._head]
        kept = first.kept_head
        if kept < len(first.kept_offsets) and first.kept_offsets[kept] == offset:
            self.size -= first.kept_ends[kept] - first.kept_starts[kept]
            first.kept_head = kept + 1
        self.size -= first.sizes[self._head]
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
        self._head = 0
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
        if start == len(segment):  # past this segment's last: the next one's first
            if low + 1 == len(segments):
                return None
            return segments[low + 1].offsets[0]
        return segment.offsets[start]

    def read(self, offset: int, max_bytes: int, batches: bool = True) -> list[LogEntry]:
        """Cached messages from the one holding `offset` on (at least one), up to about
        `max_bytes`, each with the offset of its first record; `offset` must be cached.
        With `batches`, a kept batch stands for its messages (from its first on)."""
        segments = self._segments
        first = 0
        while first + 1 < len(segments) and segments[first + 1].offsets[0] <= offset:
            first += 1
        segment = segments[first]
        index = bisect.bisect_right(segment.offsets, offset, self._head if first == 0 else 0) - 1
        out: list[LogEntry] = []
        size = 0
        skip = 0  # messages a kept batch already stands for
        for segment in segments[first:]:
            offsets, sizes = segment.offsets, segment.sizes
            kept_offsets = segment.kept_offsets if batches else ()
            # the next kept batch at or after where this segment is read from
            kept = bisect.bisect_left(kept_offsets, offsets[index]) if kept_offsets else 0
            while index < len(segment):
                if skip:
                    skip -= 1
                    index += 1
                    continue
                at = offsets[index]
                if kept < len(kept_offsets) and kept_offsets[kept] == at:
                    raw, records = segment.kept(kept), segment.kept_records[kept]
                    kept += 1
                    size += len(raw) + 16
                    if out and size > max_bytes:
                        return out
                    out.append(LogEntry(at, _batch_message(segment.id(index), raw, records)))
                    skip = records - 1
                    index += 1
                    continue
                size += sizes[index]
                if out and size > max_bytes:
                    return out
                out.append(LogEntry(at, segment.message(index)))
                index += 1
            index = 0
        return out


def _batch_message(first: MessageKey, raw: bytes, records: int) -> StoredMessage:
    """A kept batch as a fetch reads a stored `kafka`-format batch (entry_format.py)."""
    return StoredMessage(first, raw, "", {BATCH: "2", RECORDS: str(records)}, 0, 0)
