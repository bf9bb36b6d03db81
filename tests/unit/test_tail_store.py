"""The tail cache keeps messages packed in mmapped segments (storage/kafka/tail_store.py):
no Python object per cached message, memory returned when the oldest segment goes, and
every message read back exactly as it was indexed."""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from harness.tail_sizes import held
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.kafka_codec.entry_format import encode_entries
from pulsar_gateway.kafka_codec.record_batch import Record, decode_batches, encode_batch
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.tail_store import HELD_PAYLOAD_BYTES, TailStore


class _Metadata:
    async def put(self, key: str, value: Any) -> None:
        pass


def _message(entry: int, size: int = 100) -> StoredMessage:
    return StoredMessage(
        (7, entry, -1),
        b"v" * size,
        f"key-{entry % 100}",
        {"__gw.seq": str(entry), "header": "h"},
        1_700_000_000_000 + entry,
        1_700_000_000_500,
        "gw-0123456789abcdef0123456789abcdef",
    )


def _allocated_blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()


def test_a_full_tail_holds_no_python_object_per_message() -> None:
    async def scenario() -> None:
        log = PartitionLog(None, _Metadata(), "p", index_interval=1 << 40)  # type: ignore[arg-type]
        batch = [_message(i) for i in range(20_000)]
        before = _allocated_blocks()
        log._index(batch)
        del batch
        grown = _allocated_blocks() - before
        # a StoredMessage per message kept some 160,000 blocks (tuples, dicts, strings, ints)
        assert grown < 500, f"{grown} heap blocks stay behind for 20,000 cached messages"
        assert log.tail_start == 0 and log.next_offset == 20_000

    asyncio.run(scenario())


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=3000)),
            st.text(max_size=20),
            st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=4),
            st.integers(0, 1 << 62),
            st.integers(1, 5),
        ),
        min_size=1,
        max_size=80,
    ),
    st.integers(0, 79),
)
def test_messages_read_back_as_they_were_indexed(fields: list[Any], start: int) -> None:
    tail = TailStore()
    stored, offsets = [], []
    offset = 100
    for entry, (payload, key, props, stamp, records) in enumerate(fields):
        message = StoredMessage((3, entry, -1), payload, key, props, stamp, stamp + 1, "p")
        tail.append(message, offset)
        stored.append(message)
        offsets.append(offset)
        offset += records
    start %= len(stored)
    read = tail.read(offsets[start], 1 << 40)
    assert [entry.offset for entry in read] == offsets[start:]
    assert [entry.message for entry in read] == stored[start:]
    for message, at in zip(stored, offsets, strict=True):
        assert tail.offset_of(message.id) == at
    assert tail.size == sum(held(message) for message in stored)


def test_reads_stop_at_the_byte_budget_but_return_at_least_one() -> None:
    tail = TailStore()
    for entry in range(50):
        tail.append(_message(entry, 1000), entry)
    assert len(tail.read(10, 1)) == 1
    assert [e.offset for e in tail.read(10, 3 * 1022)] == [10, 11, 12]
    # across segment boundaries (16 KiB, 32 KiB, ...), in order
    assert [e.offset for e in tail.read(5, 1 << 30)] == list(range(5, 50))


def test_dropping_the_oldest_unmaps_emptied_segments() -> None:
    tail = TailStore()
    for entry in range(2000):
        tail.append(_message(entry, 1000), entry)
    mapped = sum(len(segment.data) for segment in tail._segments)
    while tail.count > 10:
        tail.drop_oldest()
    left = sum(len(segment.data) for segment in tail._segments)
    assert left <= 1024 * 1024 < mapped
    assert tail.first_offset == 1990
    assert tail.offset_of((7, 5, -1)) is None
    assert tail.offset_of((7, 1995, -1)) == 1995


