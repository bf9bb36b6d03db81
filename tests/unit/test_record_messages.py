"""Produced records decoded straight into `pulsar`-format messages
(kafka_codec/record_messages.py) give what decoding the records and mapping each gives, and
refuse what that refuses, with the same error code: malformed bytes, and a record whose
offset delta is not its index."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.kafka_codec.entry_format import PULSAR
from pulsar_gateway.kafka_codec.record_batch import (
    HEADER_SIZE,
    Record,
    RecordBatchError,
    check_produce_batches,
    decode_batches,
    encode_batch,
)

keys = st.none() | st.binary(max_size=6) | st.text(max_size=4).map(str.encode)
headers = st.lists(
    st.tuples(st.sampled_from(["a", "b", "__gw.seq", "é"]), st.none() | st.binary(max_size=3)),
    max_size=2,
)
records = st.lists(
    st.tuples(keys, st.none() | st.binary(max_size=200), st.integers(-1, 2**41), headers),
    min_size=1,
    max_size=12,
)


def _outcome(raw: bytes, as_messages: bool, append_time: int | None) -> object:
    try:
        batches = decode_batches(raw, verify_crc=False, messages=as_messages)
        check_produce_batches(batches, 9)
        return [
            (m.payload, m.key, m.properties, m.event_time)
            for batch in batches
            for m in PULSAR.encode(batch, append_time)
        ]
    except RecordBatchError as exc:
        return ("refused", exc.code)


@settings(max_examples=examples(400), deadline=None)
@given(
    records,
    st.sampled_from([0, 1, 3]),
    st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=3),
    st.none() | st.integers(0, 11),
    st.none() | st.integers(1, 2**41),
)
def test_messages_decoded_in_one_pass_are_those_of_the_records(
    fields, codec, flips, swapped, append_time
) -> None:
    batch_records = [
        Record(index, max(timestamp, 0), key, value, header)
        for index, (key, value, timestamp, header) in enumerate(fields)
    ]
    if swapped is not None and swapped < len(batch_records) - 1:
        # a record out of place: the batch's count and last delta still agree
        batch_records[swapped] = batch_records[swapped]._replace(offset_delta=swapped + 7)
    raw = bytearray(encode_batch(0, batch_records, codec))
    if codec == 0:  # bytes of the records themselves spoilt (no CRC check here)
        for position, value in flips:
            at = HEADER_SIZE + position % max(1, len(raw) - HEADER_SIZE)
            if at < len(raw):
                raw[at] = value
    one_pass = _outcome(bytes(raw), True, append_time)
    assert one_pass == _outcome(bytes(raw), False, append_time)
