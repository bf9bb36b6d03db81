"""The message frames' fast path (frames.py) against pamqp's checked path.

basic.publish, simple content headers and basic.deliver skip pamqp's generic codec;
whatever the bytes, the fast path must give what the checked path gives (the same pamqp
objects, or the same AmqpError once it hands over), and encode_deliver the octets
encode_content gives for the same basic.deliver.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp import frames
from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.amqp.frames import (
    FRAME_HEADER,
    FRAME_METHOD,
    DeliverHeads,
    HeaderFrame,
    MethodFrame,
    decode_frame,
    encode_content,
    encode_deliver,
    make_method,
)

PUBLISH_ID = struct.pack(">HH", 60, 40)
names = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
short_octets = st.binary(max_size=30)


def slow_decode(frame_type: int, payload: bytes, monkeypatch: pytest.MonkeyPatch) -> object:
    """The checked path alone: the fast decoders always decline."""
    with monkeypatch.context() as patch:
        patch.setattr(frames, "fast_publish", lambda payload: None)
        patch.setattr(frames, "fast_properties", lambda raw: None)
        return outcome(frame_type, payload)


def outcome(frame_type: int, payload: bytes) -> object:
    """A comparable result: the frame's fields, or the error's code and text."""
    try:
        frame = decode_frame(frame_type, 1, payload)
    except AmqpError as error:
        return ("error", error.reply_code, error.reply_text, error.class_id, error.method_id)
    if isinstance(frame, MethodFrame):
        method = frame.method
        return (type(method), dict(method))
    assert isinstance(frame, HeaderFrame)
    properties = None if frame.properties is None else dict(frame.properties)
    return (frame.class_id, frame.weight, frame.body_size, properties, frame.properties_raw)


def publish_payload(ticket: int, exchange: bytes, key: bytes, bits: int) -> bytes:
    return (
        PUBLISH_ID
        + struct.pack(">H", ticket)
        + bytes([len(exchange)])
        + exchange
        + bytes([len(key)])
        + key
        + bytes([bits])
    )


@settings(max_examples=examples(300), deadline=None)
@given(
    st.integers(0, 0xFFFF),
    short_octets,
    short_octets,
    st.integers(0, 255),
    st.binary(max_size=3),
    st.integers(0, 40),
)
def test_publish_fast_path_decodes_as_pamqp(
    ticket: int, exchange: bytes, key: bytes, bits: int, tail: bytes, cut: int
) -> None:
    """Any publish payload, well formed, truncated, with trailing octets or bad UTF-8."""
    payload = publish_payload(ticket, exchange, key, bits)
    variants = [payload, payload + tail, payload[: max(4, len(payload) - cut)]]
    with pytest.MonkeyPatch.context() as monkeypatch:
        for variant in variants:
            assert outcome(FRAME_METHOD, variant) == slow_decode(FRAME_METHOD, variant, monkeypatch)


def test_publish_fast_path_is_taken() -> None:
    """The common publish does not reach pamqp's decoder (the speed this path is for)."""
    payload = publish_payload(0, b"amq.direct", b"key", 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frames.pamqp_frame, "unmarshal", _refuse)
        frame = decode_frame(FRAME_METHOD, 3, payload)
    assert isinstance(frame, MethodFrame)
    method = frame.method
    assert isinstance(method, commands.Basic.Publish)
    assert (method.exchange, method.routing_key, method.mandatory) == ("amq.direct", "key", True)


def _refuse(*_: object) -> None:
    raise AssertionError("pamqp's decoder was called")


property_values = st.fixed_dictionaries(
    {},
    optional={
        "content_type": names,
        "content_encoding": names,
        "delivery_mode": st.integers(1, 2),
        "priority": st.integers(0, 9),
        "correlation_id": names,
        "reply_to": names,
        "expiration": st.integers(0, 10**6).map(str),
        "message_id": names,
        "message_type": names,
        "user_id": names,
        "app_id": names,
        "headers": st.dictionaries(names, st.integers(-(2**31), 2**31 - 1), max_size=3),
    },
)


