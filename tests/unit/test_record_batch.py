"""RecordBatch v2 codec: round trips, interop with real client libraries, fuzzing.

Speed is measured by bench/codec_timings.py, not here.

Interop partners are the record builders/readers of kafka-python and aiokafka (both its Cython
extension and its pure-Python fallback): they are the code those clients run on the wire.
"""

from __future__ import annotations

import gzip
import random
import struct
import types
import zlib

import cramjam
import crc32c
import kafka.codec
import lz4.frame
import pytest
import zstandard
from aiokafka.record import default_records as aio_records
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from harness.hypothesis_budget import examples
from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.compression import (
    CompressionError,
    DecompressionLimitError,
    UnsupportedCodecError,
    compress,
    decompress,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.record_batch import (
    HEADER_SIZE,
    Record,
    RecordBatchError,
    check_produce_batches,
    decode_batches,
    encode_batch,
    rewrite_base_offset,
)

CODECS = [0, 1, 2, 3, 4]
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
AIO_BUILDERS = {
    "aiokafka-cython": (aio_records.DefaultRecordBatchBuilder, aio_records.DefaultRecordBatch),
    "aiokafka-py": (aio_records._DefaultRecordBatchBuilderPy, aio_records._DefaultRecordBatchPy),
}


@pytest.fixture(autouse=True)
def _kafka_python_snappy(monkeypatch):
    """kafka-python wants the python-snappy module for snappy; give it cramjam's raw codec.

    Only the raw block codec is shimmed: kafka-python's own xerial framing code still runs.
    """
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


# ------------------------------------------------------------------ strategies and helpers

nullable_bytes = st.none() | st.binary(max_size=300)
header_names = st.sampled_from(["trace", "trace", "ü-ñ", ""]) | st.text(max_size=12)
headers_st = st.lists(st.tuples(header_names, nullable_bytes), max_size=5)
timestamps = st.integers(I64_MIN, I64_MAX) | st.integers(-1, 10**13) | st.just(-1)


@st.composite
def record_lists(draw, min_size=1, max_size=40, ts=timestamps):
    n = draw(st.integers(min_size, max_size))
    gaps = draw(st.booleans())
    out = []
    delta = 0
    for _ in range(n):
        out.append(
            Record(delta, draw(ts), draw(nullable_bytes), draw(nullable_bytes), draw(headers_st))
        )
        delta += draw(st.integers(1, 100_000)) if gaps else 1
    return out


def frame(body: bytes, count: int, attrs: int = 0, magic: int = 2, base_ts: int = 0) -> bytes:
    """A batch header with a correct CRC around arbitrary (possibly broken) record bytes."""
    head = struct.pack(">hiqqqhii", attrs, count - 1, base_ts, base_ts, -1, -1, -1, count)
    crc = crc32c.crc32c(head + body)
    return struct.pack(">qiibI", 0, 49 + len(body), -1, magic, crc) + head + body


def zz(v: int) -> bytes:
    """Zigzag varint, unbounded (so tests can write over-long ones)."""
    u = (v << 1) ^ (v >> 63) if v >= I64_MIN else -2 * v - 1
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def raw_record(ts_delta=b"\x00", od=b"\x00", key=b"\x01", value=b"\x01", headers=b"\x00"):
    body = b"\x00" + ts_delta + od + key + value + headers
    return zz(len(body)) + body


def compressible(i: int) -> bytes:
    return (b"payload-%05d " % i) * 8


def sample_records(n: int = 50) -> list[Record]:
    recs = []
    for i in range(n):
        hdrs = [("h", b"v%d" % i), ("h", None), ("ключ", b"\x00\xff")] if i % 3 == 0 else []
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 0 else compressible(i)
        recs.append(Record(i, 1_700_000_000_000 + i * 3 - (i % 4), key, value, hdrs))
    return recs


def assert_same_records(ours: list[Record], theirs) -> None:
    theirs = list(theirs)
    assert len(ours) == len(theirs)
    for r, t in zip(ours, theirs, strict=True):
        assert (r.key, r.value, list(r.headers), r.timestamp) == (
            t.key,
            t.value,
            list(t.headers),
            t.timestamp,
        )


# ------------------------------------------------------------------ round trips


# Most of these two properties' time is hypothesis drawing record lists (up to 40 records
# of up to 300-byte keys, values and headers): each list is checked under every codec, so
# 60 lists give each codec twice the round trips that 150 lists drawn with one codec each did.
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=record_lists(),
    base_offset=st.integers(0, I64_MAX),
    pid=st.integers(-1, 2**63 - 1),
)
def test_roundtrip_random_records(records, base_offset, pid):
    for codec in CODECS:
        raw = encode_batch(base_offset, records, codec, producer_id=pid, producer_epoch=3)
        [batch] = decode_batches(memoryview(raw))
        assert batch.records == records
        assert batch.base_offset == base_offset
        assert batch.compression == codec
        assert batch.record_count == len(records)
        assert batch.last_offset_delta == records[-1].offset_delta
        assert batch.base_timestamp == records[0].timestamp
        assert batch.max_timestamp == max(r.timestamp for r in records)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, 3, -1)
        assert bytes(batch.raw) == bytes(raw)
        # Decoded records feed straight back into the encoder, byte for byte.
        again = encode_batch(base_offset, batch.records, codec, producer_id=pid, producer_epoch=3)
        assert again == raw


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists())
def test_headers_only_decode_reads_the_same_header_without_the_records(records):
    """The `kafka` entry format stores a produced batch as sent: its records are not decoded
    (nor, uncompressed, copied); a compressed one is inflated only to walk its count. Every
    codec for each list drawn, as above (40 per codec, against 20 when drawn with one)."""
    for codec in CODECS:
        raw = encode_batch(0, records, codec, producer_id=5, producer_epoch=1)
        [full] = decode_batches(memoryview(raw))
        [header] = decode_batches(memoryview(raw), records=False)
        for name in ("record_count", "last_offset_delta", "max_timestamp", "producer_id", "crc"):
            assert getattr(header, name) == getattr(full, name)
        assert bytes(header.raw) == bytes(raw)
        assert header.records == []


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("claimed", [0, 2, 4, 1 << 30])
def test_headers_only_decode_refuses_a_count_the_records_do_not_fill(claimed, codec):
    """The count is what the partition log numbers the batch by: it must be the records',
    compressed or not."""
    raw = bytearray(encode_batch(0, [Record(i, 1, b"k", b"v", []) for i in range(3)], codec))
    struct.pack_into(">i", raw, 57, claimed)  # records count, after the producer fields
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    with pytest.raises(RecordBatchError):
        decode_batches(memoryview(raw), records=False)


