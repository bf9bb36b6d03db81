"""The wire client's protobuf codec: varints, every command and metadata message round trip,
unknown fields and commands are skipped, and any bytes decode or raise DecodeError only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.errors import DecodeError
from pulsar_gateway.gateway.backend.wire.ids import MessageId, partition_index
from pulsar_gateway.gateway.backend.wire.messages import (
    BrokerEntryMetadata,
    KeyValue,
    MessageIdData,
    MessageMetadata,
    SingleMessageMetadata,
)
from pulsar_gateway.gateway.backend.wire.protobuf import (
    BOOL,
    BYTES,
    DOUBLE,
    INT32,
    INT64,
    MESSAGE,
    STRING,
    UINT64,
    ProtoMessage,
    decode_varint,
    encode_varint,
    tag,
)

U64 = (1 << 64) - 1
DATA_MESSAGES = [
    KeyValue,
    MessageIdData,
    MessageMetadata,
    SingleMessageMetadata,
    BrokerEntryMetadata,
]
ALL_COMMANDS = sorted(c.COMMANDS.values(), key=lambda cls: cls.TYPE)


@given(st.integers(min_value=-(1 << 63), max_value=U64))
def test_varints_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 10
    assert decode_varint(encoded, 0, len(encoded)) == (value & U64, len(encoded))


def test_varint_edges() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(127) == b"\x7f"
    assert encode_varint(128) == b"\x80\x01"
    assert encode_varint(-1) == b"\xff" * 9 + b"\x01"
    with pytest.raises(DecodeError):
        decode_varint(b"\x80\x80", 0, 2)  # truncated
    with pytest.raises(DecodeError):
        decode_varint(b"\xff" * 11, 0, 11)  # longer than 10 bytes
    with pytest.raises(DecodeError):
        decode_varint(b"", 0, 0)


def _value(kind: int, cls: type | None, depth: int) -> st.SearchStrategy[Any]:
    if kind == UINT64:
        return st.integers(0, U64)
    if kind == INT32:
        return st.integers(-(1 << 31), (1 << 31) - 1)
    if kind == INT64:
        return st.integers(-(1 << 63), (1 << 63) - 1)
    if kind == BOOL:
        return st.booleans()
    if kind == STRING:
        return st.text(max_size=20)
    if kind == BYTES:
        return st.binary(max_size=20)
    if kind == DOUBLE:
        return st.floats(allow_nan=False)
    assert kind == MESSAGE and cls is not None
    return instances(cls, depth + 1)


def instances(cls: type, depth: int = 0) -> st.SearchStrategy[Any]:
    """Any instance of a message class, each field absent (its default) or set."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    defaults = {f.name: f for f in dataclasses.fields(cls)}
    for spec in cls.FIELDS:
        default = defaults[spec.name]
        if spec.kind == MESSAGE and depth >= 2:
            continue  # MessageIdData holds itself: two levels are enough
        value = _value(spec.kind, spec.message, depth)
        if spec.repeated:
            fields[spec.name] = st.lists(value, max_size=3)
        elif default.default is None or not spec.required:
            base = default.default if default.default is not dataclasses.MISSING else None
            fields[spec.name] = st.one_of(st.just(base), value)
        else:
            fields[spec.name] = value
    return st.builds(cls, **fields)


@pytest.mark.parametrize("cls", DATA_MESSAGES, ids=lambda cls: cls.__name__)
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_data_messages_round_trip(cls: type[ProtoMessage], data: st.DataObject) -> None:
    message = data.draw(instances(cls))
    assert cls.decode(message.encode()) == message


@pytest.mark.parametrize("cls", ALL_COMMANDS, ids=lambda cls: cls.__name__)
@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_every_command_round_trips(cls: type[c.Command], data: st.DataObject) -> None:
    command = data.draw(instances(cls))
    assert c.decode_command(c.encode_command(command)) == command


def test_an_empty_command_body_decodes_to_defaults() -> None:
    # PING written with no body at all (just the type), as some brokers do
    assert c.decode_command(b"\x08\x12") == c.Ping()
    assert c.decode_command(b"\x08\x0d") == c.Success()


def test_unknown_command_types_are_not_fatal() -> None:
    unknown = b"\x08" + encode_varint(68) + tag(68, 2) + b"\x02\x08\x01"  # TOPIC_MIGRATED
    assert c.decode_command(unknown) == c.UnknownCommand(68)


