"""The two message shapes that cross the seam between handlers and Pulsar.

Handlers never see pulsar-client objects: they hand over `OutMessage`s and get
`StoredMessage`s back, so protocol code stays testable without a broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

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