@pytest.mark.parametrize("size", [10, 100, 10_000])  # length prefixes of 1, 2 and 3 bytes
@pytest.mark.parametrize("claimed", [2, 3, 4])
def test_headers_only_decode_walks_every_length_prefix_size(size, claimed):
    """The walk has fast paths for one- and two-byte record lengths (a 100-byte record's is
    two); each must count the same as the full decode."""
    raw = bytearray(encode_batch(0, [Record(i, 1, b"k", b"v" * size, []) for i in range(3)]))
    struct.pack_into(">i", raw, 57, claimed)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    if claimed == 3:
        [header] = decode_batches(memoryview(raw), records=False)
        assert header.record_count == 3
    else:
        with pytest.raises(RecordBatchError):
            decode_batches(memoryview(raw), records=False)


@given(st.binary(max_size=300))
def test_headers_only_decode_raises_only_record_batch_errors(junk):
    raw = bytearray(encode_batch(0, [Record(0, 1, b"k", b"v", [])]))
    body = bytes(raw[:61]) + junk
    patched = bytearray(body)
    struct.pack_into(">i", patched, 8, len(patched) - 12)
    struct.pack_into(">I", patched, 17, crc32c.crc32c(bytes(patched[21:])))
    try:
        decode_batches(memoryview(patched), records=False)
    except RecordBatchError:
        pass


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_edge_values(codec):
    records = [
        Record(0, I64_MAX, None, None, []),
        Record(1, I64_MIN, b"", b"", [("", None), ("", b"")]),
        Record(2, -1, b"\x00" * 9000, b"\xff" * 70_000, [("dup", b"1"), ("dup", b"2")]),
        Record(70_000, 0, b"k", None, [("bin", bytes(range(256)))] * 3),
        Record(2**31 - 1, 1, None, b"v", []),
    ]
    raw = encode_batch(2**62, records, codec, last_offset_delta=2**31 - 1)
    [batch] = decode_batches(raw)
    assert batch.records == records
    assert batch.last_offset_delta == 2**31 - 1


