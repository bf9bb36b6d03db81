"""Frame splitting, decoding and encoding of the sans-I/O AMQP core.

Input bytes come from pamqp's marshal (what aiormq sends) or are crafted to
be wrong; the decoder must return frames or raise AmqpError, nothing else.
"""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.frames import (
    FRAME_MIN_SIZE,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    BodyFrame,
    FrameReader,
    HeaderCheck,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    check_protocol_header,
    encode_content,
    encode_method,
    make_method,
)


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([end])


def read_all(data: bytes, frame_max: int = 131072) -> list:
    reader = FrameReader(frame_max)
    reader.feed(data)
    frames = []
    while (item := reader.next_frame()) is not None:
        frames.append(item)
    return frames


def decode_error(data: bytes, frame_max: int = 131072) -> AmqpError:
    with pytest.raises(AmqpError) as info:
        read_all(data, frame_max)
    return info.value


def fields(method: commands.base.Frame) -> dict:
    return {name: getattr(method, name) for name in method.__slots__}


# --- protocol header ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (PROTOCOL_HEADER, HeaderCheck.ACCEPTED),
        (PROTOCOL_HEADER + b"\x01\x00", HeaderCheck.ACCEPTED),
        (b"AMQ", HeaderCheck.INCOMPLETE),
        (b"AMQP\x00\x00\x09", HeaderCheck.INCOMPLETE),
        (b"", HeaderCheck.INCOMPLETE),
        (b"AMQP\x01\x01\x00\x09", HeaderCheck.REJECTED),  # AMQP 0-9
        (b"AMQP\x00\x00\x08\x00", HeaderCheck.REJECTED),  # AMQP 0-8
        (b"AMQP\x03\x01\x00\x00", HeaderCheck.REJECTED),  # AMQP 1.0 SASL
        (b"GET / HTTP/1.1\r\n", HeaderCheck.REJECTED),
        (b"\x16\x03\x01\x02\x00\x01", HeaderCheck.REJECTED),  # TLS client hello
        (b"X", HeaderCheck.REJECTED),  # refused at once, no need to wait for 8 bytes
    ],
)
def test_protocol_header(data: bytes, expected: HeaderCheck) -> None:
    assert check_protocol_header(data) is expected


# --- decoding what clients send ----------------------------------------------------------

CLIENT_METHODS = [
    commands.Connection.StartOk(
        client_properties={
            "product": "pika",
            "capabilities": {"basic.nack": True, "connection.blocked": True},
        },
        mechanism="PLAIN",
        response="\x00guest\x00guest",
    ),
    commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
    commands.Connection.Open(virtual_host="/"),
    commands.Connection.Close(
        reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0
    ),
    commands.Connection.CloseOk(),
    commands.Channel.Open(),
    commands.Channel.Flow(active=False),
    commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
    commands.Exchange.Declare(
        exchange="ex", exchange_type="topic", durable=True, arguments={"alternate-exchange": "ae"}
    ),
    commands.Exchange.Delete(exchange="ex", if_unused=True),
    commands.Exchange.Bind(destination="d", source="s", routing_key="a.#"),
    commands.Exchange.Unbind(destination="d", source="s", routing_key="a.#"),
    commands.Queue.Declare(
        queue="q",
        durable=True,
        exclusive=True,
        auto_delete=True,
        nowait=True,
        arguments={"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"},
    ),
    commands.Queue.Bind(queue="q", exchange="ex", routing_key="k", arguments={"x-match": "any"}),
    commands.Queue.Purge(queue="q"),
    commands.Queue.Delete(queue="q", if_unused=True, if_empty=True),
    commands.Queue.Unbind(queue="q", exchange="ex", routing_key="k"),
    commands.Basic.Qos(prefetch_count=10, global_=True),
    commands.Basic.Consume(queue="q", consumer_tag="ctag", no_ack=True, exclusive=True),
    commands.Basic.Cancel(consumer_tag="ctag"),
    commands.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True),
    commands.Basic.Get(queue="q", no_ack=True),
    commands.Basic.Ack(delivery_tag=2**63 - 1, multiple=True),
    commands.Basic.Reject(delivery_tag=5, requeue=False),
    commands.Basic.Recover(requeue=True),
    commands.Basic.Nack(delivery_tag=7, multiple=True, requeue=False),
    commands.Tx.Select(),
    commands.Tx.Commit(),
    commands.Tx.Rollback(),
    commands.Confirm.Select(nowait=True),
]


