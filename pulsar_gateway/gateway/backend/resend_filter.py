"""Drops messages that the Pulsar client resent after a broker crash (Kafka partitions:
`ResendFilter`; AMQP queues: `ResendCopies`).

After a reconnect the client resends every message the broker had not acknowledged;
pulsar-lite has no deduplication, so a message stored just before a crash is stored
twice. The gateway stamps each message it writes with its producer's running
sequence (`__gw.seq`); a message whose sequence its producer already passed is a
resend and gets no offset of its own. Pulsar's own producers carry no stamp and
are never filtered.
"""

from __future__ import annotations

import bisect
import logging
from array import array
from collections import OrderedDict

from pulsar_gateway.gateway.messages import (
    MORE,
    RECORDS,
    SEQ,
    WHOLE_ENTRY,
    MessageKey,
    StoredMessage,
)

log = logging.getLogger("gateway.resends")

MAX_PRODUCERS = 64
RECENT = 20000  # resends come within the send timeout; keep this many offsets per producer
MAX_QUEUE_PRODUCERS = 8  # producers of one queue whose stamps are remembered


def stamp_text(sequence: int, more: bool = False) -> str:
    """The `SEQ` property of the gateway's `sequence`-th message to a topic."""
    return f"{sequence}{MORE}" if more else str(sequence)


def stamp_of(properties: dict[str, str]) -> int | None:
    """The gateway's sequence stamp; None when there is none, or it is not one of ours (a
    native Pulsar producer may set any property, and a crash on it would stop the reader)."""
    stamp = properties.get(SEQ)
    if stamp is None:
        return None
    if stamp.endswith(MORE):
        stamp = stamp[:-1]
    try:
        sequence = int(stamp)
    except ValueError:
        return None
    return sequence if 0 <= sequence < 2**63 else None


def writer_of(producer: str) -> str:
    """The gateway writer a producer belongs to (`gw-<writer>.<kind>`: a writer sends on a
    batching, a single and a chunking producer, and one Kafka batch may cross two of them);
    any other producer is its own writer."""
    if producer.startswith("gw-"):
        return producer.split(".", 1)[0]
    return producer


class RecentOffsets:
    """One producer's recent sequences and the offsets they got, as arithmetic runs.

    Consecutive sequences at evenly spaced offsets (one record per message: step 1) share
    one run, so a partition's steady stream from one producer costs a few numbers instead
    of a dictionary entry per message (about 100 bytes each, `RECENT` of them per producer
    and partition). Producers writing to one partition at once break the runs (a run per
    produce request), so the columns are `array`s: no Python object per run on the
    small-object heap (docs/architecture.md, "Memory"). Holds at least the `keep` newest
    sequences."""

    __slots__ = ("count", "firsts", "keep", "lengths", "offsets", "steps")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.firsts = array("q")  # first sequence of each run
        self.offsets = array("q")  # its offset
        self.steps = array("q")  # offsets between consecutive sequences of the run
        self.lengths = array("q")
        self.count = 0

    def add(self, sequence: int, offset: int) -> None:
        """Record `sequence` at `offset` (both above every one recorded before)."""
        lengths = self.lengths
        if lengths:
            length = lengths[-1]
            if sequence == self.firsts[-1] + length:
                step = self.steps[-1]
                if length == 1:
                    step = self.steps[-1] = offset - self.offsets[-1]
                if step > 0 and offset == self.offsets[-1] + step * length:
                    lengths[-1] = length + 1
                    self.count += 1
                    return
        self.firsts.append(sequence)
        self.offsets.append(offset)
        self.steps.append(0)
        lengths.append(1)
        self.count += 1
        if self.count > self.keep + self.keep // 4:
            self._forget_oldest()

    def add_run(self, sequence: int, offset: int, count: int) -> None:
        """Record `count` consecutive sequences from `sequence` at consecutive offsets from
        `offset` (above every one recorded before): `add` for each, in one step."""
        if count == 1:
            self.add(sequence, offset)
            return
        lengths = self.lengths
        if lengths:
            length = lengths[-1]
            if (
                sequence == self.firsts[-1] + length
                and offset == self.offsets[-1] + length
                and (length == 1 or self.steps[-1] == 1)
            ):
                self.steps[-1] = 1
                lengths[-1] = length + count
                self.count += count
                if self.count > self.keep + self.keep // 4:
                    self._forget_oldest()
                return
        self.firsts.append(sequence)
        self.offsets.append(offset)
        self.steps.append(1)
        lengths.append(count)
        self.count += count
        if self.count > self.keep + self.keep // 4:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """Drop the oldest runs down to `keep` sequences, in one slice (amortised)."""
        drop, count = 0, self.count
        while count - self.lengths[drop] >= self.keep:
            count -= self.lengths[drop]
            drop += 1
        for column in (self.firsts, self.offsets, self.steps, self.lengths):
            del column[:drop]
        self.count = count

    def offset_of(self, sequence: int) -> int:
        """The offset `sequence` got; -1 when it is older than what is remembered."""
        index = bisect.bisect_right(self.firsts, sequence) - 1
        if index < 0 or sequence >= self.firsts[index] + self.lengths[index]:
            return -1
        return self.offsets[index] + self.steps[index] * (sequence - self.firsts[index])