@pytest.mark.parametrize("codec", CODECS)
def test_many_records_and_several_batches(codec):
    records = [Record(i, 1_000 + i, b"k%d" % i, compressible(i), []) for i in range(20_000)]
    out = bytearray(b"prefix")
    encode_batch(0, records[:12_000], codec, out=out)
    encode_batch(
        12_000, [r._replace(offset_delta=i) for i, r in enumerate(records[12_000:])], codec, out=out
    )
    assert out[:6] == b"prefix"
    batches = decode_batches(memoryview(out)[6:])
    assert [b.base_offset for b in batches] == [0, 12_000]
    got = [r.value for b in batches for r in b.records]
    assert got == [r.value for r in records]


def test_empty_batch_and_out_buffer_contract():
    raw = encode_batch(7, [])
    [batch] = decode_batches(raw)
    assert (batch.record_count, batch.records, batch.base_timestamp) == (0, [], -1)


def test_non_utf8_header_key_survives_byte_for_byte():
    body = raw_record(headers=b"\x02" + zz(2) + b"\xff\xfe" + zz(1) + b"x")
    raw = frame(body, 1)
    [batch] = decode_batches(raw)
    assert batch.records[0].headers[0][0].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert bytes(encode_batch(0, batch.records)) == raw


def test_attribute_flags():
    raw = encode_batch(
        0,
        [Record(0, 5, None, b"x", [])],
        4,
        timestamp_type=1,
        is_transactional=True,
        is_control=True,
        max_timestamp=99,
        partition_leader_epoch=12,
        base_sequence=4,
        producer_epoch=2,
    )
    [b] = decode_batches(raw)
    assert (b.compression, b.timestamp_type, b.is_transactional, b.is_control) == (4, 1, True, True)
    assert (b.max_timestamp, b.partition_leader_epoch, b.base_sequence) == (99, 12, 4)


def test_rewrite_base_offset_keeps_crc():
    raw = bytes(encode_batch(0, sample_records(10), 2))
    moved = rewrite_base_offset(raw, 123_456_789, partition_leader_epoch=9)
    [b] = decode_batches(moved)  # CRC still verifies
    assert (b.base_offset, b.partition_leader_epoch, b.last_offset) == (123_456_789, 9, 123_456_798)
    assert moved[8:12] == raw[8:12] and moved[16:] == raw[16:]
    assert rewrite_base_offset(bytearray(raw), 5)[:8] == struct.pack(">q", 5)
    with pytest.raises(RecordBatchError):
        rewrite_base_offset(b"short", 1)


# ------------------------------------------------------------------ real client libraries


def kafka_python_build(records, codec: int) -> bytes:
    builder = KpBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for r in records:
        assert builder.append(r.offset_delta, r.timestamp, r.key, r.value, r.headers)
    return bytes(builder.build())


def aiokafka_build(builder_cls, records, codec: int) -> bytes:
    builder = builder_cls(2, codec, 0, -1, -1, -1, 1 << 30)
    for r in records:
        assert builder.append(r.offset_delta, r.timestamp, r.key, r.value, r.headers)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python_batches(codec):
    records = sample_records()
    raw = kafka_python_build(records, codec)
    [batch] = decode_batches(raw)
    assert batch.compression == codec  # the builder kept compression (data is compressible)
    assert batch.records == records
    check_produce_batches([batch], api_version=9)