@pytest.mark.parametrize("method", CLIENT_METHODS, ids=lambda m: m.name)
def test_decodes_every_client_method(method: commands.base.Frame) -> None:
    [decoded] = read_all(frame.marshal(method, 3))
    assert isinstance(decoded, MethodFrame)
    assert decoded.channel == 3
    assert type(decoded.method) is type(method)
    assert fields(decoded.method) == fields(method)


def test_content_frames_keep_raw_properties() -> None:
    properties = commands.Basic.Properties(
        content_type="application/json",
        headers={"n": 1, "s": "x", "nested": {"a": [1, 2.5, None]}},
        delivery_mode=2,
        priority=3,
        message_id="m-1",
        timestamp=datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC),
        expiration="60000",
    )
    data = frame.marshal(header.ContentHeader(0, 5, properties), 1) + frame.marshal(
        pamqp_body.ContentBody(b"hello"), 1
    )
    content_header, content_body = read_all(data)
    assert isinstance(content_header, HeaderFrame)
    assert content_header.body_size == 5
    assert content_header.class_id == 60
    assert content_header.properties == properties
    assert content_header.properties_raw == properties.marshal()
    assert content_body == BodyFrame(1, b"hello")


def test_heartbeat() -> None:
    assert read_all(HEARTBEAT_FRAME) == [HeartbeatFrame(0)]
    error = decode_error(raw_frame(8, 0, b"x"))
    assert error.reply_code == ReplyCode.FRAME_ERROR
    assert error.explanation == 'type 8, all octets = <<"x">>: unknown_frame'


@given(st.data())
@settings(max_examples=examples(40), deadline=None)
def test_any_split_of_the_stream_gives_the_same_frames(data: st.DataObject) -> None:
    stream = b"".join(frame.marshal(m, 1) for m in CLIENT_METHODS[5:15]) + HEARTBEAT_FRAME
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    reader = FrameReader(131072)
    seen = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        reader.feed(stream[previous:cut])
        previous = cut
        while (item := reader.next_frame()) is not None:
            seen.append(item)
    assert [type(f) for f in seen] == [type(f) for f in read_all(stream)]
    assert reader.buffered == 0


# --- errors, with RabbitMQ's codes -------------------------------------------------------


def test_frame_over_frame_max_is_refused_from_its_header() -> None:
    reader = FrameReader(FRAME_MIN_SIZE)
    reader.feed(struct.pack(">BHI", 1, 1, FRAME_MIN_SIZE + 1))  # payload never sent
    with pytest.raises(AmqpError) as info:
        reader.next_frame()
    assert info.value.reply_code == ReplyCode.FRAME_ERROR
    assert info.value.explanation == "type 1, all octets = <<>>: {frame_too_large,4097,4088}"
    assert reader.broken
    reader.feed(frame.marshal(commands.Channel.Open(), 1))
    assert reader.next_frame() is None  # sync is lost for good


def test_frame_of_exactly_frame_max_payload_is_accepted_like_rabbitmq() -> None:
    payload = b"x" * FRAME_MIN_SIZE
    assert read_all(raw_frame(3, 1, payload), FRAME_MIN_SIZE) == [BodyFrame(1, payload)]


@pytest.mark.parametrize("end", [0x00, 0xCD, 0xFF])
def test_bad_frame_end_octet(end: int) -> None:
    data = raw_frame(1, 0, frame.marshal(commands.Channel.Open(), 0)[7:-1], end)
    error = decode_error(data)
    assert error.reply_code == ReplyCode.FRAME_ERROR
    assert error.explanation.endswith(f"{{invalid_frame_end_marker,{end}}}")


@pytest.mark.parametrize("frame_type", [0, 4, 9, 65, 255])
def test_unknown_frame_type(frame_type: int) -> None:
    error = decode_error(raw_frame(frame_type, 0, b""))
    assert (error.reply_code, error.explanation) == (
        ReplyCode.FRAME_ERROR,
        f"type {frame_type}, all octets = <<>>: unknown_frame",
    )


