"""A batch's records read as columns by aiokafka's compiled parser
(kafka_codec/record_columns.py) are exactly the records our own walk reads, or not read at
all: for random plain batches, for spoilt ones (never taken where the walk refuses or reads
otherwise), and for the encodings the two parsers read differently (longer varints, null
lengths other than -1, an attributes byte over 0x7f). The entry built from the columns is
byte for byte the walk's."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.kafka_codec.record_batch import HEADER_SIZE, Record, encode_batch
from pulsar_gateway.kafka_codec.record_codec import RecordBatchError, decode_records
from pulsar_gateway.kafka_codec.record_columns import COMPILED, read_columns
from pulsar_gateway.kafka_codec.record_entry import build_entry, walk_entry

BASE_TS = 1_795_977_812_517
plain_keys = st.binary(min_size=1, max_size=4) | st.sampled_from([b"k1", b"order-17", b"x" * 70])
# records of 64 to 8191 bytes (a two-byte length each: see the last test for the others)
values = st.binary(min_size=60, max_size=200) | st.sampled_from([b"v" * 200, b"w" * 8000])
deltas = st.integers(-5, 70) | st.integers(-(2**40), 2**40)
plain = st.lists(st.tuples(plain_keys, values, deltas), min_size=1, max_size=90)


def _body(fields: list[tuple[bytes | None, bytes | None, int]], headers: bool = False) -> bytes:
    batch = [
        Record(index, BASE_TS + delta, key, value, [("h", b"1")] if headers else [])
        for index, (key, value, delta) in enumerate(fields)
    ]
    return bytes(encode_batch(0, batch))[HEADER_SIZE:]


def _walk(body: bytes, count: int) -> object:
    try:
        records = decode_records(body, count, BASE_TS)
    except (RecordBatchError, IndexError):
        return "refused"
    if [r.offset_delta for r in records] != list(range(count)):
        return "refused"
    if any(r.headers for r in records):
        return "headers"
    return [r.key for r in records], [r.value for r in records], [r.timestamp for r in records]


def test_the_compiled_parser_is_there() -> None:
    """Without it every batch takes the walk: correct, but the point of the module lost."""
    assert COMPILED


@settings(max_examples=examples(300), deadline=None)
@given(plain)
def test_plain_batches_are_read_as_the_walk_reads_them(fields) -> None:
    body = _body(fields)
    columns = read_columns(body, len(fields), BASE_TS)
    assert columns is not None
    assert tuple(columns) == _walk(body, len(fields))


@settings(max_examples=examples(300), deadline=None)
@given(plain, st.sampled_from([0, 3]))
def test_the_entry_from_columns_is_the_walks(fields, codec) -> None:
    body = _body(fields)
    columns = read_columns(body, len(fields), BASE_TS)
    assert columns is not None
    walked = walk_entry(body, len(fields), BASE_TS, codec)
    assert build_entry(body, len(fields), BASE_TS, codec) == walked


@settings(max_examples=examples(500), deadline=None)
@given(
    plain,
    st.lists(st.tuples(st.integers(0, 20000), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(-1, 1),
)
def test_spoilt_batches_are_taken_only_as_the_walk_reads_them(fields, flips, count_change) -> None:
    raw = bytearray(_body(fields))
    for position, value in flips:
        raw[position % len(raw)] = value
    count = max(1, len(fields) + count_change)
    columns = read_columns(bytes(raw), count, BASE_TS)
    if columns is not None:
        assert tuple(columns) == _walk(bytes(raw), count)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _record(fields: bytes, length_bytes: bytes | None = None) -> bytes:
    return (length_bytes or _varint(2 * len(fields))) + fields


def test_encodings_the_parsers_read_differently_are_left_to_the_walk() -> None:
    """Each of these aiokafka reads without complaint; the walk refuses it or reads it
    otherwise. The batch's other records are plain, so only the odd field can tell."""
    first = _record(b"\x00\x00\x00\x04k1\x04v1\x00")  # plain: key "k1", value "v1"
    cases = {
        # a value length of -5 (aiokafka: null; the walk refuses all but -1)
        "negative length": first + _record(b"\x00\x00\x02\x04k2\x09\x00"),
        # an offset delta in six bytes (the walk reads at most five)
        "long varint": first + _record(b"\x00\x00\x82\x80\x80\x80\x80\x00\x04k2\x04v2\x00"),
        # an attributes byte over 0x7f (aiokafka reads it as a varint)
        "attributes": first + _record(b"\x80\x00\x00\x02\x04k2\x04v2\x00"),
        # a record length in two bytes where one would do (the walk reads it as written)
        "long length": first + _record(b"\x00\x00\x02\x04k2\x04v2\x00", b"\x92\x00"),
        # a null key on a later record
        "null key": first + _record(b"\x00\x00\x02\x01\x04v2\x00"),
    }
    for name, body in cases.items():
        assert read_columns(body, 2, BASE_TS) is None, name
    # the same two records written plainly are taken
    plain_body = first + _record(b"\x00\x00\x02\x04k2\x04v2\x00")
    assert read_columns(plain_body, 2, BASE_TS) is not None


def test_batches_it_does_not_read_are_left_to_the_walk() -> None:
    fields = [(b"k", b"v", 0), (b"k", b"v", 1)]
    assert read_columns(_body(fields, headers=True), 2, BASE_TS) is None
    assert read_columns(_body([(None, b"v", 0), (b"k", b"v", 1)]), 2, BASE_TS) is None
    assert read_columns(_body([(b"", b"v", 0), (b"k", b"v", 1)]), 2, BASE_TS) is None
    assert read_columns(_body([(b"k", None, 0), (b"k", b"v", 1)]), 2, BASE_TS) is None
    # a record length straddling a varint size: not known without a walk
    straddling = [(b"k", b"v" * 50, 0), (b"k", b"v" * 80, 1)]  # 57 and 88 bytes
    assert read_columns(_body(straddling), 2, BASE_TS) is None
    assert _walk(_body(straddling), 2) != "refused"