@pytest.mark.parametrize("impl", sorted(AIO_BUILDERS))
@pytest.mark.parametrize("codec", CODECS)
def test_decode_aiokafka_batches(codec, impl):
    records = sample_records()
    raw = aiokafka_build(AIO_BUILDERS[impl][0], records, codec)
    [batch] = decode_batches(raw)
    assert batch.compression == codec
    assert batch.records == records


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec):
    records = sample_records()
    raw = bytes(encode_batch(1000, records, codec))
    theirs = KpBatch(raw)
    assert theirs.validate_crc()
    assert (theirs.compression_type, theirs.base_offset, theirs.last_offset_delta) == (
        codec,
        1000,
        49,
    )
    got = list(theirs)
    assert_same_records(records, got)
    assert [r.offset for r in got] == list(range(1000, 1050))
    # and two of ours back to back, through its MemoryRecords splitter
    two = raw + bytes(encode_batch(1050, records, codec))
    mem = KpMemoryRecords(two)
    n = 0
    while (b := mem.next_batch()) is not None:
        n += len(list(b))
    assert n == 100


@pytest.mark.parametrize("impl", sorted(AIO_BUILDERS))
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_our_batches(codec, impl):
    records = sample_records()
    raw = bytes(encode_batch(77, records, codec))
    theirs = AIO_BUILDERS[impl][1](raw)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    got = list(theirs)
    assert_same_records(records, got)
    assert got[-1].offset == 77 + 49
    mem = AioMemoryRecords(raw + bytes(encode_batch(127, records, codec)))
    n = 0
    while (b := mem.next_batch()) is not None:
        n += len(list(b))
    assert n == 100


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(max_size=15, ts=st.integers(0, 10**13)), codec=st.sampled_from(CODECS))
def test_clients_read_random_batches(records, codec):
    raw = bytes(encode_batch(0, records, codec))
    assert_same_records(records, KpBatch(raw))
    assert_same_records(records, aio_records.DefaultRecordBatch(raw))


# ------------------------------------------------------------------ codecs


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip_sizes(codec):
    for data in (b"", b"x", bytes(range(256)) * 500, random.Random(3).randbytes(200_000)):
        assert decompress(codec, compress(codec, data)) == data
        assert decompress(codec, memoryview(compress(codec, data))) == data


