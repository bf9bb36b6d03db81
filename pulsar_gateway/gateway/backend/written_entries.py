"""What this gateway wrote through the wire client, kept until its own reader meets it
(`pulsar.client = "native"`, docs/pulsar-protocol.md, "Reading back what we wrote").

Every record the gateway stores is numbered by the partition's tailer, which reads the
topic in order: the one place where offsets are given, so they stay dense and stable
whoever wrote the messages. Reading back its own batched entries used to be half of the
gateway's produce time: each entry parsed back into its messages (`wire.batch.split_batch`)
though the gateway had built them a moment before. Here the writer records, for each
batched entry, the messages it built it from, under the name of the producer and the
sequence id that producer gave the entry, both of which the broker stores in the entry's
metadata. The reader looks an entry up by those two before splitting it; when found (and
holding as many messages) it makes the `StoredMessage`s from the record, exactly what
splitting would give, and skips the parse. Anything else (another writer's entry, an entry
met after its record was dropped, a history read) is split as before.

A producer name and sequence id never stand for two entries: each writer's producers are
named after it (`gw-<writer>.native`, a fresh writer id per process) and a successor under
the same name continues the sequence ids (`NativeSender._producer`). Records are taken when
read; what is never read (a partition closed first) goes, oldest first, once more than
`max_messages` messages or `max_bytes` of entries are kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from pulsar_gateway.gateway.messages import (
    MORE,
    SEQ,
    WHOLE_ENTRY,
    OutMessage,
    ProducedBatch,
    StoredMessage,
)

# What is kept at most, in messages and in the entries' bytes: well over what the tailers
# lag behind the receipts (a note dropped costs only the parse it would have saved).
MAX_KEPT_MESSAGES = 500_000
MAX_KEPT_BYTES = 64 * 1024 * 1024


class WrittenEntry(NamedTuple):
    """One batched entry as the writer built it: its messages and their `__gw.seq`
    stamps, `first_sequence` on, marked "more follows" when `whole` (all but the last
    message of the Kafka batch; `ends_batch`: the entry's last message is the batch's).
    `produced`: the Kafka batch as produced when the entry holds every record of it."""

    messages: Sequence[OutMessage]
    first_sequence: int
    whole: bool
    ends_batch: bool
    produced: ProducedBatch | None = None

    def as_one(
        self, ledger: int, entry: int, publish_time: int, producer: str
    ) -> StoredMessage | None:
        """The entry as ONE item standing for all its messages (`WHOLE_ENTRY`): the Kafka
        batch as produced, its first message's id, the last message's `__gw.seq` stamp and
        the batch's own properties; None when the entry does not hold a whole produced batch.
        What the tailer numbers with one look at the stamps and caches as one item, where
        `stored` makes a message per record (docs/offsets.md, "A batch the gateway wrote
        is numbered as one")."""
        produced = self.produced
        if produced is None:
            return None
        last = self.first_sequence + len(self.messages) - 1
        properties = dict(produced.properties)
        properties[SEQ] = f"{last}{MORE}" if self.whole and not self.ends_batch else str(last)
        properties[WHOLE_ENTRY] = "1"
        raw = produced.raw
        if not isinstance(raw, bytes):
            # a view of a whole `bytes` (the copy the produce decode made of the batch,
            # record_batch.decode_batches) is kept as that object: no second copy
            whole = raw.obj
            raw = whole if type(whole) is bytes and len(whole) == raw.nbytes else bytes(raw)
        return StoredMessage(
            (ledger, entry, 0),
            raw,
            "",
            properties,
            0,
            publish_time,
            producer,
        )

    def stored(
        self, ledger: int, entry: int, publish_time: int, producer: str
    ) -> list[StoredMessage]:
        """The entry's messages as a reader gets them (`native_reader.stored_messages`)."""
        out: list[StoredMessage] = []
        append = out.append
        make = tuple.__new__  # StoredMessage's own __new__ costs a call per message more
        cls = StoredMessage
        sequence = self.first_sequence
        marked = self.whole
        last = len(self.messages) - 1
        for index, message in enumerate(self.messages):
            more = marked and (index != last or not self.ends_batch)
            # the stamp is written before the record's own properties (native_writer._fields)
            properties = {SEQ: f"{sequence + index}{MORE}" if more else str(sequence + index)}
            if message.properties:
                properties.update(message.properties)
            event_time = message.event_time
            append(
                make(
                    cls,
                    (
                        (ledger, entry, index),
                        message.payload,
                        message.key or "",
                        properties,
                        event_time if event_time > 0 else 0,
                        publish_time,
                        producer,
                    ),
                )
            )
        return out


class WrittenEntries:
    """Written entries by (producer name, sequence id), oldest first, bounded."""

    def __init__(
        self, max_messages: int = MAX_KEPT_MESSAGES, max_bytes: int = MAX_KEPT_BYTES
    ) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        # (producer, sequence id) -> the note and the entry's size in bytes
        self._entries: OrderedDict[tuple[str, int], tuple[WrittenEntry, int]] = OrderedDict()
        self.messages = 0  # held in all entries
        self.bytes = 0  # the sizes of the entries held
        self.found = 0  # entries taken by a reader
        self.dropped = 0  # entries dropped unread to stay within the bounds

    def add(self, producer: str, sequence_id: int, written: WrittenEntry, size: int) -> None:
        """Note `written`, an entry of `size` bytes (its payload as sent)."""
        self._forget((producer, sequence_id))
        self._entries[(producer, sequence_id)] = (written, size)
        self.messages += len(written.messages)
        self.bytes += size
        while (self.messages > self.max_messages or self.bytes > self.max_bytes) and self._entries:
            self._forget(next(iter(self._entries)))
            self.dropped += 1

    def _forget(self, key: tuple[str, int]) -> WrittenEntry | None:
        held = self._entries.pop(key, None)
        if held is None:
            return None
        written, size = held
        self.messages -= len(written.messages)
        self.bytes -= size
        return written

    def take(self, producer: str, sequence_id: int, count: int) -> WrittenEntry | None:
        """The entry written under these names, if it holds `count` messages (taken out)."""
        written = self._forget((producer, sequence_id))
        if written is None or len(written.messages) != count:
            return None
        self.found += 1
        return written

    def __len__(self) -> int:
        return len(self._entries)
