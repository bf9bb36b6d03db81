"""Reads from storage take a batched entry the gateway wrote as ONE Kafka batch
(storage/kafka/read_batches.py): what a Kafka client gets is what reading message by message
gives (records, offsets, timestamps), resent copies still take no offsets, and the batch
stands for its messages exactly wherever a read needs them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from harness.split_entries import PRODUCER as PRODUCER_NAME
from harness.split_entries import PUBLISHED, split_entry
from pulsar_gateway.gateway.backend.native_writer import entries
from pulsar_gateway.gateway.backend.wire.batch import BatchBuilder
from pulsar_gateway.gateway.messages import (
    RECORDS,
    SEQ,
    WHOLE_ENTRY,
    LogEntry,
    MessageKey,
    OutMessage,
    StoredMessage,
    WholeEntry,
    last_id,
    records_in,
)
from pulsar_gateway.handlers.kafka.apis.fetch import _read as fetch_read
from pulsar_gateway.handlers.loop_turns import LoopTurns
from pulsar_gateway.kafka_codec import compression as codecs
from pulsar_gateway.kafka_codec.entry_format import encode_entries, encode_entry_parts
from pulsar_gateway.kafka_codec.record_batch import decode_batches
from pulsar_gateway.kafka_codec.record_mapping import (
    GATEWAY_RESERVED,
    HEADER_ORDER,
    HEADERS,
    RESERVED,
    headers_of,
    to_message,
)
from pulsar_gateway.storage.kafka import whole_entry
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.producer_state import FROM, PRODUCER
from pulsar_gateway.storage.kafka.read_batches import is_read_batch, kafka_batch, messages_of

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
plain_records = st.builds(
    OutMessage,
    st.none() | st.binary(max_size=300),
    st.none() | text,
    st.none(),
    st.integers(1, 2**41),
)
# records repeating a few keys, times and value sizes, as a producer's batch does
repeating_records = st.builds(
    OutMessage,
    st.none() | st.binary(min_size=4, max_size=4),
    st.sampled_from([None, "a", "bb"]),
    st.none(),
    st.sampled_from([1, 1_700_000_000_000]),
)
# records with headers, as the gateway's produce maps them (to_message): plain properties,
# their order when the names are not in order, or JSON for what cannot be plain
headered_records = st.builds(
    to_message,
    st.none() | st.binary(min_size=1, max_size=8).filter(lambda k: k.isascii()),
    st.none() | st.binary(max_size=40),
    st.sampled_from([1, 1_700_000_000_000]),
    st.lists(st.tuples(text, st.none() | st.binary(max_size=20)), min_size=1, max_size=3),
)
any_records = st.builds(
    OutMessage,
    st.none() | st.binary(max_size=300),
    st.none() | text,
    st.none() | st.dictionaries(text, text, max_size=2),
    st.integers(0, 2**41),
)


def _as_mapped(properties: dict[str, str] | None) -> bool:
    """Whether a message's properties are exactly what the mapping writes for headers."""
    if not properties:
        return True
    reserved = (RESERVED, GATEWAY_RESERVED)
    if any(n.startswith(reserved) and n not in (HEADER_ORDER, HEADERS) for n in properties):
        return False
    try:
        headers = headers_of(StoredMessage((0, 0, 0), None, "", properties, 0, 0))
    except ValueError:
        return False
    return (to_message(None, None, 0, headers).properties or {}) == properties


def _records(data: bytes | bytearray) -> list[tuple]:
    return [
        (batch.base_offset + r.offset_delta, r.timestamp, r.key, r.value, r.headers)
        for batch in decode_batches(data)
        for r in batch.records
    ]


def _served(batch: StoredMessage, offset: int) -> list[tuple]:
    return _records(encode_entries([LogEntry(offset, batch)])[0])


