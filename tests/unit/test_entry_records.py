"""A batched entry the gateway wrote, read as its records in one pass (storage/kafka/
entry_records.py, parity's wire reader): the records are what the message path gives
(`records_of` on each message), and the item stands for the entry in the resend filter."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from harness.split_entries import PRODUCER, PUBLISHED, split_entry
from pulsar_gateway.gateway.backend.native_writer import entries
from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
from pulsar_gateway.gateway.backend.wire.batch import BatchBuilder
from pulsar_gateway.gateway.messages import RECORDS, SEQ, WHOLE_ENTRY, LogEntry
from pulsar_gateway.kafka_codec.entry_format import records_of
from pulsar_gateway.kafka_codec.record_entry import mark_codec
from pulsar_gateway.kafka_codec.record_mapping import to_message
from pulsar_gateway.storage.kafka.entry_records import EntryRecords, entry_records
from pulsar_gateway.storage.kafka.entry_records_fast import plain_entry_records

names = st.sampled_from(["a", "n", "z", "trace", "__kafka.x", "__gw.y", "é"])
header_values = st.none() | st.binary(max_size=6) | st.sampled_from([b"1", b"text"])
kafka_records = st.tuples(
    st.none() | st.binary(max_size=8) | st.sampled_from([b"k1", b"k2"]),
    st.none() | st.binary(max_size=40),
    st.integers(0, 2**41),
    st.lists(st.tuples(names, header_values), max_size=3),
)


def _message_path(data: bytes, count: int) -> list[tuple[Any, ...]]:
    """The records as parity read them message by message (native_reader.stored_messages,
    then records_of)."""
    out = []
    for stored in split_entry((1, 2, 0), data, count):
        out += [tuple(r)[1:] for r in records_of(LogEntry(0, stored))]
    return out


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(kafka_records, min_size=1, max_size=30),
    st.integers(0, 2**40),
    st.booleans(),
    st.sampled_from([0, 1, 3]),
)
def test_an_entry_read_whole_gives_what_message_by_message_gives(
    records: list[tuple[Any, ...]], first: int, whole: bool, codec: int
) -> None:
    """Every record shape, as sent or compressed by its producer (the codec marked on
    each message, as a produced compressed batch is stored)."""
    messages = [to_message(key, value, ts, headers) for key, value, ts, headers in records]
    mark_codec(messages, codec)
    for entry in entries(messages, first, whole, 1 << 20):
        if not entry.batched:
            continue
        count = entry.num_messages
        made = entry_records(entry.payload, count, PUBLISHED, PRODUCER)
        assert made is not None  # every entry the gateway writes is the plain case
        low, high, got = made
        assert high - low == count - 1
        assert [(k, v, list(h), t) for k, v, h, t in got] == [
            (k, v, list(h), t) for k, v, h, t in _message_path(entry.payload, count)
        ]


def test_entries_the_gateway_did_not_write_whole_go_message_by_message() -> None:
    """No stamp (a plain Pulsar producer), stamps that skip, or a message that holds a
    Kafka batch: None, and the reader splits the entry as before."""
    for stamps in ([None, None], ["4+", "6"], ["1", None]):
        builder = BatchBuilder()
        for index, stamp in enumerate(stamps):
            properties = {} if stamp is None else {SEQ: stamp}
            builder.add_message(b"v%d" % index, "key", properties, 1_700_000_000_000)
        assert entry_records(builder.build().payload, len(stamps), PUBLISHED, PRODUCER) is None
    builder = BatchBuilder()
    builder.add_message(b"batch", None, {SEQ: "1", RECORDS: "3"}, 1)
    assert entry_records(builder.build().payload, 1, PUBLISHED, PRODUCER) is None


def test_the_item_stands_for_the_entry_in_the_resend_filter() -> None:
    """The whole-entry item carries the count and the last stamp: the first copy takes
    offsets, a resent copy of the same entry takes none, and its records wait until taken."""
    builder = BatchBuilder()
    for index in range(3):
        stamp = f"{7 + index}{'+' if index < 2 else ''}"
        builder.add_message(b"v%d" % index, "k", {SEQ: stamp, "h": "x"}, 1_700_000_000_000)
    payload = builder.build().payload
    whole = EntryRecords()
    resends = ResendFilter()
    item = whole((5, 1, 0), payload, 3, PUBLISHED, PRODUCER)
    again = whole((5, 2, 0), payload, 3, PUBLISHED, PRODUCER)
    assert item is not None and again is not None
    assert item.properties[WHOLE_ENTRY] and item.properties[RECORDS] == "3"
    assert resends.original_offset(item, 100) is None
    assert resends.original_offset(again, 103) == 100
    records = whole.take(item)
    assert records is not None and [r[1] for r in records] == [b"v0", b"v1", b"v2"]
    assert records[0][2] == [("h", b"x")]
    assert whole.take(item) is None and whole.take(again) is not None
    assert not whole.waiting


def test_the_writers_common_entry_is_read_straight_from_its_bytes() -> None:
    """A migrated batch's shape (a key, one header that differs per record, the producer's
    codec marked): read by the one loop (entry_records_fast.py), as the message path reads it."""
    messages = [
        to_message(b"k%d" % i, b"v" * i, 1_700_000_000_000 + i, [("n", b"%d" % i)])
        for i in range(50)
    ]
    mark_codec(messages, 3)
    (entry,) = entries(messages, 7, True, 1 << 20)
    fast = plain_entry_records(entry.payload, 50, PUBLISHED)
    assert fast is not None
    assert fast == entry_records(entry.payload, 50, PUBLISHED, PRODUCER)
    assert fast[:2] == (7, 56)
    assert [(k, v, list(h), t) for k, v, h, t in fast[2]] == _message_path(entry.payload, 50)


def test_entries_of_other_writers_read_as_the_message_path_reads_them() -> None:
    """Stamped entries the gateway's writer would not make (an empty partition key, headers
    out of name order or repeated, the stamp not first): the same records either way."""
    layouts: list[tuple[str | None, dict[str, str]]] = [
        ("", {SEQ: "{}", "h": "x"}),
        ("k", {SEQ: "{}", "b": "1", "a": "2"}),
        ("k", {"a": "2", SEQ: "{}"}),
        (None, {SEQ: "{}", "a": "1", "é": "2", "z": "3"}),
    ]
    for key, properties in layouts:
        builder = BatchBuilder()
        for index in range(3):
            stamp = f"{4 + index}{'+' if index < 2 else ''}"
            filled = {n: v.format(stamp) for n, v in properties.items()}
            builder.add_message(b"v%d" % index, key, filled, 1_700_000_000_000 + index)
        payload = builder.build().payload
        made = entry_records(payload, 3, PUBLISHED, PRODUCER)
        assert made is not None, (key, properties)
        assert [(k, v, list(h), t) for k, v, h, t in made[2]] == _message_path(payload, 3)