@pytest.mark.parametrize(
    ("class_id", "method_id"),
    [(60, 99), (61, 10), (30, 10), (0, 0), (0xFFFF, 0xFFFF), (10, 12)],
)
def test_unknown_class_or_method_is_not_implemented(class_id: int, method_id: int) -> None:
    error = decode_error(raw_frame(1, 1, struct.pack(">HH", class_id, method_id)))
    assert error.reply_code == ReplyCode.NOT_IMPLEMENTED
    assert error.explanation == f"unknown method {{{class_id},{method_id}}}"
    assert (error.class_id, error.method_id) == (class_id, method_id)


def test_method_frame_too_short_for_ids() -> None:
    assert decode_error(raw_frame(1, 1, b"\x00\x14")).reply_code == ReplyCode.FRAME_ERROR


def method_payload(method: commands.base.Frame) -> bytes:
    return frame.marshal(method, 1)[7:-1]


@pytest.mark.parametrize(
    "payload",
    [
        # queue.declare cut inside the queue name
        method_payload(commands.Queue.Declare(queue="queue-name"))[:9],
        # the same with octets left over
        method_payload(commands.Queue.Declare(queue="q")) + b"\x00",
        # a table whose length runs past the frame
        method_payload(commands.Queue.Declare(queue="q"))[:-4] + b"\x00\x00\x10\x00",
        # a table entry whose value type is unknown
        method_payload(commands.Queue.Declare(queue="q"))[:-4] + b"\x00\x00\x00\x03\x01kZ",
        # a longstr inside a table longer than the table
        method_payload(commands.Queue.Declare(queue="q"))[:-4]
        + b"\x00\x00\x00\x08\x01kS\x00\x00\x00\xff",
        # a shortstr that is not UTF-8
        method_payload(commands.Basic.Consume(queue="q"))[:6] + b"\x01\xff",
    ],
    ids=["truncated", "trailing", "table-overrun", "bad-value-type", "nested-overrun", "utf8"],
)
def test_malformed_method_fields_are_frame_errors(payload: bytes) -> None:
    error = decode_error(raw_frame(1, 1, payload))
    assert error.reply_code == ReplyCode.FRAME_ERROR
    assert error.explanation.startswith("cannot decode ")
    assert error.class_id in (50, 60)


def test_tables_nested_too_deeply_are_refused_without_recursion_error() -> None:
    table = b""
    for _ in range(2000):
        table = b"\x01kF" + struct.pack(">I", len(table)) + table
    declare = method_payload(commands.Queue.Declare(queue="q"))[:-4]
    payload = declare + struct.pack(">I", len(table)) + table
    assert decode_error(raw_frame(1, 1, payload)).reply_code == ReplyCode.FRAME_ERROR


def test_values_pamqp_cannot_represent_become_frame_errors() -> None:
    # A timestamp far beyond datetime's range makes pamqp raise OverflowError.
    table = b"\x01tT" + struct.pack(">Q", 2**63)
    declare = method_payload(commands.Queue.Declare(queue="q"))[:-4]
    payload = declare + struct.pack(">I", len(table)) + table
    assert decode_error(raw_frame(1, 1, payload)).reply_code == ReplyCode.FRAME_ERROR


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00<\x00\x00",  # shorter than a content header
        struct.pack(">HHQ", 60, 0, 1) + b"\x80\x00\x05ab",  # content-type shortstr overruns
        struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00\x00",  # octets after the properties
        struct.pack(">HHQ", 60, 0, 1) + b"\x00\x01\x00\x00",  # flag continuation word
    ],
)
def test_malformed_content_headers(payload: bytes) -> None:
    assert decode_error(raw_frame(2, 1, payload)).reply_code == ReplyCode.FRAME_ERROR


def test_content_header_of_other_class_is_left_to_the_assembler() -> None:
    [item] = read_all(raw_frame(2, 1, struct.pack(">HHQ", 50, 0, 0) + b"\x00\x00"))
    assert isinstance(item, HeaderFrame)
    assert (item.class_id, item.properties) == (50, None)


# --- fuzzing: only AmqpError ever comes out ----------------------------------------------

VALID_STREAM = b"".join(frame.marshal(m, 1) for m in CLIENT_METHODS) + frame.marshal(
    header.ContentHeader(0, 3, commands.Basic.Properties(headers={"a": [1, "b"]})), 1
)


