"""The two message shapes that cross the seam between handlers and Pulsar.

Handlers never see pulsar-client objects: they hand over `OutMessage`s and get
`StoredMessage`s back, so protocol code stays testable without a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

# (ledger_id, entry_id, batch_index): Pulsar's order of messages within one topic.
MessageKey = tuple[int, int, int]


@dataclass(slots=True)
class OutMessage:
    payload: bytes | None
    key: str | None = None
    properties: dict[str, str] | None = None
    event_time: int = 0


class StoredMessage(NamedTuple):
    id: MessageKey
    payload: bytes | None
    key: str
    properties: dict[str, str]
    event_time: int
    publish_time: int
    producer: str = ""

    @property
    def size(self) -> int:
        return len(self.payload or b"") + len(self.key) + 16


# A message that holds several log records (a Kafka record batch stored as sent) says
# how many; it takes that many offsets. Messages without it hold one.
RECORDS = "__gw.records"


def records_in(message: StoredMessage) -> int:
    count = message.properties.get(RECORDS)
    return int(count) if count else 1


# The gateway's sequence stamp on each message it writes (resend_filter.py); one ending in
# MORE is not the last of the Kafka record batch it was written with (docs/offsets.md,
# "A batch is numbered whole").
SEQ = "__gw.seq"
MORE = "+"


# On a message the partition tailer made of a whole batched entry this gateway wrote (the
# Kafka batch as produced, its records the entry's messages from batch index 0 on): the
# item stands for every message of its Pulsar entry, one offset each (docs/offsets.md,
# "A batch the gateway wrote is numbered as one"). Never stored: the tailer's own mark.
WHOLE_ENTRY = "__gw.entry"


def last_id(message: StoredMessage) -> MessageKey:
    """The id of the last Pulsar message `message` stands for: its own, or for a whole
    entry (`WHOLE_ENTRY`) that of the entry's last message."""
    mid = message.id
    if WHOLE_ENTRY not in message.properties:
        return mid
    return (mid[0], mid[1], mid[2] + int(message.properties[RECORDS]) - 1)


def ends_no_batch(message: StoredMessage) -> bool:
    """Whether more of the Kafka batch that `message` belongs to follows it."""
    stamp = message.properties.get(SEQ)
    return stamp is not None and stamp.endswith(MORE)


class ProducedBatch(NamedTuple):
    """A Kafka record batch as produced, whose records are the messages of one send (one
    each), and the properties an item standing for all of them carries (its record count,
    the stamps numbering reads): how the tailer may number it as one (`WHOLE_ENTRY`)."""

    raw: bytes | memoryview
    properties: dict[str, str]


# What a partition's reads from storage may make of a whole batched entry instead of its
# messages: (entry id with batch index 0, payload uncompressed, message count, publish
# time, producer name) -> one message standing for them all, or None to split the entry.
WholeEntry = Callable[[MessageKey, bytes, int, int, str], "StoredMessage | None"]


class LogEntry(NamedTuple):
    """A message of a partition log and the offset of its first record."""

    offset: int
    message: StoredMessage


class PrebuiltEntry(NamedTuple):
    """A produced Kafka batch's records as the payload of ONE Pulsar batched entry, built in
    one pass from the batch's bytes (kafka_codec/record_entry.py), but for what only the
    writer knows: each message's size word and first field, its `__gw.seq` stamp, and the
    properties an idempotent producer's stamps add (`RecordMessages.with_added`), which
    native_writer.prebuilt_entry writes before each message's `rests` item, after its own
    properties. A message each: `owns`, its own properties (the messages that have the
    same share one object: the writer makes a format per distinct one); `rests`, the rest
    of its single-message metadata (its payload size field last); `payloads`, its payload.
    `size`: the bytes of `payloads`."""

    owns: list[bytes]
    rests: list[bytes]
    payloads: list[bytes]
    size: int


class RecordMessages(Sequence[OutMessage]):
    """The messages a produced Kafka batch's records become, one each, made only when
    something looks at them: the Produce path of the `pulsar` entry format hands the
    writer a prebuilt entry (`PrebuiltEntry`) instead, and the gateway then makes no
    Python object per record (docs/pulsar-protocol.md, "One pass").

    Whatever looks at a message (indexing, iterating, slicing) gets the made messages and
    may change them (a transaction's stamp), so from then on the prebuilt entry is no
    longer offered: `take_prebuilt` answers None and the writer builds from the messages.
    `len` and `payload_bytes` look at nothing."""

    __slots__ = ("_count", "_make", "_made", "_prebuilt", "payload_bytes", "added", "added_first")

    def __init__(
        self,
        count: int,
        make: Callable[[], list[OutMessage]],
        prebuilt: PrebuiltEntry | None,
        payload_bytes: int,
    ) -> None:
        self._count = count
        self._make = make
        self._made: list[OutMessage] | None = None
        self._prebuilt = prebuilt
        self.payload_bytes = payload_bytes  # the values' bytes, all records
        # properties added after each message's own (`with_added`), and to the first only
        self.added: dict[str, str] = {}
        self.added_first: dict[str, str] = {}

    @classmethod
    def of(cls, messages: list[OutMessage]) -> RecordMessages:
        """Messages already made (nothing prebuilt)."""
        made = cls(len(messages), list, None, sum(len(m.payload or b"") for m in messages))
        made._made = messages
        return made

    def with_added(self, added: dict[str, str], first: dict[str, str]) -> RecordMessages:
        """These messages with `added` after each one's own properties and `first` after
        those on the first (an idempotent producer's stamps, storage/kafka/producer_state):
        copies, as made, these left as they are; the prebuilt entry moves to the copy."""
        original = self

        def make() -> list[OutMessage]:
            out = []
            for index, message in enumerate(original.made()):
                properties = {**(message.properties or {}), **added}
                if index == 0:
                    properties.update(first)
                out.append(OutMessage(message.payload, message.key, properties, message.event_time))
            return out

        copy = RecordMessages(self._count, make, self.take_prebuilt(), self.payload_bytes)
        copy.added = {**self.added, **added}
        copy.added_first = {**self.added_first, **first}
        return copy

    @property
    def looked_at(self) -> bool:
        """Whether the messages were made (and so handed out)."""
        return self._made is not None

    def made(self) -> list[OutMessage]:
        """The messages, made now if not yet."""
        if self._made is None:
            self._made = self._make()
            self._prebuilt = None
        return self._made

    def take_prebuilt(self) -> PrebuiltEntry | None:
        """The prebuilt entry, once, while no message was looked at."""
        prebuilt, self._prebuilt = self._prebuilt, None
        return None if self._made is not None else prebuilt

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> OutMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[OutMessage]: ...

    def __getitem__(self, index: int | slice) -> OutMessage | list[OutMessage]:
        return self.made()[index]

    def __iter__(self) -> Iterator[OutMessage]:
        return iter(self.made())


def payload_bytes(messages: Sequence[OutMessage]) -> int:
    """The payloads' bytes of `messages`, without making `RecordMessages` look."""
    if isinstance(messages, RecordMessages):
        return messages.payload_bytes
    return sum(len(m.payload or b"") for m in messages)
