"""The published messages kept for the queue reader (storage/amqp/published.py): what the
reader hands out from them equals what it decodes from the stored entries (a differential
test through the store's publish, the wire client's entry building and the wire queue
consumer); bounded per queue and in all, the oldest dropped first; an entry handed out once,
never on a count mismatch or a redelivery; a resend copy of a kept entry still dropped."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.native_queue_consumer import NativeQueueConsumer
from pulsar_gateway.gateway.backend.native_writer import StoredEntry, entries
from pulsar_gateway.gateway.backend.wire import ReceivedEntry
from pulsar_gateway.gateway.backend.wire.ids import MessageId
from pulsar_gateway.gateway.backend.wire.messages import MessageMetadata
from pulsar_gateway.gateway.messages import MessageKey, OutMessage
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.storage.amqp.published import (
    MAX_MISSED,
    MESSAGE_OVERHEAD,
    PublishedEntries,
    StoredFields,
    stored_fields,
)
from pulsar_gateway.storage.amqp.store import PulsarAmqpStore, _PulsarQueueReader

PRODUCER = "gw-test.batching"
LEDGER = 7


class Backend:
    """`PulsarBackend.send_queue_messages` in memory: the messages as the wire client's
    batched entries (stamped as it stamps them), stored at the next entry ids."""

    def __init__(self, limit: int = 300) -> None:
        self.limit = limit
        self.stored: list[tuple[MessageId, Any]] = []  # (id, OutgoingEntry), in order
        self.sequence = 0

    def send_queue_messages(
        self,
        topic: str,
        messages: list[OutMessage],
        stored: Callable[[list[StoredEntry]], None] | None = None,
    ) -> asyncio.Future[tuple[MessageKey, MessageKey]]:
        first = self.sequence + 1
        built = entries(messages, first, False, self.limit, None, False)
        self.sequence += len(messages)
        receipts = []
        stamp = first
        for entry in built:
            mid = MessageId(LEDGER, len(self.stored))
            self.stored.append((mid, entry))
            receipts.append(StoredEntry(*mid[:2], entry.num_messages, stamp, entry.batched))
            stamp += entry.num_messages
        if stored is not None:
            stored(receipts)
        future = asyncio.get_running_loop().create_future()
        future.set_result(((LEDGER, 0, 0), (LEDGER, 0, 0)))
        return future

    def received(self, redeliveries: int = 0) -> list[ReceivedEntry]:
        """Every stored entry as the broker delivers it."""
        out = []
        for mid, entry in self.stored:
            # the fields the producer stamps, then the entry's own (its properties when
            # unbatched, else its message count)
            metadata = MessageMetadata.decode(b"\x0a\x00\x10\x00\x18\x00" + entry.metadata_fields)
            metadata.producer_name = PRODUCER
            metadata.publish_time = 1000
            out.append(ReceivedEntry(mid, metadata, bytes(entry.payload), redeliveries))
        return out


class Wire:
    """The wire consumer a `NativeQueueConsumer` reads: hands out the entries given."""

    def __init__(self, entries: Iterable[ReceivedEntry]) -> None:
        self.entries = list(entries)
        self.acked: list[ReceivedEntry] = []

    async def receive_many(
        self, limit: int, timeout: float | None, max_messages: int = 0
    ) -> list[ReceivedEntry]:
        out, self.entries = self.entries, []
        return out

    def ack(self, items: Iterable[ReceivedEntry]) -> None:
        self.acked += items

    def flush_acks(self) -> None:
        pass

    async def close(self) -> None:
        pass


async def _nudge(topic: str, subscription: str) -> None:
    pass


def _store(backend: Backend, published_bytes: int = 1 << 20) -> PulsarAmqpStore:
    return PulsarAmqpStore(
        cast(Any, backend), cast(Any, None), batched_entries=True, published_bytes=published_bytes
    )


async def _publish(store: PulsarAmqpStore, messages: list[AmqpMessage]) -> None:
    await asyncio.gather(*(store.publish("/", ["q"], message) for message in messages))


async def _read(
    store: PulsarAmqpStore, received: list[ReceivedEntry], known: bool
) -> list[StoredDelivery]:
    consumer = NativeQueueConsumer(cast(Any, Wire(received)), "t", "amqp")
    if known:
        assert store.published is not None
        consumer.known = functools.partial(store.published.take, store.topic("/", "q"))
    reader = _PulsarQueueReader("q", consumer, _nudge)
    out: list[StoredDelivery] = []
    while batch := await reader.fetch(10_000, 0):
        out += batch
    return out


names = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
amqp_messages = st.builds(
    AmqpMessage,
    names,
    names,
    st.sampled_from([b"", b"\x00\x00", b"\x90\x00\x02\x0atext/plain"]) | st.binary(max_size=40),
    st.binary(max_size=300),
    st.booleans(),
    st.none() | st.integers(0, 10**9),
    st.integers(0, 2**41),
    st.integers(0, 255),
)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(amqp_messages, min_size=1, max_size=40))
def test_kept_messages_are_what_decoding_gives(messages: list[AmqpMessage]) -> None:
    async def run() -> None:
        backend = Backend()
        store = _store(backend)
        await _publish(store, messages)
        assert store.published is not None
        batched = sum(1 for _, entry in backend.stored if entry.batched)
        assert len(store.published) == batched
        decoded = await _read(store, backend.received(), known=False)
        kept = await _read(store, backend.received(), known=True)
        assert kept == decoded
        assert [d.message for d in kept] == [d.message for d in decoded]
        assert len(kept) == len(messages)
        assert store.published.hits == batched and len(store.published) == 0

    asyncio.run(run())


def test_a_redelivered_entry_is_decoded_and_forgotten() -> None:
    async def run() -> None:
        backend = Backend(limit=4096)
        store = _store(backend)
        await _publish(store, [AmqpMessage("", "q", b"\x00\x00", b"x" * 10)] * 5)
        assert store.published is not None and len(store.published) == 1
        out = await _read(store, backend.received(redeliveries=1), known=True)
        assert [d.message.body for d in out] == [b"x" * 10] * 5
        assert [d.redelivery_count for d in out] == [1] * 5
        assert store.published.hits == 0 and len(store.published) == 0

    asyncio.run(run())


def test_a_resend_copy_of_a_kept_entry_is_dropped() -> None:
    """The client's first send stored without a receipt (X), its resend stored with one (R,
    kept): R comes from the kept messages and is still known for the copy it is."""

    async def run() -> None:
        backend = Backend(limit=4096)
        store = _store(backend)
        await _publish(store, [AmqpMessage("", "q", b"\x00\x00", bytes([i])) for i in range(4)])
        [(mid, entry)] = backend.stored
        # the copy the broker stored first: the same entry at an earlier id, never receipted
        received = backend.received()
        copy = ReceivedEntry(MessageId(LEDGER - 1, 9), received[0].metadata, received[0].payload)
        out = await _read(store, [copy, *received], known=True)
        assert [d.message.body for d in out] == [bytes([i]) for i in range(4)]
        assert {cast(MessageKey, d.message_id)[:2] for d in out} == {(LEDGER - 1, 9)}
        assert store.published is not None and store.published.hits == 1

    asyncio.run(run())


def _messages(count: int, size: int) -> list[StoredFields]:
    return [stored_fields(AmqpMessage("", "q", b"\x00\x00", b"b" * size), 1) for _ in range(count)]


def _entry(entry_id: int, count: int, stamp: int = 1) -> StoredEntry:
    return StoredEntry(1, entry_id, count, stamp, True)


def test_bounded_per_queue_and_in_all_the_oldest_dropped_first() -> None:
    cost = 100 + MESSAGE_OVERHEAD  # one message of 100 bytes
    kept = PublishedEntries(max_bytes=5 * cost, max_queue_bytes=3 * cost)
    for entry_id in range(4):  # a, one message an entry: the fourth drops the first
        kept.add("a", _messages(1, 100), [_entry(entry_id, 1)])
    assert kept.bytes == 3 * cost and len(kept) == 3
    assert kept.take("a", 1, 0, 1) is None
    kept.add("b", _messages(2, 100), [_entry(0, 1), _entry(1, 1, 2)])  # 5 in all
    assert kept.bytes == 5 * cost
    kept.add("b", _messages(1, 100), [_entry(2, 1, 3)])  # 6: the oldest of all (a's) goes
    assert kept.bytes == 5 * cost
    assert kept.take("a", 1, 1, 1) is None
    assert kept.take("a", 1, 2, 1) is not None and kept.take("b", 1, 0, 1) is not None
    assert kept.bytes == 3 * cost
    kept.forget("b")
    assert kept.take("b", 1, 1, 1) is None and kept.take("b", 1, 2, 1) is None
    assert kept.take("a", 1, 3, 1) is not None
    assert kept.bytes == 0 and len(kept) == 0


def test_an_entry_is_handed_out_once_and_never_with_another_count() -> None:
    kept = PublishedEntries()
    messages = _messages(3, 10)
    kept.add("a", messages, [_entry(0, 2, 5), StoredEntry(1, 1, 1, 7, False)])
    assert len(kept) == 1  # the unbatched entry is never split: not kept
    assert kept.take("a", 1, 0, 3) is None  # the entry holds 2: forgotten
    assert kept.take("a", 1, 0, 2) is None
    kept.add("a", messages, [_entry(2, 2, 5), StoredEntry(1, 3, 1, 7, False)])
    found = kept.take("a", 1, 2, 2)
    assert found is not None and found[0] == 5
    assert found[1] == [AmqpMessage(*fields) for fields in messages[:2]]
    assert kept.take("a", 1, 2, 2) is None
    kept.add("a", messages, [_entry(4, 2)])  # entries that do not add up: nothing kept
    assert len(kept) == 0 and kept.bytes == 0


def test_an_entry_received_before_its_receipt_is_not_kept() -> None:
    """The queue consumer asked for it first (delivered before the send's receipt was
    read): kept then, it would never be taken. Only the last MAX_MISSED are remembered."""
    kept = PublishedEntries()
    assert kept.take("a", 1, 0, 2) is None
    kept.add("a", _messages(2, 10), [_entry(0, 2)])
    assert len(kept) == 0 and kept.bytes == 0
    for entry_id in range(1, MAX_MISSED + 2):
        assert kept.take("a", 1, entry_id, 1) is None
    kept.add("a", _messages(2, 10), [_entry(1, 1), _entry(MAX_MISSED + 1, 1)])
    assert len(kept) == 1 and kept.take("a", 1, 1, 1) is not None  # forgotten: kept
