"""Idempotent producers' state in one partition, read back from the log itself.

Kafka rebuilds its producer state from the log and its producer snapshots; so does the
gateway. Every message of an idempotent batch is stamped `producer:epoch:first:last`
(`PRODUCER`), and the first message of each send also with how many of the batch's records
came before it (`FROM`: 0, or where a retry resumes a batch cut short). The tailer shows every
message it numbers to a `ProducerStateIndex`, which keeps per producer id its epoch, its last
five batches stored whole (each with its base offset) and the batch begun but not yet whole.

A batch is several messages in the `pulsar` entry format, and a gateway killed while sending
one leaves a prefix of it in the log. Kafka appends a batch whole or not at all, so the retry
must not store that prefix again: `PartitionLog.append` sends only the records after it, and
answers the prefix's base offset (`resume_from`). A retry of a batch stored whole is answered
its base offset without storing anything.

No metadata write is added to a Produce: the index is saved with each offset checkpoint
(docs/offsets.md, 'Checkpoints'), and a reopened partition restores it from the last
checkpoint and replays the messages after it, as it does for its offsets.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pulsar_gateway.gateway.messages import (
    RECORDS,
    OutMessage,
    ProducedBatch,
    RecordMessages,
    StoredMessage,
    records_in,
)
from pulsar_gateway.handlers.kafka.port import ProducerBatch, ProducerSnapshot, ProducerStamp
from pulsar_gateway.kafka_codec.control_batch import TXN
from pulsar_gateway.kafka_codec.entry_format import BATCH

PRODUCER = "__kafka.producer"  # on every message of an idempotent batch
FROM = "__kafka.producer.from"  # on the first message of a send: the batch's records before it
KEEP_BATCHES = 5  # as Kafka: max.in.flight.requests.per.connection for idempotence
MAX_PRODUCERS = 1000  # per partition; the least recently seen is forgotten beyond it
SEQUENCE_WRAP = 1 << 31


def stamp(
    messages: Sequence[OutMessage], producer: ProducerStamp, skip: int = 0
) -> Sequence[OutMessage]:
    """The messages of one idempotent batch after its first `skip` records, stamped (copies:
    the caller's messages and their properties are left as they were). A produced batch's
    messages not made yet stay so, the stamps noted for the writer's one pass
    (`RecordMessages.with_added`, docs/pulsar-protocol.md "One pass")."""
    value = (
        f"{producer.producer_id}:{producer.epoch}:"
        f"{producer.first_sequence}:{producer.last_sequence}"
    )
    if isinstance(messages, RecordMessages) and not skip and not messages.looked_at:
        return messages.with_added({PRODUCER: value}, {FROM: "0"})
    out: list[OutMessage] = []
    before = 0
    for message in messages:
        records = int((message.properties or {}).get(RECORDS, 1))
        if before >= skip:
            properties = {**(message.properties or {}), PRODUCER: value}
            if not out:
                properties[FROM] = str(before)
            out.append(replace(message, properties=properties))
        before += records
    return out


def produced(messages: Sequence[OutMessage], encoded: bytes | memoryview) -> ProducedBatch:
    """The Kafka batch `encoded`, whose records are `messages` (one each), with what an item
    standing for all of them carries (messages.WHOLE_ENTRY): the record count and the stamps
    the tailer numbers by, the same on every message (an idempotent producer's, a
    transaction's) but `FROM`, on the first only. The writer adds `__gw.seq`."""
    properties = {BATCH: "2", RECORDS: str(len(messages))}
    # messages not made yet hold no stamps but those `stamp` noted on them (a transaction's
    # makes them)
    if isinstance(messages, RecordMessages) and not messages.looked_at:
        first: dict[str, str] | None = {**messages.added, **messages.added_first}
    else:
        first = messages[0].properties
    if first:
        for name in (PRODUCER, FROM, TXN):
            value = first.get(name)
            if value is not None:
                properties[name] = value
    return ProducedBatch(encoded, properties)


def _parse(value: str) -> tuple[int, int, int, int]:
    producer_id, epoch, first, last = value.split(":")
    return int(producer_id), int(epoch), int(first), int(last)


@dataclass
class _Begun:
    """A batch whose first records are numbered and its last not yet."""

    first: int
    last: int
    base_offset: int
    stored: int = 0  # records numbered so far

    @property
    def whole(self) -> bool:
        return self.stored >= (self.last - self.first) % SEQUENCE_WRAP + 1


@dataclass
class _Producer:
    epoch: int
    batches: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))
    begun: _Begun | None = None