def test_a_kept_batch_is_served_in_place_of_its_records() -> None:
    """What the gateway itself just produced in the `pulsar` format is fetched at the tail as
    the batch the producer sent, re-based, instead of every record unpacked and re-encoded."""
    records = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, []) for i in range(3)]
    raw = bytes(encode_batch(0, records))
    tail = TailStore()
    for entry in range(5):
        tail.append(_message(entry, 10), 40 + entry)
    tail.keep_batch(41, 3, raw)
    entries = tail.read(40, 1 << 20)
    assert [entry.offset for entry in entries] == [40, 41, 44]
    assert entries[1].message.payload == raw and entries[1].message.id == (7, 1, -1)
    records_bytes, count = encode_entries(entries)
    assert count == 5
    [_, batch, _] = decode_batches(memoryview(records_bytes))
    assert batch.base_offset == 41 and [r.value for r in batch.records] == [b"v0", b"v1", b"v2"]
    # message by message when asked (a subscription's position needs each message's id)
    assert [e.offset for e in tail.read(40, 1 << 20, batches=False)] == [40, 41, 42, 43, 44]
    # the batch goes with its first message
    tail.drop_oldest()
    tail.drop_oldest()
    assert [e.offset for e in tail.read(42, 1 << 20)] == [42, 43, 44]
    assert tail.size == sum(held(_message(entry, 10)) for entry in range(2, 5))


def test_kept_batches_live_in_the_segments_not_on_the_heap() -> None:
    """A busy partition keeps a batch per produce request; kept as heap objects, 31,500 of
    them (and their index) pinned the small-object allocator's arenas in a soak."""
    raw = bytes(encode_batch(0, [Record(0, 1_700_000_000_000, b"k", b"v" * 400, [])]))
    tail = TailStore()
    tail.append(_message(0, 10), 0)
    before = _allocated_blocks()
    for offset in range(1, 5001):
        tail.append(_message(offset, 10), offset)
        tail.keep_batch(offset, 1, raw)
    grown = _allocated_blocks() - before
    # the segments' own few objects; a heap object per batch would be thousands
    assert grown < 500, f"{grown} heap blocks stay behind for 5,000 kept batches"
    entries = tail.read(4990, 1 << 20)
    assert [e.offset for e in entries] == list(range(4990, 5001))
    assert all(e.message.payload == raw for e in entries)
    # the messages between the batches read back as they were appended
    singly = tail.read(4990, 1 << 20, batches=False)
    assert [e.message for e in singly] == [_message(offset, 10) for offset in range(4990, 5001)]


def test_a_batch_is_kept_only_in_offset_order_and_may_straddle_segments() -> None:
    """Produce requests finish in any order: a batch finished after a later one is not kept
    (its records are read one by one). A big batch's records often straddle the tail's
    segments; it is kept all the same, and goes when its first record goes."""
    raw = bytes(encode_batch(0, [Record(i, 0, None, b"v", []) for i in range(2)]))
    tail = TailStore()
    for offset in range(6):
        tail.append(_message(offset, 10), offset)
    tail.keep_batch(4, 2, raw)
    tail.keep_batch(2, 2, raw)  # finished after a later one: not kept
    tail.keep_batch(-1, 2, raw)  # before the cache: not kept
    assert [e.offset for e in tail.read(0, 1 << 20)] == [0, 1, 2, 3, 4]
    straddling = TailStore()
    offset = 0
    while len(straddling._segments) < 2:
        straddling.append(_message(offset, 1000), offset)
        offset += 1
    first_of_newest = straddling._segments[-1].offsets[0]
    straddling.keep_batch(first_of_newest - 1, 2, raw)
    read = straddling.read(first_of_newest - 1, 1 << 20)
    assert [e.offset for e in read] == [first_of_newest - 1]
    assert read[0].message.payload == raw
    assert [e.offset for e in straddling.read(first_of_newest, 1 << 20)] == [first_of_newest]
    while straddling.count:
        straddling.drop_oldest()
    assert straddling.size == 0 and not straddling._kept


def _live_bytes(tail: TailStore) -> int:
    """What a tail's live messages occupy: their packed bytes in the mappings and their
    entries in every array beside, measured from the structures themselves."""
    total = 0
    for number, segment in enumerate(tail._segments):
        head = tail._head if number == 0 else 0
        start = segment.ends[head - 1] if head else 0
        total += segment.used - start
        arrays = (segment.ends, segment.offsets, segment.ledgers, segment.entries)
        per_message = sum(a.itemsize for a in (*arrays, segment.slots, segment.sizes))
        total += (len(segment) - head) * per_message
    return total


