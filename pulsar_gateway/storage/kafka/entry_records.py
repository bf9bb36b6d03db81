"""A batched Pulsar entry the gateway wrote, read back as its Kafka records in one pass, for
readers that want records, not Kafka batches (parity's in-order walk: docs/tools.md, "How
parity compares").

Read message by message, each record cost a `StoredMessage`, a resend filter look-up and
`records_of`'s mapping: about 26 µs a record with the split of the entry (measured on Nov
29; the split is about 7.5 of them). Here the split messages go straight to records, and
the entry takes ONE item standing for all of them (`messages.WHOLE_ENTRY`, as the tailer
takes an entry it wrote), so the resend filter looks once per entry.

Only the gateway's plain case is taken: every message carries the gateway's `__gw.seq`
stamp, the stamps count up by one (one Kafka batch, written whole), and no message holds
more than one record (a compressed batch's records, marked with the producer's codec, are
plain too: a migration copies batches as the source stored them). A message with the
mapping's own properties (a binary key, headers that are not plain properties or not in
name order) is mapped by `records_of` itself, so the records are what the message path
gives (a property test compares them). Anything else gives None and the entry is read
message by message as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_gateway.gateway.backend.resend_filter import stamp_of
from pulsar_gateway.gateway.backend.wire.batch import SingleMessage, split_batch
from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.messages import (
    RECORDS,
    SEQ,
    WHOLE_ENTRY,
    LogEntry,
    MessageKey,
    StoredMessage,
)
from pulsar_gateway.kafka_codec.entry_format import BATCH, records_of
from pulsar_gateway.kafka_codec.record_mapping import (
    GATEWAY_RESERVED,
    HEADER_ORDER,
    HEADERS,
    KEY_B64,
    RESERVED,
)
from pulsar_gateway.storage.kafka.entry_records_fast import plain_entry_records

# (key, value, headers, timestamp): a record without its offset, which the reader gives
EntryRecord = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]
# the mapping's properties `records_of` reads (a message with one is mapped by it), and
# those that make a message more than one record (not the plain case); any other reserved
# property (the producer's codec, a transaction's mark) `records_of` passes over
_MAPPED = frozenset({KEY_B64, HEADERS, HEADER_ORDER})
_NOT_PLAIN = frozenset({BATCH, RECORDS})
_PREFIXES = (RESERVED, GATEWAY_RESERVED)


def entry_records(
    data: bytes, count: int, publish_time: int, producer: str
) -> tuple[int, int, list[EntryRecord]] | None:
    """The records of a batched entry's `count` messages (payload `data`, uncompressed),
    with the first and last messages' stamps; None when it is not the plain case."""
    fast = plain_entry_records(data, count, publish_time)
    if fast is not None:
        return fast  # the writer's common case, read without splitting the entry first
    try:
        messages = split_batch(data, count)
    except DecodeError:
        return None  # the message path says why
    out: list[EntryRecord] = []
    append = out.append
    first = stamp_of(messages[0].properties) if messages else None
    if first is None:
        return None
    expected = first
    for message in messages:
        properties = message.properties
        stamp = properties.get(SEQ)
        if stamp is None:
            return None
        if stamp[-1] == "+":
            stamp = stamp[:-1]
        if stamp != str(expected):
            return None
        expected += 1
        headers: list[tuple[str, bytes | None]] = []
        if len(properties) > 1:
            mapped = False
            for name in properties:
                if name.startswith(_PREFIXES):
                    if name in _NOT_PLAIN:
                        return None
                    mapped = mapped or name in _MAPPED
            if mapped:
                append(_mapped(message, publish_time))
                continue
            # the gateway's other stamps (the producer's codec, its own sequence) are no
            # headers, as `records_of` skips them
            headers = [
                (n, v.encode())
                for n, v in sorted(properties.items())
                if not n.startswith(_PREFIXES)
            ]
        key = message.key
        append(
            (
                key.encode() if key else None,
                message.payload,
                headers,
                message.event_time or publish_time,
            )
        )
    return first, expected - 1, out


def _mapped(message: SingleMessage, publish_time: int) -> EntryRecord:
    """A message with the mapping's own properties, mapped as the message path maps it."""
    stored = StoredMessage(
        (0, 0, 0),
        message.payload,
        message.key or "",
        message.properties,
        message.event_time,
        publish_time,
    )
    (record,) = records_of(LogEntry(0, stored))
    return record.key, record.value, list(record.headers), record.timestamp


@dataclass
class EntryRecords:
    """A `WholeEntry` for a reader (`NativeReaderStream.read_batch(whole=...)`): each plain
    batched entry becomes one item standing for its messages (`WHOLE_ENTRY`, with the count
    and the last stamp, as the resend filter reads it); its records wait here, by the
    item's id, until `take` hands them out."""

    waiting: dict[MessageKey, list[EntryRecord]] = field(default_factory=dict)

    def __call__(
        self, mid: MessageKey, data: bytes, count: int, publish_time: int, producer: str
    ) -> StoredMessage | None:
        found = entry_records(data, count, publish_time, producer)
        if found is None:
            return None
        _, last, records = found
        self.waiting[mid] = records
        properties = {RECORDS: str(len(records)), SEQ: str(last), WHOLE_ENTRY: "1"}
        return StoredMessage(mid, None, "", properties, 0, publish_time, producer)

    def take(self, item: StoredMessage) -> list[EntryRecord] | None:
        """The records `item` stands for (None: an ordinary message)."""
        return self.waiting.pop(item.id, None)