@settings(max_examples=examples(300), deadline=None)
@given(property_values, st.integers(0, 2**20), st.integers(0, 12), st.binary(max_size=2))
def test_header_fast_path_decodes_as_pamqp(
    values: dict, body_size: int, cut: int, tail: bytes
) -> None:
    raw = commands.Basic.Properties(**values).marshal()
    payload = struct.pack(">HHQ", 60, 0, body_size) + raw
    variants = [payload, payload + tail, payload[: max(14, len(payload) - cut)]]
    with pytest.MonkeyPatch.context() as monkeypatch:
        for variant in variants:
            assert outcome(FRAME_HEADER, variant) == slow_decode(FRAME_HEADER, variant, monkeypatch)


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(min_size=2, max_size=60))
def test_header_fast_path_on_any_property_octets(raw: bytes) -> None:
    payload = struct.pack(">HHQ", 60, 0, 10) + raw
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert outcome(FRAME_HEADER, payload) == slow_decode(FRAME_HEADER, payload, monkeypatch)


def test_header_fast_path_is_taken() -> None:
    raw = commands.Basic.Properties(delivery_mode=2, content_type="text/plain").marshal()
    payload = struct.pack(">HHQ", 60, 0, 5) + raw
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frames.pamqp_frame, "unmarshal", _refuse)
        frame = decode_frame(FRAME_HEADER, 1, payload)
    assert isinstance(frame, HeaderFrame) and frame.properties is not None
    assert (frame.properties.delivery_mode, frame.properties.content_type) == (2, "text/plain")
    assert frame.properties.cluster_id == ""  # pamqp's default, not None


def test_header_properties_known_by_their_octets_decode_alike() -> None:
    """A reader's kept properties (KnownProperties): the same octets give the same values
    without decoding again, other octets their own, and the keeping is bounded."""
    known: dict[bytes, commands.Basic.Properties] = {}
    first = commands.Basic.Properties(delivery_mode=2, content_type="text/plain").marshal()
    other = commands.Basic.Properties(delivery_mode=1, message_id="m").marshal()
    one = decode_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 5) + first, known)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frames, "fast_properties", _refuse)
        again = decode_frame(FRAME_HEADER, 2, struct.pack(">HHQ", 60, 0, 9) + first, known)
    assert isinstance(one, HeaderFrame) and isinstance(again, HeaderFrame)
    assert again.properties is one.properties and (again.channel, again.body_size) == (2, 9)
    two = decode_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 5) + other, known)
    assert isinstance(two, HeaderFrame) and two.properties is not None
    assert (two.properties.delivery_mode, two.properties.message_id) == (1, "m")
    for n in range(frames.MAX_KNOWN_PROPERTIES + 10):
        raw = commands.Basic.Properties(message_id=str(n)).marshal()
        decode_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 1) + raw, known)
    assert len(known) <= frames.MAX_KNOWN_PROPERTIES


@settings(max_examples=examples(200), deadline=None)
@given(
    names,
    st.integers(1, 2**63 - 1),
    st.booleans(),
    names,
    names,
    st.binary(max_size=300),
    st.binary(max_size=40),
    st.sampled_from([0, 4096, 4096 + 100, 131072]),
    st.integers(1, 65535),
)
def test_encode_deliver_gives_encode_content_octets(
    tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    key: str,
    body: bytes,
    properties_raw: bytes,
    frame_max: int,
    channel: int,
) -> None:
    method = make_method(
        commands.Basic.Deliver,
        consumer_tag=tag,
        delivery_tag=delivery_tag,
        redelivered=redelivered,
        exchange=exchange,
        routing_key=key,
    )
    expected = encode_content(channel, method, body, properties_raw, frame_max)
    got = encode_deliver(
        channel, tag, delivery_tag, redelivered, exchange, key, body, properties_raw, frame_max
    )
    assert got == expected
    # with the frame heads a connection keeps: made once, then reused
    heads: DeliverHeads = {}
    for _ in range(2):
        got = encode_deliver(
            channel, tag, delivery_tag, redelivered, exchange, key, body, properties_raw,
            frame_max, heads,
        )  # fmt: skip
        assert got == expected and len(heads) == 1


def test_encode_content_splits_only_bodies_over_the_frame_size() -> None:
    """The one-frame shortcut and the split agree at the boundary."""
    method = make_method(
        commands.Basic.Deliver, consumer_tag="c", delivery_tag=1, exchange="", routing_key="q"
    )
    for size in (4096 - 9, 4096 - 8, 4096 - 7):
        octets = encode_content(1, method, b"x" * size, b"\x00\x00", 4096)
        bodies = _body_frames(octets)
        assert sum(bodies) == size and all(n <= 4096 - 8 for n in bodies)


def _body_frames(octets: bytes) -> list[int]:
    sizes, pos = [], 0
    while pos < len(octets):
        kind, _, size = struct.unpack_from(">BHI", octets, pos)
        if kind == 3:
            sizes.append(size)
        pos += 7 + size + 1
    return sizes
