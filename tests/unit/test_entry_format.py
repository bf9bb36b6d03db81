"""Log entries of both formats -> Fetch bytes: stored batches come back as sent
(re-based, CRC intact), one-record messages as encoded batches, offsets in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.messages import LogEntry, StoredMessage, records_in
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.entry_format import (
    KAFKA,
    PULSAR,
    encode_entries,
    encode_entry_parts,
    format_of,
    records_of,
)
from pulsar_gateway.kafka_codec.protocol.wire_types import BY_REFERENCE, BlobParts
from pulsar_gateway.kafka_codec.record_batch import Record, decode_batches, encode_batch
from pulsar_gateway.kafka_codec.record_mapping import to_message


def _stored(out, mid: int) -> StoredMessage:
    return StoredMessage(
        (1, mid, -1), out.payload, out.key or "", dict(out.properties or {}), out.event_time, 9
    )


def _stored_values(size: int) -> st.SearchStrategy[list[list[bytes] | bytes]]:
    """Up to 8 entries, each a stored batch (a list of record values) or a one-record
    message (one value), values of up to `size` bytes."""
    return st.lists(
        st.one_of(
            st.lists(st.binary(max_size=size), min_size=1, max_size=5),  # a stored batch
            st.binary(max_size=size),  # a one-record message
        ),
        min_size=1,
        max_size=8,
    )


def _batch(values: list[bytes], codec: int) -> StoredMessage:
    records = [Record(i, 1000 + i, b"k", v, [("h", b"x")]) for i, v in enumerate(values)]
    [decoded] = decode_batches(encode_batch(0, records, codec))
    [message] = KAFKA.encode(decoded)
    return _stored(message, 0)


@given(
    _stored_values(8),
    st.sampled_from([0, 1, 3, 4]),
)
def test_mixed_entries_fetch_in_order(items, codec) -> None:
    entries, expected, offset = [], [], 100
    for item in items:
        if isinstance(item, list):
            message = _batch(item, codec)
            expected += item
        else:
            message = _stored(to_message(b"k", item, 5, []), 0)
            expected.append(item)
        entries.append(LogEntry(offset, message))
        offset += records_in(message)
    data, count = encode_entries(entries)
    assert count == len(expected)
    got = []
    for batch in decode_batches(data):  # CRCs verified
        got += [(batch.base_offset + r.offset_delta, r.value) for r in batch.records]
    assert got == list(zip(range(100, offset), expected, strict=True))
    flat = [(o, v) for e in entries for o, _k, v, _h, _t in records_of(e)]
    assert flat == got
    assert [r.offset for e in entries for r in records_of(e)] == list(range(100, offset))
    assert [format_of(e.message) for e in entries] == [
        KAFKA if isinstance(item, list) else PULSAR for item in items
    ]


@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=6) | st.text(max_size=4).map(str.encode),
            st.none() | st.binary(max_size=8),
            st.integers(-3, 2**41),
            st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)), max_size=2),
        ),
        min_size=1,
        max_size=10,
    ),
    st.sampled_from([0, 1]),
)
def test_pulsar_format_maps_each_record_as_to_message(records, codec) -> None:
    """The encoder's shortcuts for common records (no headers; no key or a UTF-8 one) give
    what the mapping gives (an empty key is none, any other key base64 with its mark)."""
    batch = encode_batch(
        0,
        [Record(i, max(t, 0), k, v, h) for i, (k, v, t, h) in enumerate(records)],
        codec,
    )
    [decoded] = decode_batches(batch)
    got = PULSAR.encode(decoded)
    want = [to_message(r.key, r.value, r.timestamp, r.headers) for r in decoded.records]
    if codec:
        for message in want:
            message.properties = {**(message.properties or {}), "__kafka.codec": str(codec)}
    assert got == want


@given(
    _stored_values(50),
    st.integers(0, 1200),
    st.booleans(),
)
def test_a_fetch_answer_in_parts_is_the_joined_one_without_copying_stored_batches(
    items, budget, min_one
) -> None:
    """`encode_entry_parts` hands stored batches over as they are held (a re-based copy of
    their header only), and the response encoder writes the parts as the joined bytes."""
    entries, offset = [], 100
    for item in items:
        message = (
            _batch(item, 0) if isinstance(item, list) else _stored(to_message(b"k", item, 5, []), 0)
        )
        entries.append(LogEntry(offset, message))
        offset += records_in(message)
    joined, count = encode_entries(entries, budget, min_one)
    records, parts_count = encode_entry_parts(entries, budget, min_one)
    assert (bytes(records), parts_count) == (bytes(joined), count)
    if isinstance(records, BlobParts):
        held = {id(e.message.payload) for e in entries if KAFKA.wrote(e.message)}
        views = [p for p in records.parts if isinstance(p, memoryview)]
        assert views and all(id(view.obj) in held for view in views)
    body = _fetch_body(records, offset)
    for version in (4, 12):
        in_parts = protocol.encode_response(1, version, 7, body)
        assert b"".join(protocol.encode_response_parts(1, version, 7, body)) == in_parts
        body["responses"][0]["partitions"][0]["records"] = bytes(joined)
        assert in_parts == protocol.encode_response(1, version, 7, body)
        body["responses"][0]["partitions"][0]["records"] = records


def test_a_fetch_answer_for_the_socket_holds_big_stored_batches_as_they_are_held() -> None:
    """`encode_response_parts` gives a Fetch answer as buffers whose bytes are
    `encode_response`'s, with a stored batch of BY_REFERENCE bytes or more among them as
    the view of it `encode_entry_parts` made, not a copy (wire_types.PartsWriter)."""
    big = _batch([bytes(range(256)) * 160] * 2, 0)  # 80 KiB
    entries = [
        LogEntry(100, big),
        LogEntry(102, _stored(to_message(b"k", b"v", 5, []), 0)),
        LogEntry(103, _batch([b"small"], 0)),
    ]
    records, count = encode_entry_parts(entries)
    assert count == 4
    body = _fetch_body(records, 104)
    for version in (4, 12, 16):
        parts = protocol.encode_response_parts(1, version, 7, body)
        assert b"".join(parts) == protocol.encode_response(1, version, 7, body)
        held = [p for p in parts if isinstance(p, memoryview) and p.obj is big.payload]
        assert len(held) == 1 and held[0].nbytes >= BY_REFERENCE
        assert all(isinstance(p, bytearray) for p in parts if p is not held[0])


def _fetch_body(records: object, offset: int) -> dict:
    """A Fetch response body with one partition holding `records`."""
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": offset,
                        "last_stable_offset": offset,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": records,
                    }
                ],
            }
        ],
    }