class ResendFilter:
    def __init__(self, state: dict[str, int] | None = None) -> None:
        # producer name -> last sequence passed (least recently used first)
        self._last: OrderedDict[str, int] = OrderedDict(state or {})
        self._offsets: dict[str, RecentOffsets] = {}
        self._newest = ""  # the producer `_last` was last moved to the end for
        # that producer's next sequence and its offsets: message after message of one
        # producer, the stamp that follows is recorded without the look-ups (-1: none)
        self._next = -1
        self._recent: RecentOffsets | None = None

    def original_offset(self, message: StoredMessage, offset: int) -> int | None:
        """None for a new message (recorded at `offset`); else the first copy's offset (-1
        when that copy is older than what is remembered). An item standing for a whole
        entry (`WHOLE_ENTRY`) carries its last message's stamp and is its messages at once:
        all of them new, or all a resend (an entry is resent as it was sent)."""
        properties = message.properties
        sequence = stamp_of(properties)
        if sequence is None:
            return None
        if WHOLE_ENTRY in properties:
            return self._original_of_entry(message, sequence, offset)
        producer = message.producer
        recent = self._recent
        if sequence == self._next and producer == self._newest and recent is not None:
            self._last[producer] = sequence
            self._next = sequence + 1
            recent.add(sequence, offset)
            return None
        last = self._last.get(producer)
        if last is not None and sequence <= last:
            recent = self._offsets.get(producer)
            return -1 if recent is None else recent.offset_of(sequence)
        self._last[producer] = sequence
        if producer != self._newest:  # the same producer message after message: no move
            self._newest = producer
            self._last.move_to_end(producer)
            if len(self._last) > MAX_PRODUCERS:
                gone, _ = self._last.popitem(last=False)
                self._offsets.pop(gone, None)
        recent = self._offsets.get(producer)
        if recent is None:
            recent = self._offsets[producer] = RecentOffsets(RECENT)
        recent.add(sequence, offset)
        self._next, self._recent = sequence + 1, recent  # `_newest` is `producer` now
        return None

    def _original_of_entry(self, message: StoredMessage, last: int, offset: int) -> int | None:
        """`original_offset` for an item standing for the messages stamped up to `last`, one
        record each (their first at `offset`)."""
        count = int(message.properties[RECORDS])
        first = last - count + 1
        producer = message.producer
        if not (first == self._next and producer == self._newest):
            passed = self._last.get(producer)
            if passed is not None and last <= passed:
                recent = self._offsets.get(producer)
                return -1 if recent is None else recent.offset_of(first)
            if passed is not None and first <= passed:
                # never seen: an entry is resent as it was sent, never overlapping another
                log.warning(
                    "%s: entry %s stamped %d-%d overlaps sequences passed up to %d",
                    producer,
                    message.id,
                    first,
                    last,
                    passed,
                )
                skip = passed + 1 - first
                first, offset, count = first + skip, offset + skip, count - skip
            # new: the first on its own, with the look-ups, the rest as its run
            self.original_offset(message._replace(properties={SEQ: str(first)}), offset)
            if count == 1:
                return None
            first, offset, count = first + 1, offset + 1, count - 1
        self._last[producer] = last
        self._next = last + 1
        assert self._recent is not None  # set by the message before, of the same producer
        self._recent.add_run(first, offset, count)
        return None

    def snapshot(self) -> dict[str, int]:
        return dict(self._last)

    def last_of(self, producer: str) -> int | None:
        """The last sequence passed for `producer` (None: none yet); nothing is recorded."""
        return self._last.get(producer)


