"""A produced batch's bytes prebuilt straight into a Pulsar batched entry
(kafka_codec/record_entry.py, native_writer.prebuilt_entry) give exactly the entry the long
way builds (records decoded into messages, `native_writer.entries` from those), byte for
byte, for random batches, sequences and codecs; refuse what the long way refuses, with the
same error; and step aside (the long way then) once a message was looked at or when the
entry would be over the size limit."""

from __future__ import annotations

import dataclasses

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.native_writer import entries, prebuilt_entry
from pulsar_gateway.gateway.messages import ProducedBatch, RecordMessages
from pulsar_gateway.handlers.kafka.port import ProducerStamp
from pulsar_gateway.kafka_codec.record_batch import HEADER_SIZE, Record, encode_batch
from pulsar_gateway.kafka_codec.record_codec import RecordBatchError
from pulsar_gateway.kafka_codec.record_entry import mark_codec, record_messages
from pulsar_gateway.kafka_codec.record_messages import decode_messages
from pulsar_gateway.storage.kafka.producer_state import produced, stamp

UNLIMITED = 1 << 40
keys = (
    st.none()
    | st.binary(max_size=6)
    | st.text(max_size=4).map(str.encode)
    | st.sampled_from([b"", b"k1", "ключ".encode()])
)
names = st.sampled_from(["", "a", "b", "__gw.seq", "__kafka.codec", "é", "ä", "z" * 63, "z" * 130])
# header values: short bytes (UTF-8 or not), and text past one- and two-byte lengths
header_values = (
    st.none()
    | st.binary(max_size=3)
    | st.just(b"v")
    | st.text(max_size=70).map(str.encode)
    | st.sampled_from([b"w" * 127, b"w" * 8191, b"w" * 8192, "ж".encode() * 100])
)
headers = st.lists(st.tuples(names, header_values), max_size=3)
values = st.none() | st.binary(max_size=300)
records = st.lists(
    st.tuples(keys, values, st.integers(-3, 2**41), headers), min_size=1, max_size=15
)
sequences = st.sampled_from([0, 1, 7, 95, 998, 10**12 - 3]) | st.integers(0, 2**40)


def _body(fields: list[tuple[bytes | None, bytes | None, int, list]]) -> tuple[bytes, int]:
    """The records' bytes as a batch holds them uncompressed, and the base timestamp."""
    batch = [
        Record(index, timestamp, key, value, header)
        for index, (key, value, timestamp, header) in enumerate(fields)
    ]
    return bytes(encode_batch(0, batch))[HEADER_SIZE:], fields[0][2]


def _long_way(body: bytes, count: int, base_ts: int, codec: int) -> object:
    try:
        return mark_codec(decode_messages(body, count, base_ts), codec)
    except RecordBatchError as exc:
        return ("refused", str(exc), exc.code)
    except IndexError:
        return "truncated"


def _one_pass(body: bytes, count: int, base_ts: int, codec: int) -> object:
    try:
        return record_messages(body, count, base_ts, codec)
    except RecordBatchError as exc:
        return ("refused", str(exc), exc.code)
    except IndexError:
        return "truncated"


idempotent = st.none() | st.builds(
    ProducerStamp, st.integers(0, 2**40), st.integers(0, 300), st.integers(0, 2**31 - 1)
)