def test_snappy_writes_xerial_that_every_reader_takes():
    data = compressible(1) * 10_000  # several 32 KiB xerial blocks
    out = compress(compression.SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert kafka.codec.snappy_decode(out) == data
    assert bytes(aio_codec_snappy_decode(out)) == data
    # librdkafka takes the xerial path only when more than 20 bytes follow, even for no data
    assert len(compress(compression.SNAPPY, b"")) > 20


def aio_codec_snappy_decode(b: bytes) -> bytes:
    from aiokafka import codec as aio_codec

    return aio_codec.snappy_decode(b)


def test_snappy_reads_raw_xerial_and_odd_xerial_headers():
    data = b"librdkafka writes raw snappy " * 100
    assert decompress(2, cramjam.snappy.compress_raw(data)) == data
    assert decompress(2, kafka.codec.snappy_encode(data, xerial_blocksize=100)) == data
    # redpanda writes the version words little-endian; kafka-python tolerates it, so do we
    le = bytearray(kafka.codec.snappy_encode(data))
    le[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(2, le) == data
    with pytest.raises(CompressionError):
        decompress(2, b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x10\x00abc")


def test_gzip_and_zstd_variants():
    data = b"abc" * 1000
    two_members = gzip.compress(data[:10]) + gzip.compress(data[10:])
    assert decompress(1, two_members) == data
    assert decompress(1, zlib.compress(data)) == data  # zlib header, as librdkafka accepts
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(no_size) == -1
    assert decompress(4, no_size) == data
    with zstandard.ZstdCompressor().stream_writer(out := _Sink(), closefd=False) as w:
        w.write(data)  # streaming writer: no content size, like librdkafka's encoder
    assert decompress(4, out.getvalue()) == data
    # lz4 frame with content size and checksums, as kafka-python's lz4.frame defaults write
    assert decompress(3, lz4.frame.compress(data, content_checksum=True)) == data


class _Sink:
    def __init__(self):
        self.parts = []

    def write(self, b):
        self.parts.append(bytes(b))
        return len(b)

    def getvalue(self):
        return b"".join(self.parts)


BOMB = bytes(8 << 20)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bombs_stop_at_limit(codec):
    variants = [compress(codec, BOMB)]
    if codec == 2:
        variants.append(bytes(cramjam.snappy.compress_raw(BOMB)))
    if codec == 4:
        variants.append(zstandard.ZstdCompressor(write_content_size=False).compress(BOMB))
    if codec == 3:
        variants.append(lz4.frame.compress(BOMB, store_size=True))
    for blob in variants:
        with pytest.raises(DecompressionLimitError) as e:
            decompress(codec, blob, max_size=1 << 20)
        assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert len(decompress(codec, blob, max_size=len(BOMB))) == len(BOMB)
        # and inside a batch
        with pytest.raises(RecordBatchError) as e:
            decode_batches(frame(blob, 1, attrs=codec), max_uncompressed=1 << 20)
        assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE


@settings(max_examples=examples(300), deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=200))
def test_decompress_garbage_raises_only_compression_error(codec, data):
    for blob in (data, compress(codec, data)[: len(data) // 2] + data):
        try:
            decompress(codec, blob, max_size=1 << 16)
        except CompressionError:
            pass


def test_unknown_codec():
    with pytest.raises(UnsupportedCodecError):
        compress(5, b"x")
    with pytest.raises(UnsupportedCodecError) as e:
        decompress(7, b"x")
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(RecordBatchError) as e:
        decode_batches(frame(b"", 0, attrs=5))
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# ------------------------------------------------------------------ fuzz and malformed input


def decode_or_reject(data, **kw):
    """Decode; RecordBatchError is fine, anything else fails the test."""
    try:
        return decode_batches(data, **kw)
    except RecordBatchError as e:
        assert e.code in (
            ErrorCode.CORRUPT_MESSAGE,
            ErrorCode.MESSAGE_TOO_LARGE,
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            ErrorCode.INVALID_RECORD,
        )
        return None


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes(data):
    decode_or_reject(data)
    decode_or_reject(data, verify_crc=False)


@settings(max_examples=examples(400), deadline=None)
@given(body=st.binary(max_size=200), count=st.integers(-2, 40), codec=st.sampled_from(CODECS + [5]))
def test_garbage_behind_a_valid_crc(body, count, codec):
    decode_or_reject(frame(body, count, attrs=codec))


@settings(max_examples=examples(300), deadline=None)
@given(records=record_lists(max_size=6), codec=st.sampled_from(CODECS), data=st.data())
def test_mutated_records_behind_a_valid_crc(records, codec, data):
    """Flip, cut or splice the *records* then fix the CRC, so the record parser sees it."""
    raw = bytes(encode_batch(0, records, 0))
    body = bytearray(raw[HEADER_SIZE:])
    if body:
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] ^= 1 << data.draw(st.integers(0, 7))
    body = body[: data.draw(st.integers(0, len(body)))] + data.draw(st.binary(max_size=8))
    count = data.draw(st.sampled_from([len(records), len(records) + 1, 2**31 - 1]))
    payload = compress(codec, bytes(body)) if codec else bytes(body)
    decode_or_reject(frame(payload, count, attrs=codec))


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_is_rejected(codec):
    raw = bytes(encode_batch(0, sample_records(8), codec))
    for cut in range(1, len(raw)):
        for verify in (True, False):
            with pytest.raises(RecordBatchError):
                decode_batches(raw[:cut], verify_crc=verify)
    # a good batch followed by a partial one is rejected as a whole
    with pytest.raises(RecordBatchError):
        decode_batches(raw + raw[:30])


@pytest.mark.parametrize("codec", CODECS)
def test_every_bit_flip_is_caught_by_crc_or_header_checks(codec):
    raw = bytes(encode_batch(0, sample_records(3), codec))
    uncovered = set(range(0, 8)) | set(range(12, 16))  # baseOffset, partitionLeaderEpoch
    for i in range(len(raw)):
        for bit in range(8):
            flipped = bytearray(raw)
            flipped[i] ^= 1 << bit
            if i in uncovered:
                decode_batches(flipped)  # outside the CRC by design (rewrite_base_offset)
                continue
            with pytest.raises(RecordBatchError):
                decode_batches(flipped)
            decode_or_reject(flipped, verify_crc=False)


def test_crc_mismatch_code():
    raw = bytearray(encode_batch(0, sample_records(2)))
    raw[-1] ^= 0x40
    with pytest.raises(RecordBatchError) as e:
        decode_batches(raw)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE and "CRC" in str(e.value)


@pytest.mark.parametrize(
    "body",
    [
        raw_record(ts_delta=b"\x80" * 10 + b"\x00"),  # 11-byte varlong
        raw_record(od=b"\xff" * 5 + b"\x01"),  # 6-byte varint
        raw_record(key=b"\x80" * 20),  # runs off the end
        raw_record(value=zz(-2)),  # negative length other than -1
        raw_record(key=zz(-7)),
        raw_record(value=zz(2**31)),
        raw_record(key=zz(10**6) + b"abc"),
        raw_record(headers=zz(-1)),
        raw_record(headers=zz(2**30)),
        raw_record(headers=b"\x02" + zz(-1) + b"\x01"),  # null header key
        raw_record(headers=b"\x02" + zz(5) + b"ab"),
        zz(2**40) + b"\x00" * 6,  # record length absurd
        zz(3) + b"\x00" * 3,  # record length too small for its fields
        zz(-1),
        raw_record() + b"\x00",  # trailing byte after the declared records
    ],
)
def test_absurd_lengths_and_varints(body):
    with pytest.raises(RecordBatchError):
        decode_batches(frame(body, 1))


def test_record_length_must_match_its_fields():
    """Two records whose length fields are off by +1 and -1: the bytes add up, the records
    do not, and only the per-record length check can tell."""
    one = b"\x00\x00\x00\x01\x02x\x00"  # attrs, ts, offset, key null, value b"x", headers
    two = b"\x00\x00\x02\x01\x02y\x00"
    assert decode_batches(frame(zz(7) + one + zz(7) + two, 2))[0].records[1].value == b"y"
    with pytest.raises(RecordBatchError):
        decode_batches(frame(zz(8) + one + zz(6) + two, 2))


def test_zstd_frame_lying_about_its_size():
    blob = bytearray(zstandard.ZstdCompressor().compress(b"a" * 200))
    assert blob[4] == 0x20 and blob[5] == 200  # single-segment frame, one-byte content size
    for declared in (100, 250):
        blob[5] = declared
        with pytest.raises(CompressionError):
            decompress(4, bytes(blob))


def test_absurd_counts_and_lengths():
    good = raw_record()
    for count in (0, 2, -1, 2**31 - 1):
        with pytest.raises(RecordBatchError):
            decode_batches(frame(good, count))
    raw = bytearray(frame(good, 1))
    for length in (0, 48, 2**31 - 1, -5):
        struct.pack_into(">i", raw, 8, length)
        with pytest.raises(RecordBatchError):
            decode_batches(raw)


def test_magic_bytes():
    for magic, code in (
        (0, ErrorCode.INVALID_RECORD),
        (1, ErrorCode.INVALID_RECORD),
        (3, ErrorCode.CORRUPT_MESSAGE),
        (-1, ErrorCode.CORRUPT_MESSAGE),
    ):
        with pytest.raises(RecordBatchError) as e:
            decode_batches(frame(raw_record(), 1, magic=magic))
        assert e.value.code == code


def test_check_produce_batches():
    ok = decode_batches(encode_batch(0, sample_records(3), 4))
    check_produce_batches(ok, api_version=7)
    with pytest.raises(RecordBatchError) as e:
        check_produce_batches(ok, api_version=6)
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    cases = [
        [],
        ok + ok,
        decode_batches(encode_batch(5, sample_records(3))),
        decode_batches(encode_batch(0, [Record(0, 1, None, b"", []), Record(2, 1, None, b"", [])])),
        decode_batches(encode_batch(0, sample_records(3), last_offset_delta=7)),
        decode_batches(encode_batch(0, sample_records(3), is_control=True)),
    ]
    for batches in cases:
        with pytest.raises(RecordBatchError) as e:
            check_produce_batches(batches, api_version=9)
        assert e.value.code == ErrorCode.INVALID_RECORD