def drain(data: bytes, frame_max: int = FRAME_MIN_SIZE) -> None:
    reader = FrameReader(frame_max)
    reader.feed(data)
    while True:
        try:
            if reader.next_frame() is None:
                return
        except AmqpError as error:
            assert error.reply_code in (ReplyCode.FRAME_ERROR, ReplyCode.NOT_IMPLEMENTED)
            if reader.broken:
                return


@given(st.binary(max_size=2048))
@settings(max_examples=examples(300), deadline=None)
def test_fuzz_random_bytes(data: bytes) -> None:
    drain(data)


@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2, 3, 8]), st.binary(max_size=64)), min_size=1, max_size=8
    )
)
@settings(max_examples=examples(300), deadline=None)
def test_fuzz_well_framed_garbage(frames: list[tuple[int, bytes]]) -> None:
    drain(b"".join(raw_frame(kind, 1, payload) for kind, payload in frames))


@given(st.data())
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_mutated_valid_frames(data: st.DataObject) -> None:
    stream = bytearray(VALID_STREAM)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(stream) - 1))
        stream[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(stream)))
    drain(bytes(stream[:cut]), frame_max=131072)


@given(st.integers(min_value=1, max_value=len(VALID_STREAM) - 1))
@settings(max_examples=examples(100), deadline=None)
def test_fuzz_truncated_stream_yields_a_prefix(cut: int) -> None:
    reader = FrameReader(131072)
    reader.feed(VALID_STREAM[:cut])
    count = 0
    while reader.next_frame() is not None:
        count += 1
    assert count < len(CLIENT_METHODS) + 1
    reader.feed(VALID_STREAM[cut:])
    while reader.next_frame() is not None:
        count += 1
    assert count == len(CLIENT_METHODS) + 1


# --- encoding ----------------------------------------------------------------------------


def test_encode_method_matches_pamqp() -> None:
    for method in CLIENT_METHODS:
        assert encode_method(5, method) == frame.marshal(method, 5)


def test_names_outside_the_spec_regex_are_encoded() -> None:
    # RabbitMQ accepts any UTF-8 name; pamqp would refuse to build this one.
    with pytest.raises(ValueError):
        commands.Queue.DeclareOk(queue="caf\u00e9 \u2615", message_count=0, consumer_count=0)
    reply = make_method(
        commands.Queue.DeclareOk, queue="caf\u00e9 \u2615", message_count=1, consumer_count=0
    )
    [decoded] = read_all(encode_method(1, reply))
    assert decoded.method.queue == "caf\u00e9 \u2615"
    with pytest.raises(TypeError):
        make_method(commands.Queue.DeclareOk, nope=1)


def test_encode_content_splits_the_body_by_frame_max() -> None:
    deliver = make_method(
        commands.Basic.Deliver, consumer_tag="c", delivery_tag=1, exchange="", routing_key="q"
    )
    properties = commands.Basic.Properties(content_type="text/plain").marshal()
    body = bytes(range(256)) * 40  # 10240 octets
    frames = read_all(encode_content(2, deliver, body, properties, FRAME_MIN_SIZE), FRAME_MIN_SIZE)
    assert isinstance(frames[0], MethodFrame)
    assert isinstance(frames[1], HeaderFrame)
    assert frames[1].properties_raw == properties
    bodies = frames[2:]
    assert [len(f.payload) for f in bodies] == [4088, 4088, 2064]
    assert b"".join(f.payload for f in bodies) == body
    assert len(read_all(encode_content(2, deliver, b"", properties, FRAME_MIN_SIZE))) == 2


# --- round trips -------------------------------------------------------------------------

table_keys = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20
).filter(lambda k: len(k.encode()) <= 128)
table_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=30)
    | st.floats(allow_nan=False, width=32),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(table_keys, children, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(table_keys, table_values, max_size=6))
@settings(max_examples=examples(150), deadline=None)
def test_field_tables_round_trip_through_pamqp(arguments: dict) -> None:
    declare = commands.Queue.Declare(queue="q", arguments=arguments)
    [decoded] = read_all(frame.marshal(declare, 1))
    assert decoded.method.arguments == arguments
    properties = commands.Basic.Properties(headers=arguments or None)
    [content] = read_all(frame.marshal(header.ContentHeader(0, 0, properties), 1))
    assert content.properties.headers == (arguments or None)
