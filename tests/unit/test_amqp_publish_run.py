"""A whole basic.publish read at once (publish_run.py) against the frame-by-frame path.

Whatever the client sends, and however the socket splits it, the connection core must give
the same events and the same output with the run reader as without it: the same
messages, and the same protocol errors for anything malformed, out of order, too large or
over the connection's body budget.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import base, commands, frame, header
from pamqp import body as pamqp_body

from harness.amqp_peer import open_peer
from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp import connection_state
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings
from pulsar_gateway.handlers.amqp.events import ContentReceived
from pulsar_gateway.handlers.amqp.frames import FrameReader
from pulsar_gateway.handlers.amqp.publish_run import next_publish

FRAME_MAX = 4096
SETTINGS = ConnectionSettings(max_message_size=2500, max_incoming_body_bytes=4000)


def publish(
    channel: int,
    body: bytes,
    properties: commands.Basic.Properties,
    split: int = 0,
    exchange: str = "",
    mandatory: bool = False,
) -> bytes:
    """basic.publish with its content; `split` > 0 cuts the body into frames that long."""
    pieces = [
        frame.marshal(
            commands.Basic.Publish(exchange=exchange, routing_key="q", mandatory=mandatory),
            channel,
        ),
        frame.marshal(header.ContentHeader(0, len(body), properties), channel),
    ]
    step = split or max(len(body), 1)
    for start in range(0, len(body), step):
        pieces.append(frame.marshal(pamqp_body.ContentBody(body[start : start + step]), channel))
    return b"".join(pieces)


def comparable(value: Any) -> Any:
    """Events with their pamqp objects as plain fields (pamqp objects compare by
    identity)."""
    if isinstance(value, base.Frame | commands.Basic.Properties):
        return (type(value).__name__, {k: comparable(v) for k, v in dict(value).items()})
    if isinstance(value, ContentReceived):
        return (
            "content",
            value.channel,
            comparable(value.method),
            comparable(value.properties),
            value.properties_raw,
            value.body,
        )
    if hasattr(value, "__dataclass_fields__"):
        return (type(value).__name__, {k: comparable(getattr(value, k)) for k in value.__slots__})
    return value


def run(stream: bytes, cuts: list[int], fast: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What the core makes of `stream` read in the pieces `cuts` gives: events and output
    per read."""
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(connection_state, "next_publish", lambda reader: None)
        peer = open_peer(frame_max=FRAME_MAX, settings=SETTINGS)
        seen = []
        start = 0
        for cut in [*sorted(cuts), len(stream)]:
            events = peer.send(stream[start:cut])
            seen.append(([comparable(e) for e in events], peer.conn.data_to_send(0)))
            start = max(start, cut)
        return seen, peer.conn.state


properties = st.one_of(
    st.builds(
        commands.Basic.Properties,
        content_type=st.sampled_from([None, "text/plain"]),
        delivery_mode=st.sampled_from([None, 1, 2]),
        message_id=st.sampled_from([None, "m1", "ü"]),
        priority=st.sampled_from([None, 0, 5]),
    ),
    st.just(commands.Basic.Properties(headers={"a": 1}, delivery_mode=2)),
)
channels = st.integers(1, 3)
messages = st.builds(
    publish,
    channels,
    st.one_of(st.binary(max_size=40), st.binary(min_size=1000, max_size=3000)),
    properties,
    st.sampled_from([0, 0, 0, 7, 1024]),
    st.sampled_from(["", "amq.direct", "x"]),
    st.booleans(),
)
others = st.sampled_from(
    [
        frame.marshal(commands.Channel.Open(), 1),
        frame.marshal(commands.Channel.Open(), 2),
        frame.marshal(
            commands.Channel.Close(reply_code=200, reply_text="ok", class_id=0, method_id=0), 2
        ),
        frame.marshal(commands.Channel.CloseOk(), 1),
        frame.marshal(commands.Basic.Qos(prefetch_count=5), 1),
        frame.marshal(commands.Channel.Flow(active=False), 3),
        frame.marshal(commands.Basic.Ack(delivery_tag=1), 3),
        # half a message: its header reserves body budget that later publishes meet
        frame.marshal(commands.Basic.Publish(routing_key="q"), 2)
        + frame.marshal(header.ContentHeader(0, 2000, commands.Basic.Properties()), 2),
        frame.marshal(pamqp_body.ContentBody(b"x"), 1),
        frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 3),
        b"\x08\x00\x00\x00\x00\x00\x00\xce",  # heartbeat
    ]
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Channel opens, then messages and other frames; some octets changed."""
    pieces = [frame.marshal(commands.Channel.Open(), n) for n in (1, 2, 3)]
    pieces += draw(st.lists(st.one_of(messages, messages, messages, others), max_size=10))
    stream = bytearray(b"".join(pieces))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        if len(stream) > 60:  # past the channel opens, mostly
            at = draw(st.integers(30, len(stream) - 1))
            stream[at] = draw(st.integers(0, 255))
    cuts = draw(st.lists(st.integers(0, len(stream)), max_size=4))
    return bytes(stream), cuts


@given(case=streams())
@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_runs_give_what_frames_give(
    case: tuple[bytes, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, cuts = case
    assert run(stream, cuts, True, monkeypatch) == run(stream, cuts, False, monkeypatch)


def test_a_buffered_publish_is_read_whole_without_frame_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The common case takes none of the frame-by-frame path: no frame decoded, nothing
    through the content assembler; the message comes out as the frames would give it."""
    peer = open_peer(frame_max=FRAME_MAX, settings=SETTINGS)
    peer.send(commands.Channel.Open(), channel=1)
    peer.frames()
    taken: list[object] = []
    original = FrameReader.next_frame

    def counted(self: FrameReader) -> Any:
        found = original(self)
        if found is not None:
            taken.append(found)
        return found

    monkeypatch.setattr(FrameReader, "next_frame", counted)
    properties = commands.Basic.Properties(delivery_mode=2, message_id="m1")
    events = peer.send(publish(1, b"hello", properties) * 3)
    assert taken == []
    contents = [e for e in events if isinstance(e, ContentReceived)]
    assert len(contents) == len(events)
    assert [(e.channel, e.method.routing_key, e.properties_raw, e.body) for e in contents] == [
        (1, "q", properties.marshal(), b"hello")
    ] * 3
    assert contents[0].properties.delivery_mode == 2
    # a repeated basic.publish is decoded once (read, never changed downstream)
    assert contents[0].method is contents[2].method