def _one_by_one(messages: list[StoredMessage], offset: int) -> list[tuple]:
    return _records(encode_entries([LogEntry(offset + i, m) for i, m in enumerate(messages)])[0])


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        plain_records | repeating_records | headered_records | any_records, min_size=1, max_size=40
    ),
    st.integers(0, 2**40),
    st.booleans(),
)
def test_an_entry_read_whole_serves_what_message_by_message_serves(
    messages: list[OutMessage], first: int, whole: bool
) -> None:
    for entry in entries(messages, first, whole, 1 << 20):
        if not entry.batched:
            continue
        count = entry.num_messages
        one_by_one = split_entry((3, 4, 0), entry.payload, count)
        made = kafka_batch((3, 4, 0), entry.payload, count, PUBLISHED, PRODUCER_NAME)
        # the compiled twin the gateway runs (docs/compiled.md) makes the very same
        twin = whole_entry.kafka_batch((3, 4, 0), entry.payload, count, PUBLISHED, PRODUCER_NAME)
        assert twin == made
        plain = (whole or count == 1) and all(
            _as_mapped(m.properties) and m.event_time > 0 for m in entry.note.messages
        )
        assert (made is not None) == plain
        if made is None:
            continue
        # an item for the whole entry, as the tailer makes of one it wrote
        assert made.id == (3, 4, 0) and last_id(made) == (3, 4, count - 1)
        assert WHOLE_ENTRY in made.properties and made.producer == PRODUCER_NAME
        assert made.properties[RECORDS] == str(count) and is_read_batch(made)
        assert made.properties[SEQ] == one_by_one[-1].properties[SEQ]
        assert _served(made, 50) == _one_by_one(one_by_one, 50)
        assert messages_of(made) == one_by_one


def test_pulsar_client_layout_reads_whole_too() -> None:
    """pulsar-client writes a message's fields in field-number order (payload size before
    the event time): still the plain case."""
    builder = BatchBuilder()
    for index in range(5):
        stamp = f"{40 + index}{'+' if index < 4 else ''}"
        builder.add_message(b"v%d" % index, "key", {SEQ: stamp}, 1_700_000_000_000 + index)
    built = builder.build()
    made = kafka_batch((1, 1, 0), built.payload, 5, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    assert _served(made, 0) == _one_by_one(split_entry((1, 1, 0), built.payload, 5), 0)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(plain_records, min_size=1, max_size=10), st.data())
def test_a_damaged_entry_is_never_read_wrong(messages: list[OutMessage], data: Any) -> None:
    """Flipped or cut bytes: None (the message path then says what is wrong) or, where the
    damage left a well-formed entry, exactly what the message path reads."""
    entry = entries(messages, 0, True, 1 << 20)[0]
    payload = bytearray(entry.payload)
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    else:
        del payload[data.draw(st.integers(0, len(payload) - 1)) :]
    made = kafka_batch((1, 1, 0), bytes(payload), entry.num_messages, PUBLISHED, PRODUCER_NAME)
    twin = whole_entry.kafka_batch
    assert twin((1, 1, 0), bytes(payload), entry.num_messages, PUBLISHED, PRODUCER_NAME) == made
    if made is not None:
        one_by_one = split_entry((1, 1, 0), bytes(payload), entry.num_messages)
        try:
            expected = _one_by_one(one_by_one, 0)
        except UnicodeEncodeError:  # a key that is not UTF-8: the message path cannot
            return  # serve it (record_mapping.key_of), the whole entry serves its bytes
        assert _served(made, 0) == expected