def test_a_tail_of_small_records_is_charged_what_it_holds() -> None:
    """`kafka.tail_cache_*` bound memory: a tail's size covers each message's packed form
    and its index, not only the bytes a fetch counts. Counted as a fetch counts them
    (payload, key and 16), 10-byte records held about five times the partition's limit."""

    async def scenario() -> None:
        limit = 100_000
        log = PartitionLog(None, _Metadata(), "p", tail_bytes=limit)  # type: ignore[arg-type]
        log._index([_message(i, 10) for i in range(10_000)])
        tail = log._tail
        assert 0 < tail.count < 10_000
        assert tail.size == _live_bytes(tail) <= limit

    asyncio.run(scenario())


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(0, 6000).map(lambda n: bytes([n % 251]) * n)),
            st.text(max_size=5),
        ),
        min_size=1,
        max_size=120,
    ),
    st.lists(st.integers(1, 40), min_size=1, max_size=10),
)
def test_extending_in_one_go_holds_what_appending_one_by_one_holds(
    fields: list[Any], chunks: list[int]
) -> None:
    """`extend` (the tailer's bulk path) packs the messages into segments as `append` does."""
    messages = [
        StoredMessage((1, n, 0), payload, key, {"__gw.seq": str(n)}, n, n + 1, "p")
        for n, (payload, key) in enumerate(fields)
    ]
    offsets = [10 + 2 * n for n in range(len(messages))]
    one_by_one, in_bulk = TailStore(), TailStore()
    for message, offset in zip(messages, offsets, strict=True):
        one_by_one.append(message, offset)
    done = 0
    for size in itertools.cycle(chunks):
        if done >= len(messages):
            break
        in_bulk.extend(messages[done : done + size], offsets[done : done + size])
        done += size
    assert (in_bulk.size, in_bulk.count) == (one_by_one.size, one_by_one.count)
    assert len(in_bulk._segments) == len(one_by_one._segments)
    assert in_bulk.read(offsets[0], 1 << 40) == one_by_one.read(offsets[0], 1 << 40)
    for message, offset in zip(messages, offsets, strict=True):
        assert in_bulk.offset_of(message.id) == offset
    small = in_bulk.read(offsets[-1], 1)
    assert [entry.message for entry in small] == messages[-1:]


def test_the_message_at_an_offset_is_one_look_up_even_inside_an_open_batch() -> None:
    """`message_at` answers what a one-message read answers, without going on to the end of
    a batch the read may not stop inside (stamps with more to follow)."""
    store = TailStore()
    offsets = itertools.count(10)
    for entry in range(3000):
        message = _message(entry)
        more = entry % 1000 != 999  # three batches of 1000 messages
        message.properties["__gw.seq"] = f"{entry}+" if more else str(entry)
        store.append(message, next(offsets))
    for offset in (10, 11, 500, 1009, 1010, 3009):
        read = store.read(offset, 1, batches=False)
        assert len(read) == 1000 - (offset - 10) % 1000  # a read goes on to its batch's end
        assert store.message_at(offset) == read[0]


def test_a_big_payload_is_held_as_it_came_and_charged_in_full() -> None:
    """A whole batch's payload (HELD_PAYLOAD_BYTES or more, exact `bytes`) is not copied
    into a segment: a fetch gets the very object back. The tail's size still counts it, and
    dropping its message lets it go. A view is packed as before: held, it would pin the
    larger buffer it slices."""
    big = bytes(range(256)) * (HELD_PAYLOAD_BYTES // 256 + 1)
    frame = b"f" * (4 * len(big))
    view = memoryview(frame)[: len(big)]
    messages = [
        StoredMessage((1, 0, 0), big, "", {"__gw.records": "3"}, 0, 5, "p"),
        StoredMessage((1, 1, 0), b"small", "k", {}, 1, 6, "p"),
        StoredMessage((1, 2, 0), view, "", {}, 2, 7, "p"),  # type: ignore[arg-type]
    ]
    tail = TailStore()
    tail.extend(messages, [0, 3, 4])
    read = tail.read(0, 1 << 40)
    assert read[0].message.payload is big
    assert [entry.message for entry in read] == messages
    assert read[2].message.payload == bytes(view) and type(read[2].message.payload) is bytes
    assert tail.message_at(1).message.payload is big
    packed_only = sum(held(m._replace(payload=b"")) for m in messages)
    assert tail.size >= packed_only + len(big) + len(view)
    refs = sys.getrefcount(big)
    tail.drop_oldest()
    assert sys.getrefcount(big) == refs - 1
    assert tail.size == held(messages[1]) + held(messages[2])
    tail.drop_oldest()
    tail.drop_oldest()
    assert tail.size == 0 and tail.count == 0
