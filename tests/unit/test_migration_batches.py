"""The migration's batch-level copy: which source batches pass on as they are, which are
re-encoded, and what a read_committed copy skips (tools/migration/source_batches.py)."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.kafka_codec.record_batch import (
    Record,
    RecordBatchError,
    batch_headers,
    decode_batches,
    encode_batch,
)
from pulsar_gateway.tools.migration.source_batches import (
    SMALL_BATCH_RECORDS,
    Chunk,
    chunks_of,
    passed_on,
    rest_of,
    whole_batches,
)
from pulsar_gateway.tools.migration.translation import PartitionTranslation

BIG = SMALL_BATCH_RECORDS


def batch(base: int, count: int, codec: int = 0, **fields: object) -> bytes:
    records = [Record(i, 1_000 + i, f"k{base + i}".encode(), b"v", []) for i in range(count)]
    return bytes(encode_batch(base, records, codec, **fields))  # type: ignore[arg-type]


def headers(*raw: bytes) -> list:
    return batch_headers(b"".join(raw))


def keys(chunks: list[Chunk]) -> list[bytes]:
    return [r.key for c in chunks for r in decode_batches(c.batch)[0].records]


def offsets(chunks: list[Chunk]) -> list[int]:
    return [o for c in chunks for o in c.offsets]


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_a_big_batch_passes_on_as_it_is_without_its_producer_fields(codec):
    raw = batch(100, BIG, codec, producer_id=7, producer_epoch=2, base_sequence=40)
    chunks, position = chunks_of(headers(raw), 100, 10_000, [], set())
    assert position == 100 + BIG
    [chunk] = chunks
    assert chunk.offsets == range(100, 100 + BIG)
    [out] = decode_batches(chunk.batch)  # checks the new CRC
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (-1, -1, -1)
    assert out.base_offset == 0 and not out.is_transactional
    assert bytes(chunk.batch)[61:] == raw[61:]  # the records' bytes are the source's


def test_small_batches_are_gathered_into_one():
    raws = [batch(base, 10) for base in range(0, 50, 10)]
    chunks, position = chunks_of(headers(*raws), 0, 1_000, [], set())
    assert position == 50
    assert len(chunks) == 1 and offsets(chunks) == list(range(50))
    assert keys(chunks) == [f"k{i}".encode() for i in range(50)]


def test_only_the_records_inside_the_range_are_copied():
    raw = batch(0, BIG + 100)
    chunks, position = chunks_of(headers(raw), 30, BIG, [], set())
    assert offsets(chunks) == list(range(30, BIG))
    assert keys(chunks) == [f"k{i}".encode() for i in range(30, BIG)]
    assert position == BIG


def test_a_compacted_batch_is_renumbered_densely():
    records = [Record(d, 1, f"k{d}".encode(), b"v", []) for d in (0, 3, 4, 9)]
    raw = bytes(encode_batch(20, records))
    chunks, position = chunks_of(headers(raw), 20, 100, [], set())
    assert offsets(chunks) == [20, 23, 24, 29] and position == 30
    [out] = decode_batches(chunks[0].batch)
    assert [r.offset_delta for r in out.records] == [0, 1, 2, 3]


def test_log_append_time_becomes_the_records_timestamp():
    raw = batch(0, BIG, timestamp_type=1, max_timestamp=99_999)
    chunks, _ = chunks_of(headers(raw), 0, 10_000, [], set())
    [out] = decode_batches(chunks[0].batch)
    assert out.timestamp_type == 0
    assert {r.timestamp for r in out.records} == {99_999}


def test_aborted_transactions_and_markers_are_skipped_committed_ones_kept():
    aborted_pid, committed_pid = 11, 12
    txn = {"is_transactional": True, "producer_epoch": 0}
    raws = [
        batch(0, 5, producer_id=aborted_pid, **txn),
        batch(5, 5, producer_id=committed_pid, **txn),
        batch(10, 1, producer_id=aborted_pid, is_control=True, **txn),  # abort marker
        batch(11, 1, producer_id=committed_pid, is_control=True, **txn),  # commit marker
        batch(12, 5, producer_id=aborted_pid, **txn),  # its next transaction, committed
        batch(17, 1, producer_id=aborted_pid, is_control=True, **txn),
    ]
    chunks, position = chunks_of(headers(*raws), 0, 100, [(0, aborted_pid)], set())
    assert offsets(chunks) == [5, 6, 7, 8, 9, 12, 13, 14, 15, 16]
    assert position == 18


def test_an_abort_under_way_carries_over_to_the_next_fetch():
    pid = 11
    txn = {"is_transactional": True, "producer_epoch": 0, "producer_id": pid}
    aborting: set[int] = set()
    first, position = chunks_of(headers(batch(0, 5, **txn)), 0, 100, [(0, pid)], aborting)
    assert first == [] and position == 5 and aborting == {pid}
    second, position = chunks_of(
        headers(batch(5, 5, **txn), batch(10, 1, is_control=True, **txn)), 5, 100, [], aborting
    )
    assert second == [] and position == 11 and aborting == set()


def test_a_cut_last_batch_is_left_for_the_next_fetch():
    raw = batch(0, 3) + batch(3, 3)
    assert bytes(whole_batches(memoryview(raw[:-5]))) == raw[: len(batch(0, 3))]
    assert bytes(whole_batches(memoryview(raw))) == raw


def test_rest_of_drops_the_records_an_interrupted_run_wrote():
    chunk = Chunk(range(40, 40 + BIG), passed_on(memoryview(batch(40, BIG))))
    rest = rest_of(chunk, 7)
    assert list(rest.offsets) == list(range(47, 40 + BIG))
    assert keys([rest]) == [f"k{i}".encode() for i in range(47, 40 + BIG)]


def test_a_run_of_offsets_is_recorded_like_its_records_one_by_one():
    one_by_one = PartitionTranslation(0, 0)
    at_once = PartitionTranslation(0, 0)
    for sources, target in ((range(0, 10), 0), ([12, 13, 15], 10), (range(16, 30), 13)):
        one_by_one.add_range(list(sources), target)
        at_once.add_run(sources, target)
    assert at_once == one_by_one


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=400), st.integers(0, 400))
def test_batch_headers_raise_only_record_batch_errors(junk, cut):
    raw = bytearray(batch(0, 3) + junk)
    if len(raw) > 20:
        struct.pack_into(">i", raw, 8, min(len(raw), cut + 49) - 12)
        struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    try:
        found = batch_headers(whole_batches(memoryview(bytes(raw))))
    except RecordBatchError:
        return
    assert all(h.magic == 2 for h in found)


small_records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=5),
        st.none() | st.binary(max_size=150),
        st.integers(-(2**40), 2**41),
        st.lists(
            st.tuples(st.sampled_from(["a", "n", "é"]), st.none() | st.binary(max_size=4)),
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(80), deadline=None)
@given(
    st.lists(
        st.tuples(small_records, st.sampled_from([0, 1, 2, 3, 4]), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 12),
    st.integers(0, 40),
)
def test_gathered_records_are_the_batch_a_decode_and_encode_makes(sources, start, length):
    """Gathered small batches (their records' heads written again, the rest copied) are
    byte for byte the batch that decoding the records and encoding them again makes: the
    same records, offsets, timestamps (log-append time included), codec and header."""
    raws, expected, wanted, base, codec = [], [], [], 0, 0
    end = start + length
    for fields, batch_codec, append_time in sources:
        records = [Record(i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(fields)]
        stamp = {"timestamp_type": 1, "max_timestamp": 77} if append_time else {}
        raws.append(bytes(encode_batch(base, records, batch_codec, **stamp)))  # type: ignore[arg-type]
        for record in records:
            if start <= base + record.offset_delta < end:
                ts = 77 if append_time else record.timestamp
                expected.append((len(expected), ts, record.key, record.value, record.headers))
                wanted.append(base + record.offset_delta)
                codec = codec or batch_codec
        base += len(records)
    chunks, _ = chunks_of(headers(*raws), start, end, [], set())
    if not expected:
        assert chunks == []
        return
    [chunk] = chunks
    assert list(chunk.offsets) == wanted
    assert chunk.batch == bytes(encode_batch(0, expected, codec))