def test_unknown_fields_are_skipped() -> None:
    """Fields a newer broker adds, of every wire type, before and after known ones."""
    receipt = c.SendReceipt(3, 7, MessageIdData(10, 20), 9)
    body = receipt.encode()
    extra = (
        tag(100, 0) + encode_varint(12345)  # varint
        + tag(101, 1) + b"\x01" * 8  # fixed64
        + tag(102, 2) + b"\x03abc"  # length-delimited
        + tag(103, 5) + b"\x02" * 4  # fixed32
    )  # fmt: skip
    assert c.SendReceipt.decode(extra + body + extra) == receipt
    # a known field with an unexpected wire type is skipped too
    assert c.SendReceipt.decode(tag(2, 2) + b"\x01x" + body) == receipt


def test_packed_repeated_varints_are_accepted() -> None:
    packed = MessageIdData(1, 2, ack_set=[5, -1, 300])
    unpacked = packed.encode()
    values = encode_varint(5) + encode_varint(-1) + encode_varint(300)
    as_packed = tag(1, 0) + b"\x01" + tag(2, 0) + b"\x02" + tag(5, 2)
    as_packed += encode_varint(len(values)) + values
    assert MessageIdData.decode(unpacked) == MessageIdData.decode(as_packed) == packed


def test_strings_that_are_not_utf8_survive() -> None:
    """A C++ producer may put any bytes in a string field: they decode and re-encode
    unchanged, never fail."""
    raw = tag(1, 2) + b"\x02\xff\xfe" + tag(2, 2) + b"\x01v"
    pair = KeyValue.decode(raw)
    assert pair.encode() == raw


@settings(max_examples=examples(600), deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    for decode in (
        c.decode_command,
        MessageMetadata.decode,
        SingleMessageMetadata.decode,
        BrokerEntryMetadata.decode,
    ):
        try:
            decode(data)
        except DecodeError:
            pass


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_corrupted_commands_decode_or_raise_decode_error(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(ALL_COMMANDS))
    encoded = bytearray(c.encode_command(data.draw(instances(cls))))
    for _ in range(data.draw(st.integers(1, 4))):
        if encoded:
            at = data.draw(st.integers(0, len(encoded) - 1))
            encoded[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    try:
        c.decode_command(bytes(encoded[:cut]))
    except DecodeError:
        pass


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(0, U64),
    st.integers(0, U64),
    st.integers(1, (1 << 31) - 1),
    st.integers(0, U64),
    st.booleans(),
)
def test_the_direct_send_encoder_writes_what_the_generic_one_does(
    producer: int, sequence: int, count: int, highest: int, chunk: bool
) -> None:
    generic = c.encode_command(c.Send(producer, sequence, count, highest, chunk))
    assert c.encode_send(producer, sequence, count, highest, chunk) == generic
    assert c.decode_command(generic) == c.Send(producer, sequence, count, highest, chunk)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.integers(0, U64),
    st.sampled_from(list(c.AckType)),
    st.lists(st.tuples(st.integers(-1, U64 >> 1), st.integers(-1, U64 >> 1)), max_size=5),
)
def test_the_direct_ack_encoder_writes_what_the_generic_one_does(consumer, kind, entries) -> None:
    ids = [MessageIdData(ledger & U64, entry & U64) for ledger, entry in entries]
    generic = c.encode_command(c.Ack(consumer, kind, ids))
    assert c.encode_ack(consumer, kind, entries) == generic


@pytest.mark.parametrize(
    ("topic", "index"),
    [
        ("persistent://public/default/orders-partition-3", 3),
        ("persistent://public/default/orders", -1),
        ("persistent://public/default/orders-partition-x", -1),
        ("persistent://public/default/a-partition-1-partition-2", 2),
        ("persistent://public/default/orders-partition-", -1),
    ],
)
def test_a_topics_partition_index_is_what_pulsar_names_it(topic: str, index: int) -> None:
    """Redelivery ids carry it (docs/backend.md, "Named redelivery needs the partition
    index"); -1 for a topic that is not a partition's."""
    assert partition_index(topic) == index
    assert MessageId(5, 7).to_data(index).partition == index