class ProducerStateIndex:
    """Producer id -> epoch, last batches stored whole, and the batch begun but not whole."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        # the batch the last stamped message belonged to: the next is most likely its next
        self._last_value: str | None = None
        self._last_begun: _Begun | None = None
        self._last_producer: _Producer | None = None
        for key, saved in (state or {}).items():
            producer = _Producer(saved["epoch"])
            producer.batches.extend(ProducerBatch(*batch) for batch in saved["batches"])
            if saved.get("begun"):
                producer.begun = _Begun(*saved["begun"])
            self._producers[int(key)] = producer

    def observe(self, message: StoredMessage, offset: int) -> None:
        """Learn from a message numbered `offset` (its first record's offset)."""
        properties = message.properties
        value = properties.get(PRODUCER)
        if value is None:
            return
        start = properties.get(FROM)
        if start is not None or value != self._last_value:
            self._last_value = value
            self._last_begun, self._last_producer = self._begin(value, start, offset)
        begun, producer = self._last_begun, self._last_producer
        if begun is None or producer is None or producer.begun is not begun:
            return  # a fenced epoch, or records of a batch not begun where they fit
        begun.stored += records_in(message)
        if begun.whole:
            producer.batches.append(ProducerBatch(begun.first, begun.last, begun.base_offset))
            producer.begun = None

    def _begin(
        self, value: str, start: str | None, offset: int
    ) -> tuple[_Begun | None, _Producer | None]:
        """The batch a send's first message (or a stray continuation) belongs to."""
        producer_id, epoch, first, last = _parse(value)
        producer = self._current(producer_id, epoch)
        if producer is None:
            return None, None
        if start == "0":
            # a batch from its first record (an earlier one left unfinished is abandoned)
            producer.begun = _Begun(first, last, offset)
            return producer.begun, producer
        begun = producer.begun
        if begun is None or (begun.first, begun.last) != (first, last):
            return None, producer  # the rest of a batch that was never begun: not counted
        if start is not None and start != str(begun.stored):
            return None, producer  # resumes elsewhere than where the batch was left
        return begun, producer

    def _current(self, producer_id: int, epoch: int) -> _Producer | None:
        """The producer's state at `epoch` (a newer epoch starts it afresh); None for a
        message of an epoch already fenced off."""
        producer = self._producers.get(producer_id)
        if producer is None or epoch > producer.epoch:
            producer = self._producers[producer_id] = _Producer(epoch)
            if len(self._producers) > MAX_PRODUCERS:
                self._producers.popitem(last=False)
        elif epoch < producer.epoch:
            return None
        self._producers.move_to_end(producer_id)
        return producer

    def ids(self) -> list[int]:
        return list(self._producers)

    def get(self, producer_id: int) -> ProducerSnapshot | None:
        producer = self._producers.get(producer_id)
        if producer is None:
            return None
        return ProducerSnapshot(producer.epoch, tuple(producer.batches))

    def stored(self, batch: ProducerStamp) -> int | None:
        """The base offset of `batch` if the log holds it whole."""
        producer = self._producers.get(batch.producer_id)
        if producer is None or producer.epoch != batch.epoch:
            return None
        for kept in producer.batches:
            if (kept.first_sequence, kept.last_sequence) == (
                batch.first_sequence,
                batch.last_sequence,
            ):
                return kept.base_offset
        return None

    def resume_from(self, batch: ProducerStamp) -> tuple[int, int] | None:
        """(base offset, records stored) of `batch` if the log holds a prefix of it only."""
        producer = self._producers.get(batch.producer_id)
        begun = producer.begun if producer is not None else None
        if (
            producer is None
            or begun is None
            or producer.epoch != batch.epoch
            or (begun.first, begun.last) != (batch.first_sequence, batch.last_sequence)
        ):
            return None
        return begun.base_offset, begun.stored

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON values, for a checkpoint; `ProducerStateIndex(it)` again."""
        return {
            str(producer_id): {
                "epoch": producer.epoch,
                "batches": [
                    [b.first_sequence, b.last_sequence, b.base_offset] for b in producer.batches
                ],
                "begun": _begun_fields(producer.begun),
            }
            for producer_id, producer in self._producers.items()
        }


def _begun_fields(begun: _Begun | None) -> list[int] | None:
    if begun is None:
        return None
    return [begun.first, begun.last, begun.base_offset, begun.stored]