class _FirstIds:
    """One producer's recently seen sequences, ascending, each with the id of the message it
    was first seen on, in arrays: no Python object per remembered stamp. A queue's busy
    stretch used to leave about 200 bytes of small objects per stamp (tuple, strings, ids,
    dictionary node) spread over the small-object allocator's arenas, which then stayed
    pinned long after the filter was gone (docs/architecture.md, "Memory"); here a stamp
    costs 28 bytes in four buffers that go back to the system as a whole."""

    __slots__ = ("_most", "entries", "keep", "ledgers", "sequences", "slots")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._most = keep + keep // 4  # kept before the oldest are forgotten
        self.sequences = array("q")
        self.ledgers = array("q")
        self.entries = array("q")
        self.slots = array("i")  # batch index, -1 for an unbatched message

    def first_id(self, sequence: int, message_id: MessageKey) -> MessageKey | None:
        """The id `sequence` was first seen with; None when it is new (then remembered with
        `message_id`). Only the `keep` highest sequences are remembered: a resend copies a
        message the producer sent shortly before, so an old one is never asked for again."""
        sequences = self.sequences
        index = len(sequences)
        if index and sequences[-1] >= sequence:  # out of order, or seen: search
            index = bisect.bisect_left(sequences, sequence)
            if sequences[index] == sequence:
                return (self.ledgers[index], self.entries[index], self.slots[index])
        ledger, entry, slot = message_id
        if index == len(sequences):  # the usual case, the next stamp: appended
            sequences.append(sequence)
            self.ledgers.append(ledger)
            self.entries.append(entry)
            self.slots.append(slot)
        else:
            sequences.insert(index, sequence)
            self.ledgers.insert(index, ledger)
            self.entries.insert(index, entry)
            self.slots.insert(index, slot)
        if len(sequences) > self._most:  # forget in one slice (amortised)
            drop = len(sequences) - self.keep
            for column in (sequences, self.ledgers, self.entries, self.slots):
                del column[:drop]
        return None


class ResendCopies:
    """For a queue's Shared subscription, where the same message comes again after a
    reconnect (unacknowledged, same id) and messages arrive out of order: a message is a
    resend copy when the (producer, sequence) it carries was seen on a message with a
    different id. Remembers the `recent` highest sequences of each of the `MAX_QUEUE_PRODUCERS`
    producers seen last: resends come within the send timeout, from a producer still at work.
    """

    def __init__(self, recent: int = RECENT) -> None:
        self.recent = recent
        self._producers: OrderedDict[str, _FirstIds] = OrderedDict()  # least recent first
        # the producer asked about last (the most recent in `_producers`) and its ids:
        # message after message of one producer, no look-up and no reordering
        self._newest = ""
        self._newest_ids: _FirstIds | None = None

    def is_copy(self, producer: str, properties: dict[str, str], message_id: MessageKey) -> bool:
        sequence = stamp_of(properties)
        if sequence is None or not producer:
            return False
        return self.is_copy_stamped(producer, sequence, message_id)

    def is_copy_stamped(self, producer: str, sequence: int, message_id: MessageKey) -> bool:
        """`is_copy` for a message whose stamp is known already (`sequence`, not negative)."""
        if not producer:
            return False
        seen = self._newest_ids
        if seen is None or producer != self._newest:
            seen = self._producer_ids(producer)
        first = seen.first_id(sequence, message_id)
        return first is not None and first != message_id

    def _producer_ids(self, producer: str) -> _FirstIds:
        """The producer's ids, made the most recent."""
        seen = self._producers.get(producer)
        if seen is None:
            # the dictionary keeps this first name object: pulsar-client builds a new equal
            # string per message, which is then looked up and dropped
            seen = self._producers[producer] = _FirstIds(self.recent)
            if len(self._producers) > MAX_QUEUE_PRODUCERS:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(producer)
        self._newest, self._newest_ids = producer, seen
        return seen
