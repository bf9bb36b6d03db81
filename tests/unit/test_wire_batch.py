"""Batched entries: built in one pass and split in one pass, the same as Pulsar's protobuf
(the generic decoder is the reference), every codec, bounded inflation, hostile payloads,
and the reassembly of chunked messages."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.wire.batch import (
    IN_ENTRY,
    MAX_PAIRS_KEPT,
    MAX_TAILS_KEPT,
    BatchBuilder,
    batch_entry,
    encode_properties,
    entry_messages,
    message_fields,
    single_entry,
    split_batch,
)
from pulsar_gateway.gateway.backend.wire.compression import compress, decompress
from pulsar_gateway.gateway.backend.wire.entries import ChunkAssembler
from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.ids import MessageId
from pulsar_gateway.gateway.backend.wire.messages import (
    CompressionType,
    KeyValue,
    MessageMetadata,
    SingleMessageMetadata,
)

texts = st.text(max_size=12)
records = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),  # value (None: null)
        st.one_of(st.none(), texts),  # partition key
        st.dictionaries(texts, st.text(max_size=200), max_size=4),  # properties
        st.one_of(st.just(0), st.integers(1, (1 << 63) - 1)),  # event time
        st.one_of(st.none(), st.binary(max_size=20)),  # ordering key
        st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),  # sequence id
    ),
    min_size=1,
    max_size=20,
)


def _reference(payload: bytes, count: int) -> list[tuple[SingleMessageMetadata, bytes]]:
    """The batch read with the generic protobuf decoder."""
    out = []
    pos = 0
    for _ in range(count):
        (size,) = struct.unpack_from(">I", payload, pos)
        smm = SingleMessageMetadata.decode(payload, pos + 4, pos + 4 + size)
        start = pos + 4 + size
        out.append((smm, payload[start : start + smm.payload_size]))
        pos = start + smm.payload_size
    assert pos == len(payload)
    return out


@settings(max_examples=examples(80), deadline=None)
@given(records, st.sampled_from(list(CompressionType)))
# event times whose varints (over 6 bytes) share their first 6 bytes: the decoder's cache
# of a batch's times, keyed by those bytes, took the second for the first (found in cc28)
@example(
    [(None, None, {}, 2**50 + 1, None, None), (b"", None, {}, 2**60 + 1, None, None)],
    CompressionType.NONE,
)
def test_batches_round_trip_and_match_the_protobuf_reference(messages, compression) -> None:
    builder = BatchBuilder()
    for value, key, properties, event_time, ordering_key, sequence_id in messages:
        builder.add_message(value, key, properties, event_time, ordering_key, sequence_id)
    entry = builder.build(compression)
    assert entry.batched and entry.num_messages == len(messages)
    metadata = MessageMetadata.decode(b"\x0a\x01p\x10\x01\x18\x01" + entry.metadata_fields)
    assert metadata.num_messages_in_batch == len(messages)
    assert metadata.compression == compression
    got = entry_messages(metadata, entry.payload)
    raw = decompress(compression, entry.payload, metadata.uncompressed_size)
    reference = _reference(raw, len(messages))
    for index, (message, (smm, payload), original) in enumerate(
        zip(got, reference, messages, strict=True)
    ):
        value, key, properties, event_time, ordering_key, sequence_id = original
        assert message.batch_index == index
        assert message.payload == value
        assert message.key == key == smm.partition_key
        assert message.properties == properties == {p.key: p.value for p in smm.properties}
        assert message.event_time == event_time == smm.event_time
        assert message.ordering_key == ordering_key == smm.ordering_key
        assert message.sequence_id == sequence_id == smm.sequence_id
        assert smm.null_value == (value is None)
        assert payload == (value or b"")


@settings(max_examples=examples(50), deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "\u00e9"]), min_size=1, max_size=3),
    st.integers(0, 4),
    st.integers(1, 300),
)
def test_repeated_properties_decode_as_each_message_has_them(names, shared, count) -> None:
    """split_batch decodes repeated property octets once while that pays (and stops looking
    past PAIR_MISSES_ALLOWED misses): each message still gets exactly its own properties,
    whether they repeat, change now and then, or never repeat (the last name's value)."""
    builder = BatchBuilder()
    sent = []
    for index in range(count):
        properties = {name: str(index // (shared + 1)) for name in names[:-1]}
        properties["fixed"] = "same for all"
        properties[names[-1]] = f"unique {index}"
        builder.add_message(b"x", None, properties)
        sent.append(properties)
    entry = builder.build()
    assert [m.properties for m in split_batch(entry.payload, count)] == sent
    kept: dict[bytes, tuple[str, str]] = {}  # a reader's, across its entries
    for _ in range(2):
        assert [m.properties for m in split_batch(entry.payload, count, kept)] == sent
    assert len(kept) <= MAX_PAIRS_KEPT


@settings(max_examples=examples(50), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["seq", "a"]),  # the first property's name (its value: unique)
            st.sampled_from(["time", "b"]),  # the second's (its value: shared by a few)
            st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2"])),
            st.sampled_from([b"", b"x", b"yy"]),  # payload (its size is a tail field)
            st.one_of(st.none(), st.just("k")),  # a partition key: not a tail of properties
        ),
        min_size=1,
        max_size=60,
    )
)
def test_repeated_tails_decode_as_each_message_has_them(messages) -> None:
    """The gateway writes each message's own stamp first, an AMQP message's time next, and
    repeats the rest: a message's fields after its first two are decoded once and kept in
    `tails`, and each message still gets exactly its own properties, key and payload,
    whether a name of its head comes again after it, its tail holds other fields, or its
    payload size changes."""
    builder = BatchBuilder()
    expected = []
    for index, (first, second, rest, payload, key) in enumerate(messages):
        head = [{first: str(index)}, {second: str(index // 3)}]
        fields = b"".join(encode_properties(part) for part in [*head, rest])
        builder.add(message_fields(key, None, encoded_properties=fields), payload)
        expected.append({**head[0], **head[1], **rest})
    entry = builder.build()
    plain = split_batch(entry.payload, len(messages))
    assert [m.properties for m in plain] == expected
    kept: dict[bytes, tuple[dict[str, str], int]] = {}  # a reader's, across its entries
    for _ in range(2):
        assert split_batch(entry.payload, len(messages), {}, kept) == plain
    assert len(kept) <= MAX_TAILS_KEPT
    first, second, rest, _, key = messages[0]
    if key is None and first != second and not {first, second} & set(rest):
        assert kept  # a tail of properties after a head of two: kept for the next entries


@settings(max_examples=examples(50), deadline=None)
@given(records)
def test_batch_entry_from_encoded_fields_equals_the_builder(messages) -> None:
    builder = BatchBuilder()
    pairs = []
    for value, key, properties, event_time, ordering_key, sequence_id in messages:
        builder.add_message(value, key, properties, event_time, ordering_key, sequence_id)
        fields = message_fields(
            key, properties, event_time, ordering_key, value is None, sequence_id
        )
        pairs.append((fields, value or b""))
    assert batch_entry(pairs) == builder.build()


def test_encoded_properties_can_be_reused() -> None:
    shared = encode_properties({"app": "billing"})
    fields = message_fields("k", {"trace": "1"}, encoded_properties=shared)
    [message] = split_batch(batch_entry([(fields, b"v")]).payload, 1)
    assert message.properties == {"app": "billing", "trace": "1"}


def test_messages_generic_smm_layouts_are_read() -> None:
    """Fields in another order, long varints and properties written value first: what
    another client may write is read the same."""
    smm = SingleMessageMetadata(
        properties=[KeyValue("n" * 200, "v" * 300)],
        partition_key="key",
        payload_size=3,
        event_time=1,
        null_partition_key=True,
    ).encode()
    pair_reversed = b"\x12\x01v\x0a\x01n"  # value (2) before key (1)
    smm += b"\x0a" + bytes([len(pair_reversed)]) + pair_reversed
    payload = struct.pack(">I", len(smm)) + smm + b"abc"
    [message] = split_batch(payload, 1)
    assert message.properties == {"n" * 200: "v" * 300, "n": "v"}
    assert (message.key, message.payload, message.event_time) == ("key", b"abc", 1)


def test_a_single_entry_keeps_its_fields_in_the_entry_metadata() -> None:
    entry = single_entry(None, key="k", properties={"a": "b"}, event_time=9, ordering_key=b"o")
    assert not entry.batched and entry.payload == b""
    metadata = MessageMetadata.decode(entry.metadata_fields)
    assert metadata.partition_key == "k" and metadata.null_value and metadata.event_time == 9
    assert metadata.ordering_key == b"o" and metadata.num_messages_in_batch is None
    [message] = entry_messages(metadata, entry.payload)
    assert (message.batch_index, message.payload, message.properties) == (-1, None, {"a": "b"})
    assert IN_ENTRY.properties == b"\x22"


@pytest.mark.parametrize("kind", list(CompressionType))
def test_codecs_round_trip_and_refuse_lies(kind: CompressionType) -> None:
    data = b"pulsar " * 1000
    packed = compress(kind, data)
    assert decompress(kind, packed, len(data)) == data
    if kind == CompressionType.NONE:
        return
    with pytest.raises(DecodeError):  # inflates to more than it says
        decompress(kind, packed, len(data) - 1)
    with pytest.raises(DecodeError):  # claims more than the limit
        decompress(kind, packed, 10_000, limit=1000)
    with pytest.raises(DecodeError):
        decompress(kind, b"\xff\x00garbage", 100)


def test_zlib_bombs_stop_at_the_stated_size() -> None:
    bomb = zlib.compress(b"\x00" * 50_000_000)
    with pytest.raises(DecodeError):
        decompress(CompressionType.ZLIB, bomb, 1000)


@settings(max_examples=examples(500), deadline=None)
@given(st.binary(max_size=300), st.integers(0, 20))
def test_random_batches_raise_decode_error_only(data: bytes, count: int) -> None:
    try:
        split_batch(data, count)
    except DecodeError:
        pass


@settings(max_examples=examples(100), deadline=None)
@given(records, st.data())
def test_corrupted_batches_raise_decode_error_only(messages, data) -> None:
    builder = BatchBuilder()
    for value, key, properties, event_time, ordering_key, sequence_id in messages:
        builder.add_message(value, key, properties, event_time, ordering_key, sequence_id)
    payload = bytearray(builder.build().payload)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    try:
        split_batch(bytes(payload[: data.draw(st.integers(0, len(payload)))]), len(messages))
    except DecodeError:
        pass


def _chunk(uuid: str, index: int, count: int, total: int) -> MessageMetadata:
    return MessageMetadata(
        "p", 1, 1, uuid=uuid, chunk_id=index, num_chunks_from_msg=count, total_chunk_msg_size=total
    )


def test_chunks_are_joined_in_order_and_bounded() -> None:
    assembler = ChunkAssembler(max_messages=2, max_bytes=100)
    parts = [b"aaa", b"bbb", b"cc"]
    out = [
        assembler.add(MessageId(1, i), _chunk("u", i, 3, 8), part, 0)
        for i, part in enumerate(parts)
    ]
    assert out[:2] == [None, None]
    entry = out[2]
    assert entry is not None and entry.payload == b"aaabbbcc"
    assert entry.id == MessageId(1, 2) and entry.chunk_ids == (MessageId(1, 0), MessageId(1, 1))
    assert assembler.held_bytes == 0
    # out of order: dropped; a later first chunk starts over
    assert assembler.add(MessageId(2, 0), _chunk("v", 1, 2, 4), b"xx", 0) is None
    assembler.add(MessageId(2, 1), _chunk("v", 0, 2, 4), b"xx", 0)
    assert assembler.add(MessageId(2, 2), _chunk("v", 1, 2, 4), b"yy", 0) is not None
    # more messages at once than allowed: the oldest goes
    for name in ("a", "b", "c"):
        assembler.add(MessageId(3, 0), _chunk(name, 0, 2, 4), b"xx", 0)
    assert assembler.add(MessageId(3, 1), _chunk("a", 1, 2, 4), b"xx", 0) is None
    assert assembler.add(MessageId(3, 1), _chunk("c", 1, 2, 4), b"xx", 0) is not None
    # a message announcing more than the bound is never held
    assert assembler.add(MessageId(4, 0), _chunk("big", 0, 2, 1000), b"x", 0) is None
    assert assembler.held_bytes <= 100


def test_keys_and_properties_may_be_given_as_utf8_bytes() -> None:
    as_text = message_fields("k\u00e9", {"h": "v\u2603"}, 5)
    as_bytes = message_fields("k\u00e9".encode(), [(b"h", "v\u2603".encode())], 5)
    assert as_text == as_bytes


def test_properties_from_any_mapping() -> None:
    from types import MappingProxyType

    assert message_fields(properties=MappingProxyType({"a": "b"})) == message_fields(
        properties={"a": "b"}
    )