@settings(max_examples=examples(500), deadline=None)
@given(records, st.sampled_from([0, 1, 3, 4]), sequences, st.booleans(), idempotent)
# headers the one pass maps from their bytes beside those it leaves to the long way
# (record_entry.plain_properties): a repeated name, names out of order, then in order
@example([(None, b"x", 5, [("a", b"1"), ("a", b"2")])], 0, 1, False, None)
@example([(b"k", b"x", 5, [("b", b"1"), ("a", b"2")])], 0, 1, False, None)
@example([(b"k", b"x", 5, [("a", b"1"), ("b", "ж".encode() * 100)])], 3, 1, True, None)
# "%" in a key, a header (own properties) and an idempotent producer's stamp: the writer
# makes each message's head from a %-format (native_writer._heads); a size word of 0x25
@example([(b"%", b"x", 5, [("a", b"%d%")])] * 4, 0, 1, True, None)
@example([(b"%s", b"%", 37, [("%", b"%%")])] * 3, 1, 98, True, ProducerStamp(37, 37, 37, 0))
@example([(None, b"x" * n, 5, []) for n in range(20, 40)], 0, 1, True, None)
def test_the_prebuilt_entry_is_the_one_entries_builds(
    fields, codec, first, whole, producer
) -> None:
    """Also with an idempotent producer's stamps (storage's `stamp`), which the one pass
    notes rather than makes the messages for."""
    body, base_ts = _body(fields)
    messages = mark_codec(decode_messages(body, len(fields), base_ts), codec)
    lazy = record_messages(body, len(fields), base_ts, codec)
    if producer is not None:
        producer = dataclasses.replace(
            producer, last_sequence=producer.first_sequence + len(fields) - 1
        )
        messages = stamp(messages, producer)
        lazy = stamp(lazy, producer)
        assert isinstance(lazy, RecordMessages)
        # what the tailer's item for the whole batch carries, without making a message
        assert produced(lazy, b"raw") == produced(messages, b"raw")
    produced_batch = ProducedBatch(b"raw", {"x": "1"})
    (expected,) = entries(messages, first, whole, UNLIMITED, produced_batch)

    assert len(lazy) == len(fields)
    assert lazy.payload_bytes == sum(len(value or b"") for _, value, _, _ in fields)
    prebuilt = lazy.take_prebuilt()
    assert prebuilt is not None
    built = prebuilt_entry(prebuilt, lazy, first, whole, UNLIMITED, produced_batch)
    assert built is not None
    assert built.payload == expected.payload
    assert built.metadata_fields == expected.metadata_fields
    assert (built.num_messages, built.batched) == (expected.num_messages, expected.batched)
    note, expected_note = built.note, expected.note
    assert note.first_sequence == expected_note.first_sequence  # type: ignore[attr-defined]
    assert note.produced is produced_batch  # type: ignore[attr-defined]
    # the reader's view of the entry (written_entries.py) is the same either way
    assert note.stored(1, 2, 3, "p") == expected_note.stored(1, 2, 3, "p")  # type: ignore[attr-defined]
    assert list(lazy) == messages


@settings(max_examples=examples(500), deadline=None)
@given(
    records,
    st.sampled_from([0, 2]),
    st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(-1, 2),
)
def test_spoilt_bytes_are_refused_as_the_long_way_refuses_them(
    fields, codec, flips, count_change
) -> None:
    body, base_ts = _body(fields)
    raw = bytearray(body)
    for position, value in flips:
        raw[position % len(raw)] = value
    count = max(1, len(fields) + count_change)
    long_way = _long_way(bytes(raw), count, base_ts, codec)
    one_pass = _one_pass(bytes(raw), count, base_ts, codec)
    if isinstance(one_pass, RecordMessages):
        assert one_pass.made() == long_way
    else:
        assert one_pass == long_way


def test_a_message_looked_at_turns_the_prebuilt_entry_off() -> None:
    body, base_ts = _body([(b"k", b"v", 5, []), (None, None, 6, [("h", b"1")])])
    lazy = record_messages(body, 2, base_ts, 0)
    lazy[0].properties = {"__kafka.txn": "1:0"}  # what a transaction's stamp does
    assert lazy.take_prebuilt() is None
    assert lazy[0].properties == {"__kafka.txn": "1:0"}  # the made messages are kept


def test_over_the_limit_the_prebuilt_entry_steps_aside() -> None:
    fields = [(b"k", b"x" * 100, 5, []) for _ in range(10)]
    body, base_ts = _body(fields)
    messages = decode_messages(body, 10, base_ts)
    # the smallest limit that keeps `entries` at one entry: one byte less, and the prebuilt
    # entry steps aside; its bound counts each payload size field too (3 bytes here)
    fits = next(
        limit for limit in range(1000, 3000) if len(entries(messages, 50, True, limit)) == 1
    )
    for limit, one in ((fits + 3 * 10, True), (fits - 1, False)):
        lazy = record_messages(body, 10, base_ts, 0)
        prebuilt = lazy.take_prebuilt()
        assert prebuilt is not None
        built = prebuilt_entry(prebuilt, lazy, 50, True, limit, None)
        assert (built is not None) == one


def test_a_base_time_near_the_int64_limits_is_not_prebuilt() -> None:
    body, base_ts = _body([(b"k", b"v", 2**63 - 2, [])])
    lazy = record_messages(body, 1, base_ts, 0)
    assert lazy.take_prebuilt() is None
    assert lazy.made() == decode_messages(body, 1, base_ts)


def test_a_batch_of_no_records_prebuilds_an_empty_entry() -> None:
    """(As before the writer made each message's head by a format: no message, no head.)"""
    lazy = record_messages(b"", 0, 1000, 0)
    prebuilt = lazy.take_prebuilt()
    assert prebuilt is not None
    built = prebuilt_entry(prebuilt, lazy, 5, True, UNLIMITED, None)
    assert built is not None and built.payload == b"" and built.num_messages == 0