@pytest.mark.parametrize(
    "stream",
    [
        publish(1, b"", commands.Basic.Properties()),  # no body frame
        publish(1, b"abcdef", commands.Basic.Properties(), split=3),  # two body frames
        publish(1, b"abc", commands.Basic.Properties(headers={"h": 1})),  # a table
        publish(1, b"abc", commands.Basic.Properties())[:-1],  # the body frame incomplete
        publish(1, b"abc", commands.Basic.Properties())[:-1] + b"\x00",  # bad frame end
    ],
)
def test_anything_but_the_common_case_is_left_to_the_frames(stream: bytes) -> None:
    reader = FrameReader(FRAME_MAX)
    reader.feed(stream)
    assert next_publish(reader) is None
    assert reader.buffered == len(stream)  # nothing consumed


def test_a_body_frame_longer_than_announced_is_left_to_the_frames() -> None:
    stream = bytearray(publish(1, b"abc", commands.Basic.Properties()))
    size_at = len(stream) - 4 - 4  # the body frame's size field
    struct.pack_into(">I", stream, size_at, 4)
    reader = FrameReader(FRAME_MAX)
    reader.feed(bytes(stream[:-1]) + b"d\xce")
    assert next_publish(reader) is None


PLAIN = commands.Basic.Properties(delivery_mode=2)
HALF_MESSAGE = frame.marshal(commands.Basic.Publish(routing_key="q"), 2) + frame.marshal(
    header.ContentHeader(0, 2000, commands.Basic.Properties()), 2
)


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        # the channel's own content is under way: 505 for the second publish
        (HALF_MESSAGE + publish(2, b"abc", PLAIN), "UNEXPECTED_FRAME"),
        # another channel's content holds the connection's body budget
        (HALF_MESSAGE + publish(1, b"x" * 2500, PLAIN), "amqp.max_incoming_body_bytes"),
        # over the maximum message size
        (publish(1, b"x" * 2501, PLAIN), "max size 2500"),
        # after our channel.close only close-ok counts: the publish is dropped
        (publish(1, b"x" * 2501, PLAIN) + publish(1, b"abc", PLAIN), "max size 2500"),
        # a channel not open
        (publish(4, b"abc", PLAIN), "CHANNEL_ERROR"),
    ],
)
def test_a_whole_publish_its_channel_would_refuse_gets_the_frames_answer(
    stream: bytes, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = b"".join(frame.marshal(commands.Channel.Open(), n) for n in (1, 2, 3))
    fast = run(opens + stream, [len(opens)], True, monkeypatch)
    assert fast == run(opens + stream, [len(opens)], False, monkeypatch)
    [(events, output)] = fast[0][1:]
    assert not any(e[0] == "content" for e in events)
    assert expected.encode() in output or any(expected in repr(e) for e in events)
