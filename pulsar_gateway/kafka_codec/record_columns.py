"""A batch body's records as columns (keys, values, timestamps), read by aiokafka's compiled
record parser, for the batches it reads exactly as our own walk does.

The one pass (record_entry.py) walks a batch's records in Python bytecode, most of the
produce path's time (docs/pulsar-protocol.md, "Columns"). aiokafka (a dependency already,
for the migrate and parity tools) reads records in compiled code; the entry is then made
with C-level passes over whole columns (map, zip, join), no bytecode per record. Only the
common batch is taken: every record keyed and without headers (a first record without a
key or with headers sends the batch to the walk before any parse).

Its parser is not ours: it reads a record's attributes as a varint, accepts varints of any
length up to ten bytes and any negative length as null, where the walk refuses what
Kafka's own parser refuses. So a batch is taken only when nothing can differ: every field in
its shortest encoding (the records' sizes, worked out from the columns, add up to the
body's exact length: any longer encoding, an attributes byte over 0x7f included, makes the
body longer), no null key or value (a null's length may be any negative number; the walk
refuses all but -1), offset deltas 0..n-1 and timestamps well inside the int64 range.
Anything else (and any error) answers None: the walk then reads the batch and decides,
with its own errors. tests/unit/test_record_columns.py holds the columns to the walk's
records for random, spoilt and hand-made odd batches.

Memory: aiokafka's parser reads at most the byte after its buffer when a record is cut
short; the buffer handed to it is always a `bytes` object, whose terminating NUL that
byte is."""

from __future__ import annotations

import bisect
import operator
import struct
from typing import NamedTuple

from aiokafka.record.default_records import DefaultRecordBatch

from pulsar_gateway.kafka_codec.record_codec import RecordBatchError, varint_slow

# compiled (aiokafka's `_crecords`), or its pure-Python fallback: slower than our own walk
COMPILED = "_crecords" in DefaultRecordBatch.__module__
# a batch's header before the records: only the count, the base timestamp and a zero
# attributes word (no codec: the body is given inflated; create time) are read from it
_HEADER = struct.Struct(">qiibIhiqqqhii")
_TS_BOUND = 1 << 62  # a timestamp delta's bound (no wrapping int64 sum, nine bytes at most)
_offset = operator.attrgetter("offset")
_key = operator.attrgetter("key")
_value = operator.attrgetter("value")
_timestamp = operator.attrgetter("timestamp")
_headers = operator.attrgetter("headers")


class Columns(NamedTuple):
    """A batch's records, a list a field: keys (never None nor empty), values (never None)
    and timestamps. None of its records has headers."""

    keys: list[bytes]
    values: list[bytes]
    times: list[int]


def varint_size(value: int) -> int:
    """The bytes of an unsigned varint's shortest encoding."""
    return (value.bit_length() + 6) // 7 or 1


def _length_sizes(lengths: list[int], low: int, high: int) -> int:
    """The bytes of the zigzag varints of non-negative `lengths` (between `low` and
    `high`), shortest encodings."""
    size = varint_size(2 * low)
    if size == varint_size(2 * high):
        return size * len(lengths)
    ordered = sorted(lengths)
    total = len(ordered)
    bound = 64  # 2 * length >= 128: a byte more, and so on every 7 bits
    while bound <= high:
        total += len(ordered) - bisect.bisect_left(ordered, bound)
        bound <<= 7
    return total


def _delta_sizes(times: list[int], base: int, low: int, high: int) -> int:
    """The bytes of the timestamp deltas' zigzag varints, shortest encodings (`low` and
    `high`: the smallest and largest delta)."""
    if -64 <= low and high < 64:
        return len(times)
    ordered = sorted(times)
    total = len(ordered)
    half = 64  # zigzag(d) >= 2 * half when d >= half or d < -half
    while half <= max(high, -low):
        total += len(ordered) - bisect.bisect_left(ordered, base + half)
        total += bisect.bisect_left(ordered, base - half)
        half <<= 7
    return total


def _index_sizes(count: int) -> int:
    """The bytes of the offset deltas 0..count-1 as zigzag varints."""
    total = count
    bound = 64
    while bound < count:
        total += count - bound
        bound <<= 7
    return total


def _keyed_without_headers(buf: bytes) -> bool:
    """Whether the first record has a key and no headers: the batches this reads (one
    whose first record has no key or has headers is seldom a batch it could take, and
    the walk then does without the parse)."""
    try:
        size, pos = varint_slow(buf, 0, 5)
        end = pos + size
        _, pos = varint_slow(buf, pos + 1, 10)  # after the attributes: the time delta
        _, pos = varint_slow(buf, pos, 5)  # the offset delta
        key_length, _ = varint_slow(buf, pos, 5)
        return key_length > 0 and end <= len(buf) and buf[end - 1] == 0  # no headers
    except (RecordBatchError, IndexError):
        return False


def read_columns(buf: bytes, count: int, base_ts: int) -> Columns | None:
    """The `count` records of the batch body `buf` as columns, or None (see above)."""
    if not COMPILED or count <= 0 or not -_TS_BOUND < base_ts < _TS_BOUND:
        return None
    if not _keyed_without_headers(buf):
        return None
    head = _HEADER.pack(
        0, len(buf) + 49, -1, 2, 0, 0, count - 1, base_ts, base_ts, -1, -1, -1, count
    )
    try:
        records = list(DefaultRecordBatch(head + buf))
    except Exception:  # noqa: BLE001 - any refusal: the walk refuses it in its own words
        return None
    if list(map(_offset, records)) != list(range(count)) or any(map(_headers, records)):
        return None
    keys = list(map(_key, records))
    values = list(map(_value, records))
    if None in keys or None in values:
        return None
    times = list(map(_timestamp, records))
    low_t, high_t = min(times) - base_ts, max(times) - base_ts
    if not -_TS_BOUND < low_t or not high_t < _TS_BOUND:
        return None
    key_lengths = list(map(len, keys))
    value_lengths = list(map(len, values))
    low_k, high_k = min(key_lengths), max(key_lengths)
    low_v, high_v = min(value_lengths), max(value_lengths)
    # each record's bytes after its length: attributes, time delta, offset delta, key,
    # value, a header count of 0
    inner = (
        2 * count
        + _delta_sizes(times, base_ts, low_t, high_t)
        + _index_sizes(count)
        + _length_sizes(key_lengths, low_k, high_k)
        + sum(key_lengths)
        + _length_sizes(value_lengths, low_v, high_v)
        + sum(value_lengths)
    )
    # the records' lengths: the same size each, or not known without a walk
    smallest = 4 + varint_size(2 * low_k) + low_k + varint_size(2 * low_v) + low_v
    largest = (
        2
        + varint_size(2 * max(-low_t, high_t) + 1)
        + varint_size(2 * count)
        + varint_size(2 * high_k)
        + high_k
        + varint_size(2 * high_v)
        + high_v
    )
    length_size = varint_size(2 * smallest)
    if length_size != varint_size(2 * largest) or inner + length_size * count != len(buf):
        return None
    return Columns(keys, values, times)