def test_a_tail_seen_before_does_not_stand_for_another_partition_key() -> None:
    """A message whose metadata after its event time (ordering key, payload size) is an
    earlier message's, but whose partition key differs from that ordering key: its record's
    key is its partition key, as the message path reads it. (A whole-entry read that kept
    what it made of a metadata's tail, to spare parsing a key met again at a new time,
    must check the key before the time too.)"""
    moment = 1_700_000_000_000
    [entry] = entries(
        [OutMessage(b"v", "ab", None, moment), OutMessage(b"v", "xb", None, moment)],
        0,
        True,
        1 << 20,
    )
    payload = entry.payload
    ordering_key = b"\x3a\x02xb"
    assert payload.count(ordering_key) == 1
    damaged = payload.replace(ordering_key, b"\x3a\x02ab")
    made = kafka_batch((1, 1, 0), damaged, 2, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    one_by_one = split_entry((1, 1, 0), damaged, 2)
    assert [m.key for m in one_by_one] == ["ab", "xb"]
    assert _served(made, 0) == _one_by_one(one_by_one, 0)


def test_a_null_value_that_claims_a_payload_is_not_read_whole() -> None:
    """A null value's payload size damaged to 1, its record last in the entry: the message
    path says the payload runs past the entry, so the whole-entry reader must not serve it
    (it once read the null value and ignored the size: found by the property test above)."""
    [entry] = entries(
        [OutMessage(b"a", "k", None, 5), OutMessage(None, "0", None, 6)], 0, True, 1 << 20
    )
    payload = bytes(entry.payload)
    assert payload.endswith(b"\x48\x01\x18\x00")
    damaged = payload[:-1] + b"\x01"
    assert kafka_batch((1, 1, 0), damaged, 2, PUBLISHED, PRODUCER_NAME) is None
    assert kafka_batch((1, 1, 0), payload, 2, PUBLISHED, PRODUCER_NAME) is not None


def test_an_entry_of_more_records_than_one_byte_deltas_reach_reads_whole() -> None:
    """A 1 MB Kafka batch of small records holds some 9,000: an entry of them was read
    message by message (several times the time) when offset deltas stopped at 8,192."""
    messages = [OutMessage(b"%d" % i, "k", None, 1_000) for i in range(9_000)]
    [entry] = entries(messages, 0, True, 1 << 22)
    made = kafka_batch((1, 1, 0), entry.payload, 9_000, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    assert _served(made, 0) == _one_by_one(split_entry((1, 1, 0), entry.payload, 9_000), 0)


@settings(max_examples=examples(30), deadline=None)
@given(
    st.integers(1, 600),
    st.sampled_from([1, 7, 100, 10**9]),
    st.sampled_from([1, 70, 10**9]),
    st.sampled_from([0, 100, 300]),
    st.booleans(),
)
def test_keys_times_and_sizes_as_producers_send_them_read_whole(
    count: int, keys: int, per_time: int, size: int, nulls: bool
) -> None:
    """Batches whose metadata repeats a lot (one key, one time) or seldom (a key a record,
    a time every few records: more different metadata than one read keeps), keys of one
    and of several length bytes, null values, payloads whose size takes two bytes: what
    the whole read serves is what the message path serves."""
    messages = [
        OutMessage(
            None if nulls and i % 5 == 0 else b"v" * (size + i % 3),
            f"key-{i % keys}" if keys < 10**9 else f"user-{i:06d}-" + "k" * (i % 200),
            None,
            1_700_000_000_000 + i // per_time,
        )
        for i in range(count)
    ]
    [entry] = entries(messages, 500, True, 1 << 22)
    made = kafka_batch((2, 5, 0), entry.payload, count, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    assert (
        whole_entry.kafka_batch((2, 5, 0), entry.payload, count, PUBLISHED, PRODUCER_NAME) == made
    )
    one_by_one = split_entry((2, 5, 0), entry.payload, count)
    assert _served(made, 0) == _one_by_one(one_by_one, 0)
    assert messages_of(made) == one_by_one


def test_the_topic_codec_and_log_append_time_still_hold() -> None:
    entry = entries(
        [OutMessage(b"v" * 50, "k", None, 1_000 + i) for i in range(4)], 0, True, 1 << 20
    )[0]
    made = kafka_batch((1, 1, 0), entry.payload, 4, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    data, count = encode_entries([LogEntry(8, made)], codec=codecs.GZIP, log_append_time=True)
    [batch] = decode_batches(data)
    assert count == 4 and batch.base_offset == 8
    assert batch.attributes & 0x07 == codecs.GZIP and batch.timestamp_type == 1
    assert [(r.key, r.value) for r in batch.records] == [(b"k", b"v" * 50)] * 4


# ---- history reads through a partition log -------------------------------------------------


class _EntryStream:
    """A reader over fixed batched entries, offering each whole to `whole` when asked."""

    def __init__(self, raw: list[tuple[MessageKey, bytes, int]], per_read: int = 1000) -> None:
        self.raw = raw
        self.per_read = per_read  # entries handed out per read at most
        self.reads = 0

    async def read_batch(
        self,
        limit: int,
        timeout: float | None = None,
        expect_more: bool = False,
        whole: WholeEntry | None = None,
        max_bytes: int | None = None,
    ) -> list[StoredMessage]:
        self.reads += 1
        out: list[StoredMessage] = []
        for _ in range(self.per_read):
            if not self.raw or len(out) >= limit:
                break
            mid, payload, count = self.raw.pop(0)
            made = None if whole is None else whole(mid, payload, count, PUBLISHED, PRODUCER_NAME)
            out += [made] if made is not None else split_entry(mid, payload, count)
        return out

    async def close(self) -> None:
        pass


class _Backend:
    def __init__(self, raw: list[tuple[MessageKey, bytes, int]], per_read: int = 1000) -> None:
        self.raw = raw
        self.per_read = per_read
        self.streams: list[_EntryStream] = []

    async def open_log_reader(self, *_: Any, **__: Any) -> _EntryStream:
        self.streams.append(_EntryStream(list(self.raw), self.per_read))
        return self.streams[-1]


def _stored_entries() -> list[tuple[MessageKey, bytes, int]]:
    """Entries of stamps 0-9, 10-19, a resent copy of 10-19, 15-24 (a resend overlapping in
    part), 25-34: 35 records, at offsets 0-34 when counted message by message."""
    raw = []
    for number, first in enumerate((0, 10, 10, 15, 25)):
        messages = [
            OutMessage(b"value-%d" % (first + i), f"k{i % 3}", None, 5_000 + first + i)
            for i in range(10)
        ]
        [entry] = entries(messages, first, True, 1 << 20)
        raw.append(((7, number, 0), entry.payload, 10))
    return raw


async def _read_all(log: PartitionLog, offset: int, max_bytes: int) -> list[tuple]:
    served = []
    while offset < 35:
        data, count = encode_entries(await log.read(offset, max_bytes))
        records = [r for r in _records(data) if r[0] >= offset]
        assert records and records[0][0] == offset  # dense: nothing skipped
        served += records
        offset = records[-1][0] + 1
    return served


def test_history_reads_of_whole_entries_keep_offsets_dense_and_drop_resent_copies() -> None:
    async def scenario() -> None:
        raw = _stored_entries()
        for max_bytes, per_read in ((1, 1000), (300, 1), (1 << 20, 2)):
            log = PartitionLog(_Backend(raw, per_read), None, "t")  # type: ignore[arg-type]
            log.next_offset = 35  # nothing in the tail: every read below goes to history
            served = await _read_all(log, 0, max_bytes)
            assert [r[0] for r in served] == list(range(35))
            assert [r[3] for r in served] == [b"value-%d" % seq for seq in range(35)]
            assert [r[1] for r in served] == [5_000 + seq for seq in range(35)]

    asyncio.run(scenario())


def test_a_read_from_inside_an_entry_or_for_one_message_gets_messages() -> None:
    async def scenario() -> None:
        raw = _stored_entries()
        log = PartitionLog(_Backend(raw), None, "t")  # type: ignore[arg-type]
        log.next_offset = 35
        entries_read = await log.read(13, 1 << 20)
        assert entries_read[0].offset == 13 and entries_read[0].message.id == (7, 1, 3)
        served = await _read_all(log, 13, 1 << 20)
        assert [r[3] for r in served] == [b"value-%d" % seq for seq in range(13, 35)]
        whole = await log.read(0, 1 << 20)
        assert is_read_batch(whole[0].message)  # from an entry's first record: whole
        for offset in (0, 9, 10, 19, 20, 24, 25, 34):
            entry = await log.entry_at(offset)
            assert entry.offset == offset and not is_read_batch(entry.message)
            assert entry.message.payload == b"value-%d" % offset

    asyncio.run(scenario())


def test_a_kept_cursor_reads_ahead_while_the_consumer_handles_the_last_answer() -> None:
    async def scenario() -> None:
        backend = _Backend(_stored_entries(), per_read=1)
        log = PartitionLog(backend, None, "t")  # type: ignore[arg-type]
        log.next_offset = 35
        first = await log.read(0, 1)
        assert [e.offset for e in first] == [0] and is_read_batch(first[0].message)
        [stream] = backend.streams
        for _ in range(10):
            await asyncio.sleep(0)
        assert stream.reads == 2  # the entry after it, read and made a batch already
        second = await log.read(10, 1)
        assert [e.offset for e in second] == [10] and is_read_batch(second[0].message)
        assert len(backend.streams) == 1
        await log.close()

    asyncio.run(scenario())


class _Metadata:
    """Checkpoints go nowhere."""

    async def put(self, key: str, value: Any) -> None:
        pass


class _TailedStream(_EntryStream):
    """The tailer's reader: the entries, then nothing (each later read waits its timeout)."""

    connected = True

    async def read_batch(
        self,
        limit: int,
        timeout: float | None = None,
        expect_more: bool = False,
        whole: WholeEntry | None = None,
        max_bytes: int | None = None,
    ) -> list[StoredMessage]:
        if not self.raw:
            await asyncio.sleep(timeout or 0)
            return []
        return await super().read_batch(limit, timeout, expect_more, whole, max_bytes)


def test_after_a_restart_the_tailer_numbers_whole_entries_as_message_by_message() -> None:
    """The tailer offers every batched entry to kafka_batch (after a restart the gateway
    knows none it wrote): an entry is one item in the tail, a resent copy takes no offsets,
    and a resend overlapping one in part is numbered message by message, so the offsets
    and what the tail serves are those of reading message by message."""

    async def scenario() -> None:
        log = PartitionLog(_Backend([]), _Metadata(), "t")  # type: ignore[arg-type]
        log._stream = _TailedStream(_stored_entries())  # type: ignore[assignment]
        task = asyncio.create_task(log._tail_loop())
        try:
            for _ in range(200):
                if log.next_offset == 35:
                    break
                await asyncio.sleep(0.01)
            assert log.next_offset == 35 and log.tail_start == 0
            served = await _read_all(log, 0, 1 << 20)
            assert [r[0] for r in served] == list(range(35))
            assert [r[3] for r in served] == [b"value-%d" % seq for seq in range(35)]
            items = log._tail.read(0, 1 << 20)
            assert is_read_batch(items[0].message) and items[0].message.id == (7, 0, 0)
            assert [e.offset for e in items if is_read_batch(e.message)] == [0, 10, 25]
        finally:
            task.cancel()

    asyncio.run(scenario())


# ---- records with headers (issue 32: a headered fetch after a restart) ----------------------

# two headers a record, as the bench's produce sends them: names out of order, so the
# mapping stores their order too (a JSON property, record_mapping.HEADER_ORDER)
TRACED = [("trace-id", b"4bf92f3577b34da6"), ("source", b"bench")]


def _headered(count: int, first: int = 0) -> list[OutMessage]:
    """Records with the bench's headers, some with other headers (in order: plain
    properties only; a null value: JSON) and some with none, between them."""
    out = []
    for i in range(first, first + count):
        headers = TRACED
        if i % 50 == 7:
            headers = [("a", b"1"), ("b", b"2")]
        elif i % 50 == 13:
            headers = [("n", None)]
        elif i % 50 == 21:
            headers = []
        out.append(to_message(b"k%d" % (i % 3), b"v" * 100, 1_700_000_000_000 + i // 7, headers))
    return out


def test_an_entry_of_records_with_headers_is_read_whole() -> None:
    """Each record of a headered entry was a message of its own, its headers parsed from
    JSON, its batch encoded per fetch: read whole as the plain case is, it serves what
    the message path serves and stands for the very messages that were stored."""
    for count in (1, 2, 60, 300):
        [entry] = entries(_headered(count), 0, True, 1 << 22)
        made = kafka_batch((2, 3, 0), entry.payload, count, PUBLISHED, PRODUCER_NAME)
        assert made is not None
        one_by_one = split_entry((2, 3, 0), entry.payload, count)
        assert _served(made, 10) == _one_by_one(one_by_one, 10)
        assert [r[4] for r in _served(made, 10)][:2] == [TRACED] * min(count, 2)
        assert messages_of(made) == one_by_one


def test_properties_the_mapping_does_not_write_are_read_message_by_message() -> None:
    """A binary key's mark, a producer codec, a header order that is not the headers',
    another stamp of the gateway's: the entry is not read whole."""
    stamped = to_message(b"k", b"v", 5, TRACED)
    assert stamped.properties is not None
    odd = [
        to_message(b"\xff", b"v", 5, TRACED),  # base64 key
        OutMessage(b"v", "k", {**stamped.properties, "__kafka.codec": "1"}, 5),
        OutMessage(b"v", "k", {**stamped.properties, HEADER_ORDER: '["source"]'}, 5),
        OutMessage(b"v", "k", {"__gw.other": "1"}, 5),
    ]
    for message in odd:
        [entry] = entries([message, to_message(b"k", b"v", 5, TRACED)], 0, True, 1 << 20)
        assert kafka_batch((1, 1, 0), entry.payload, 2, PUBLISHED, PRODUCER_NAME) is None


def test_pulsar_client_layout_with_headers_reads_whole_too() -> None:
    """pulsar-client writes properties sorted by name (the stamp first, then the header
    order, then the headers) and the payload size before the event time."""
    builder = BatchBuilder()
    for index in range(5):
        stamp = f"{40 + index}{'+' if index < 4 else ''}"
        properties = to_message(None, None, 0, TRACED).properties or {}
        builder.add_message(b"v", "key", dict(sorted({SEQ: stamp, **properties}.items())), 9)
    built = builder.build()
    made = kafka_batch((1, 1, 0), built.payload, 5, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    one_by_one = split_entry((1, 1, 0), built.payload, 5)
    assert _served(made, 0) == _one_by_one(one_by_one, 0)
    assert [r[4] for r in _served(made, 0)] == [TRACED] * 5
    assert messages_of(made) == one_by_one


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_fetch_of_headered_entries_reads_each_entry_once(idempotent: bool) -> None:
    """A fetch after a restart, as the Fetch handler does it (a history read of about the
    budget, then that many bytes of batches): every entry read is served in that answer,
    and one reader goes through the partition. Read message by message, the batch of
    headered records outgrew the bytes the read counted, the fetch cut it and the next
    read reopened a reader at a checkpoint to read the cut records again. (An idempotent
    producer's stamps that the record count contradicts: still read message by message,
    test_read_idempotent.py.)"""

    async def scenario() -> None:
        raw = []
        for number in range(40):
            messages = _headered(100, number * 100)
            if idempotent:
                for message in messages:
                    message.properties = {**(message.properties or {}), PRODUCER: "9:0:0:5"}
                messages[0].properties = {**(messages[0].properties or {}), FROM: "0"}
            [entry] = entries(messages, number * 100, True, 1 << 22)
            made = kafka_batch((7, number, 0), entry.payload, 100, PUBLISHED, PRODUCER_NAME)
            assert (made is None) == idempotent
            raw.append(((7, number, 0), entry.payload, 100))
        backend = _Backend(raw, per_read=8)
        log = PartitionLog(backend, None, "t")  # type: ignore[arg-type]
        log.next_offset = 4_000
        offset = 0
        budget = 64 * 1024
        while offset < 4_000:
            read = await log.read(offset, budget)
            records, count = encode_entry_parts(read, budget, True)
            assert count == sum(int(e.message.properties.get(RECORDS, 1)) for e in read)
            served = [r for r in _records(bytes(records)) if r[0] >= offset]
            assert served[0][0] == offset and served[-1][4] == TRACED
            offset = served[-1][0] + 1
        assert len(backend.streams) == 1
        await log.close()

    asyncio.run(scenario())


def test_a_fetch_reads_below_the_tail_no_entry_it_cannot_serve() -> None:
    """Fetches after a restart through the Fetch handler's read (`fetch._read`: steps of
    `bytes_per_turn` up to the partition's budget), then its encoding: every entry read
    below the tail is served, so one reader goes through the partition. A step after the
    first took an entry over what the response had left, which the encoding dropped and the
    next fetch asked for again: a new reader at a checkpoint for every fetch (issue 32)."""

    async def scenario() -> None:
        raw = []
        for number in range(30):
            messages = [OutMessage(b"v" * 100, f"k{i % 3}", None, 1_000 + i) for i in range(100)]
            [entry] = entries(messages, number * 100, True, 1 << 22)
            raw.append(((7, number, 0), entry.payload, 100))
        backend = _Backend(raw, per_read=4)
        log = PartitionLog(backend, None, "t")  # type: ignore[arg-type]
        log.next_offset = 3_000
        # entries of about 11 KB: three fit a budget of 40 KB, read 16 KB a step
        turns = LoopTurns(bytes_per_turn=16 * 1024)
        budget = 40 * 1024
        offset = fetches = 0
        while offset < 3_000:
            read = await fetch_read(turns, log, offset, budget)
            _, count = encode_entry_parts(read, budget, True)
            assert count == sum(records_in(e.message) for e in read)
            offset += count
            fetches += 1
        assert fetches == 10 and len(backend.streams) == 1
        await log.close()

    asyncio.run(scenario())
