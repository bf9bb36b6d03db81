"""The messages this gateway published to its queues, kept a while by the entry that stores
them, so that its queue reader, receiving that entry, takes them as they were built instead
of splitting the entry and decoding every message again (docs/backend.md, "Published
entries kept for the queue reader").

Splitting a batched entry and making each message's `AmqpMessage` back from its properties
was about a fifth of the gateway's CPU per consumed message (`bench/amqp_throughput.py`,
consume phase). A vhost's publishes and its queue readers are on one gateway (its owner),
so the reader of a queue mostly gets the entries this process wrote.

Kept by stored entry id (ledger, entry: the send's receipt), once every entry of the send
is stored; bounded in bytes per queue and in all (a message is counted as its body plus
`MESSAGE_OVERHEAD`), the oldest dropped first. An entry is handed out once and forgotten
then; it is not used (only forgotten) when its message count is not the one stored, and
the queue consumer decodes redelivered entries as usual (native_queue_consumer.py). A
consumer attached while messages are published may receive an entry before the send's
receipt is read (docs/backend.md, "Copies before receipts"; a fifth to a third of the
entries of a consumer keeping up with its publisher): such an entry, asked for and missed, is
remembered a while (`MAX_MISSED` entries) and not kept when its receipt comes, or it would
sit here unused until pushed out. What
is handed out is what decoding gives: `stored_fields` takes, at publish, the very fields
`store._amqp_message` reads back (tests/unit/test_amqp_published_entries.py checks them
equal). The resend filter still sees every message's stamp.

A message is kept as a tuple of its fields, not as the `AmqpMessage`, which is made when
the entry is taken (about 0.1 µs): an object with slots stays tracked by the garbage
collector, and 200,000 of them kept through the benchmark's publish phase made its middle
and full passes walk them again and again (0.4 s more collection over the run, ~1 µs a
message); a tuple of strings, bytes and numbers is untracked at its first pass.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from pulsar_gateway.gateway.backend.native_writer import StoredEntry
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage

# an `AmqpMessage`'s fields, in order: kept as a tuple of atomic values, which the garbage
# collector stops tracking, rather than as the object, which it would walk on every pass
StoredFields = tuple[str, str, bytes, bytes, bool, int | None, int, int]

# what a kept message costs beside its body's octets: its tuple of fields (112 bytes), the
# body's `bytes` header and rounding (~40), its timestamp `int` (32) and its share of the
# entry's tuple: ~190 bytes traced for a 100-byte body, rounded up for the allocator's
# partly used pools
MESSAGE_OVERHEAD = 256
MAX_BYTES = 64 * 1024 * 1024  # kept in all
MAX_QUEUE_BYTES = 16 * 1024 * 1024  # kept for one queue (its topic)
# entries asked for before they were kept (received before their send's receipt was read),
# remembered so that they are not kept then: this many at most, the oldest forgotten first
MAX_MISSED = 4096


def stored_fields(message: AmqpMessage, timestamp_ms: int) -> StoredFields:
    """The fields of the `AmqpMessage` a queue reader decodes from what
    `PulsarAmqpStore.publish` stores (`timestamp_ms`: the acceptance time stored with it).
    A body that is not exact `bytes` is copied: a view would keep the buffer it slices."""
    body = message.body
    return (
        message.exchange,
        message.routing_key,
        message.properties_raw or b"\x00\x00",
        body if type(body) is bytes else bytes(body),
        bool(message.persistent),
        message.expiration_ms,
        timestamp_ms,
        message.priority or 0,
    )


class _Kept:
    __slots__ = ("first_stamp", "messages", "size")

    def __init__(self, first_stamp: int, messages: tuple[StoredFields, ...], size: int) -> None:
        self.first_stamp = first_stamp
        self.messages = messages
        self.size = size


class PublishedEntries:
    """Entries published to queue topics, by topic and entry id (see the module)."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_queue_bytes: int = MAX_QUEUE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_queue_bytes = max_queue_bytes
        self._topics: dict[str, OrderedDict[tuple[int, int], _Kept]] = {}
        self._topic_bytes: dict[str, int] = {}
        self._order: OrderedDict[tuple[str, int, int], None] = OrderedDict()  # oldest first
        self._missed: dict[tuple[str, int, int], None] = {}  # oldest first
        self.bytes = 0
        self.hits = 0  # entries handed out
        self.dropped = 0  # entries forgotten unused (bounds, count mismatch, redelivery)

    def __len__(self) -> int:
        return len(self._order)

    def add(
        self, topic: str, messages: Sequence[StoredFields], entries: Sequence[StoredEntry]
    ) -> None:
        """`messages`, sent to `topic` in one send, were stored as `entries` (every entry of
        the send, in order). Nothing is kept when they do not add up to the messages."""
        if sum(entry.num_messages for entry in entries) != len(messages):
            return
        kept = self._topics.get(topic)
        if kept is None:
            kept = self._topics[topic] = OrderedDict()
            self._topic_bytes[topic] = 0
        missed = self._missed
        start = 0
        added = 0
        for entry in entries:
            end = start + entry.num_messages
            key = (entry.ledger_id, entry.entry_id)
            if missed and (topic, *key) in missed:
                del missed[(topic, *key)]  # received already, before the receipt was read
            elif entry.batched and key not in kept:
                part = tuple(messages[start:end])
                size = sum(len(m[3]) for m in part) + MESSAGE_OVERHEAD * len(part)
                kept[key] = _Kept(entry.first_stamp, part, size)
                self._order[(topic, *key)] = None
                added += size
            start = end
        if not kept:  # nothing batched: no entry to hand out
            del self._topics[topic], self._topic_bytes[topic]
            return
        self.bytes += added
        self._topic_bytes[topic] += added
        while self._topic_bytes.get(topic, 0) > self.max_queue_bytes:
            ledger, entry_id = next(iter(kept))
            self._drop(topic, ledger, entry_id)
        while self.bytes > self.max_bytes:
            self._drop(*next(iter(self._order)))

    def take(
        self, topic: str, ledger: int, entry_id: int, count: int
    ) -> tuple[int, list[AmqpMessage]] | None:
        """The entry's first stamp and messages (made anew), forgotten here; None when it
        is not kept, or not with `count` messages."""
        kept = self._topics.get(topic)
        found = None if kept is None else kept.pop((ledger, entry_id), None)
        if found is None:
            missed = self._missed
            missed[(topic, ledger, entry_id)] = None
            if len(missed) > MAX_MISSED:
                del missed[next(iter(missed))]
            return None
        del self._order[(topic, ledger, entry_id)]
        self._forget(topic, found.size)
        if len(found.messages) != count:
            self.dropped += 1
            return None
        self.hits += 1
        return found.first_stamp, [AmqpMessage(*fields) for fields in found.messages]

    def forget(self, topic: str) -> None:
        """The queue was deleted or made afresh: none of its entries is kept."""
        kept = self._topics.get(topic)
        if kept is None:
            return
        for ledger, entry_id in list(kept):
            self._drop(topic, ledger, entry_id)

    def _drop(self, topic: str, ledger: int, entry_id: int) -> None:
        found = self._topics[topic].pop((ledger, entry_id))
        del self._order[(topic, ledger, entry_id)]
        self.dropped += 1
        self._forget(topic, found.size)

    def _forget(self, topic: str, size: int) -> None:
        self.bytes -= size
        left = self._topic_bytes[topic] - size
        if left or self._topics[topic]:
            self._topic_bytes[topic] = left
        else:
            del self._topic_bytes[topic]
            del self._topics[topic]
