"""A batched entry the gateway wrote from a whole produced Kafka batch reaches the tailer as
ONE item standing for all its messages (messages.WHOLE_ENTRY, docs/offsets.md, "A batch the
gateway wrote is numbered as one"). Everything that numbers or looks up such an item must
answer what it answers for the same entry message by message: the resend filter, the tail
cache's id look-ups, the appends waiting for their ids."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.native_reader import NativeReaderStream
from pulsar_gateway.gateway.backend.native_writer import entries
from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
from pulsar_gateway.gateway.backend.wire import MessageId, ReceivedEntry
from pulsar_gateway.gateway.backend.wire.messages import MessageMetadata
from pulsar_gateway.gateway.backend.written_entries import WrittenEntries, WrittenEntry
from pulsar_gateway.gateway.messages import (
    RECORDS,
    SEQ,
    WHOLE_ENTRY,
    OutMessage,
    ProducedBatch,
    StoredMessage,
    last_id,
    records_in,
)
from pulsar_gateway.kafka_codec.record_batch import Record, decode_batches, encode_batch
from pulsar_gateway.storage.kafka.append_offsets import IdWaiters, NumberedWhileAppending
from pulsar_gateway.storage.kafka.read_batches import kafka_batch
from pulsar_gateway.storage.kafka.tail_store import TailStore

PRODUCERS = ["gw-a.native", "gw-a.single", "gw-b.native"]


def _whole(producer: str, first: int, count: int, entry: int) -> StoredMessage:
    """An item standing for `count` messages stamped from `first`, as the tailer gets it."""
    properties = {RECORDS: str(count), SEQ: str(first + count - 1), WHOLE_ENTRY: "1"}
    return StoredMessage((1, entry, 0), b"batch", "", properties, 0, 0, producer)


def _expanded(item: StoredMessage) -> list[StoredMessage]:
    """The same entry message by message."""
    count = int(item.properties[RECORDS])
    first = int(item.properties[SEQ]) - count + 1
    ledger, entry, _ = item.id
    return [
        StoredMessage((ledger, entry, i), b"r", "", {SEQ: str(first + i)}, 0, 0, item.producer)
        for i in range(count)
    ]


# entries as (producer, first sequence, messages): runs, gaps, resent copies, overlaps none
# (an entry is resent as it was sent)
streams = st.lists(
    st.tuples(st.sampled_from(PRODUCERS), st.integers(0, 6), st.integers(1, 5)), max_size=60
)


@settings(max_examples=examples(300), deadline=None)
@given(streams, st.randoms(use_true_random=False))
def test_the_filter_numbers_a_whole_entry_as_its_messages(stream, random) -> None:
    """Each producer's entries are cut from its own run of sequences, some sent twice (a
    resend); the filter fed the items and the filter fed their messages agree on every
    answer, their state, and the offset of every sequence afterwards."""
    by_items, by_messages = ResendFilter(), ResendFilter()
    sent: dict[str, list[tuple[int, int]]] = {p: [] for p in PRODUCERS}
    next_sequence = dict.fromkeys(PRODUCERS, 0)
    offset_items = offset_messages = 0
    for entry, (producer, gap, count) in enumerate(stream):
        if sent[producer] and random.random() < 0.3:
            first, count = random.choice(sent[producer])  # a resent copy of an earlier entry
        else:
            first = next_sequence[producer] + gap
            next_sequence[producer] = first + count
            sent[producer].append((first, count))
        item = _whole(producer, first, count, entry)
        got = by_items.original_offset(item, offset_items)
        answers = [
            by_messages.original_offset(m, offset_messages + i)
            for i, m in enumerate(_expanded(item))
        ]
        if got is None:
            assert answers == [None] * count
            offset_items += count
            offset_messages += count
        else:
            assert got == answers[0] and all(a is not None for a in answers)
    assert by_items.snapshot() == by_messages.snapshot()
    for producer, entries_sent in sent.items():
        for first, count in entries_sent:
            for sequence in range(first, first + count):
                probe = StoredMessage((9, 0, -1), b"", "", {SEQ: str(sequence)}, 0, 0, producer)
                assert by_items.original_offset(probe, -1) == by_messages.original_offset(probe, -1)


def test_the_tail_finds_every_message_of_a_whole_entry_by_its_id() -> None:
    tail = TailStore()
    before = StoredMessage((1, 4, -1), b"a", "", {}, 0, 0)
    whole = _whole("gw-a.native", 0, 5, 5)
    after = StoredMessage((1, 6, 0), b"b", "", {}, 0, 0)
    tail.extend([before, whole], [10, 11])
    for index in range(5):
        assert tail.offset_of((1, 5, index)) == 11 + index  # the last item: up to its end
    tail.extend([after], [16])
    for index in range(5):
        assert tail.offset_of((1, 5, index)) == 11 + index
    assert tail.offset_of((1, 5, 5)) == 16  # past its messages: the next one's
    assert tail.offset_of((1, 6, 0)) == 16
    # a batch kept for fetches is never kept over the item that is that batch already
    tail.keep_batch(11, 5, b"kafka batch")
    assert [(e.offset, e.message) for e in tail.read(11, 1 << 20)] == [(11, whole), (16, after)]
    tail.keep_batch(16, 1, b"kafka batch")  # one record per message: kept as before
    assert tail.read(16, 1 << 20)[0].message.payload == b"kafka batch"


def test_waiting_appends_get_the_offset_of_their_own_message_in_a_whole_entry() -> None:
    async def scenario() -> None:
        waiters = IdWaiters()
        earlier, first, last, later = (
            waiters.wait((1, 4, 0)),  # a resend's id before the item: the item's first offset
            waiters.wait((1, 5, 0)),
            waiters.wait((1, 5, 3)),
            waiters.wait((1, 6, 0)),
        )
        whole = _whole("gw-a.native", 0, 4, 5)
        waiters.numbered(whole.id, 20, last_id(whole))
        assert (earlier.result(), first.result(), last.result()) == (20, 20, 23)
        assert not later.done()
        numbered = NumberedWhileAppending()
        numbered.add(whole.id, 20, last_id(whole))
        assert (numbered.offset_of((1, 5, 0)), numbered.offset_of((1, 5, 3))) == (20, 23)

    asyncio.run(scenario())


def test_only_an_entry_holding_the_whole_produced_batch_is_one_item() -> None:
    produced = ProducedBatch(memoryview(b"kafka"), {RECORDS: "3", "__kafka.producer": "7:0:0:2"})
    messages = [OutMessage(b"x" * 100, "k", {"h": "v"}, 1000 + i) for i in range(3)]
    (entry,) = entries(messages, 40, True, 10_000, produced)
    note = entry.note
    assert isinstance(note, WrittenEntry)
    item = note.as_one(3, 8, 1234, "gw-a.native")
    assert item is not None
    assert item.id == (3, 8, 0) and last_id(item) == (3, 8, 2) and records_in(item) == 3
    assert item.payload == b"kafka" and isinstance(item.payload, bytes)
    # the last message's stamp (the batch ends here), and the batch's own stamps
    assert item.properties[SEQ] == "42" and item.properties["__kafka.producer"] == "7:0:0:2"
    # cut into two entries, neither holds the batch: each is read message by message
    split = entries(messages, 40, True, 250, produced)
    assert len(split) > 1
    assert all(isinstance(e.note, WrittenEntry) for e in split)
    assert all(e.note.as_one(3, 8, 1234, "p") is None for e in split)  # type: ignore[union-attr]


def test_the_produced_batch_is_held_as_the_one_copy_its_decode_made() -> None:
    """The produce decode copies an uncompressed batch once (its records are read from that
    copy) and the item standing for the entry is that very object: a second copy of every
    kept batch was a fresh mapping of a megabyte a big batch, its pages faulted in. A view
    into anything bigger (a whole request) is still copied, never held."""
    batch = bytes(encode_batch(0, [Record(i, 1000 + i, b"k", b"v" * 50, []) for i in range(4)]))
    request = memoryview(b"head" + batch + b"tail")[4:-4]
    (decoded,) = decode_batches(request, messages=True)
    raw = decoded.raw
    assert raw.obj is not request.obj and bytes(raw) == batch
    for produced, held in ((raw, raw.obj), (request, None)):
        (entry,) = entries(list(decoded.messages), 0, True, 10_000, ProducedBatch(produced, {}))
        assert isinstance(entry.note, WrittenEntry)
        item = entry.note.as_one(3, 8, 1234, "gw-a.native")
        assert item is not None and item.payload == batch and isinstance(item.payload, bytes)
        assert (item.payload is held) if held is not None else (item.payload is not request.obj)


class _Consumer:
    """Hands out the given entries once, then nothing."""

    closed = False
    queued = 0

    def __init__(self, delivered: list[ReceivedEntry]) -> None:
        self.delivered = delivered

    async def receive_many(self, count: int, timeout: float | None) -> list[ReceivedEntry]:
        out, self.delivered = self.delivered[:count], self.delivered[count:]
        return out


def test_an_entry_met_from_inside_is_read_message_by_message() -> None:
    """A reader starting inside a noted entry (a checkpoint inside it) passes on its messages
    from the start on, one by one; the next entry, wholly new, comes as one item."""

    async def scenario() -> None:
        written = WrittenEntries()
        delivered = []
        for entry_id, sequence in ((1, 10), (2, 13)):
            messages = [OutMessage(b"v%d" % i, "k", None, 1000) for i in range(3)]
            produced = ProducedBatch(b"kafka %d" % entry_id, {RECORDS: "3"})
            (built,) = entries(messages, sequence, True, 10_000, produced)
            written.add("gw-x.native", sequence, built.note, len(built.payload))  # type: ignore[arg-type]
            metadata = MessageMetadata(
                producer_name="gw-x.native",
                sequence_id=sequence,
                publish_time=5,
                num_messages_in_batch=3,
            )
            delivered.append(ReceivedEntry(MessageId(4, entry_id, -1), metadata, built.payload))
        stream = NativeReaderStream(None, "t", (4, 1, 2), written=written, as_one=True)  # type: ignore[arg-type]
        stream._consumer = _Consumer(delivered)  # type: ignore[assignment]
        read = await stream.read_batch(100, timeout=0.1)
        assert [m.id for m in read] == [(4, 1, 2), (4, 2, 0)]
        assert read[0].payload == b"v2" and WHOLE_ENTRY not in read[0].properties
        assert read[1].payload == b"kafka 2" and records_in(read[1]) == 3
        assert stream.last_passed == (4, 2, 2)

    asyncio.run(scenario())


def test_after_a_restart_the_tailer_reads_an_entry_it_no_longer_knows_as_one_item() -> None:
    """Nothing noted (a restarted gateway): a wholly new plain entry offered to `whole`
    (read_batches.kafka_batch) comes as one item for the whole entry, as a noted one does:
    named by its first message, standing for all; one met from inside still comes message
    by message, and one `whole` turns down (not the plain case) too."""

    async def scenario() -> None:
        delivered = []
        # the last entry's records were produced compressed (their codec a property):
        # not the plain case
        codec = {"__kafka.codec": "1"}
        for entry_id, sequence, props in ((1, 10, None), (2, 13, None), (3, 16, codec)):
            messages = [OutMessage(b"v%d" % i, "k", props, 1000 + i) for i in range(3)]
            (built,) = entries(messages, sequence, True, 10_000)
            metadata = MessageMetadata(
                producer_name="gw-x.native",
                sequence_id=sequence,
                publish_time=5,
                num_messages_in_batch=3,
            )
            delivered.append(ReceivedEntry(MessageId(4, entry_id, -1), metadata, built.payload))
        stream = NativeReaderStream(None, "t", (4, 1, 2), written=WrittenEntries(), as_one=True)  # type: ignore[arg-type]
        stream._consumer = _Consumer(delivered)  # type: ignore[assignment]
        read = await stream.read_batch(100, timeout=0.1, whole=kafka_batch)
        assert [m.id for m in read] == [(4, 1, 2), (4, 2, 0), (4, 3, 0), (4, 3, 1), (4, 3, 2)]
        assert read[0].payload == b"v2" and WHOLE_ENTRY not in read[0].properties
        item = read[1]
        assert WHOLE_ENTRY in item.properties and records_in(item) == 3
        assert last_id(item) == (4, 2, 2) and item.properties[SEQ] == "15"
        assert [
            (r.key, r.value) for b in decode_batches(item.payload or b"") for r in b.records
        ] == [
            (b"k", b"v0"),
            (b"k", b"v1"),
            (b"k", b"v2"),
        ]
        assert all(WHOLE_ENTRY not in m.properties for m in read[2:])
        assert stream.last_passed == (4, 3, 2)

    asyncio.run(scenario())


def test_a_read_makes_entries_into_messages_only_up_to_its_byte_bound() -> None:
    """`max_bytes` bounds what one read makes of the entries the broker sent (a read ahead
    of one fetch's worth made all it held, 5-6 MB, while a Fetch waited): entries are made
    until those made hold the bound, at least one, and the rest wait as they came for the
    next read, in order."""

    async def scenario() -> None:
        delivered = []
        for entry_id in range(1, 6):
            messages = [OutMessage(b"v%d" % i, "k", None, 1000 + i) for i in range(3)]
            (built,) = entries(messages, 10 * entry_id, True, 10_000)
            metadata = MessageMetadata(
                producer_name="gw-x.native",
                sequence_id=10 * entry_id,
                publish_time=5,
                num_messages_in_batch=3,
            )
            delivered.append(ReceivedEntry(MessageId(4, entry_id, -1), metadata, built.payload))
        stream = NativeReaderStream(None, "t", (4, 1, 0), written=WrittenEntries(), as_one=True)  # type: ignore[arg-type]
        stream._consumer = _Consumer(delivered)  # type: ignore[assignment]
        first = await stream.read_batch(1000, timeout=0.1, whole=kafka_batch, max_bytes=0)
        assert [m.id for m in first] == [(4, 1, 0)]
        size = first[0].size
        two = await stream.read_batch(1000, timeout=0.1, whole=kafka_batch, max_bytes=size + 1)
        assert [m.id for m in two] == [(4, 2, 0), (4, 3, 0)]
        rest = await stream.read_batch(1000, timeout=0.1, whole=kafka_batch)
        assert [m.id for m in rest] == [(4, 4, 0), (4, 5, 0)]
        assert all(records_in(m) == 3 for m in first + two + rest)

    asyncio.run(scenario())
