"""The sans-I/O AMQP connection state machine, driven with client bytes.

Most tests marshal frames with pamqp (as aiormq does); the last ones run the
real pika and aiormq clients against a tiny loopback socket server whose
only logic is this core, and replay the exact bytes pika sent.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pamqp_body
from pamqp import commands, encode, frame, header

from harness.amqp_peer import (
    CLIENT_CAPABILITIES,
    USERS,
    Peer,
    connect,
    open_peer,
    start_ok,
)
from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp.authentication import Authenticator, is_loopback, parse_plain
from pulsar_gateway.handlers.amqp.broker_model import VhostAccess
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection, ConnectionState
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionClosed,
    ConnectionOpened,
    ContentReceived,
    Event,
    MethodReceived,
)
from pulsar_gateway.handlers.amqp.frames import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    HeaderFrame,
    MethodFrame,
    make_method,
)


def open_channel(peer: Peer, number: int = 1) -> None:
    assert peer.send(commands.Channel.Open(), channel=number) == [ChannelOpened(number)]
    assert [type(m) for _, m in peer.methods()] == [commands.Channel.OpenOk]


def only_close(peer: Peer) -> commands.Connection.Close:
    [(channel, method)] = peer.methods()
    assert channel == 0
    assert isinstance(method, commands.Connection.Close)
    return method


def publish_frames(body: bytes, channel: int = 1, frame_size: int = 0) -> bytes:
    pieces = [
        frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), channel),
        frame.marshal(
            header.ContentHeader(0, len(body), commands.Basic.Properties(message_id="m1")), channel
        ),
    ]
    step = frame_size or max(len(body), 1)
    for start in range(0, len(body), step):
        pieces.append(frame.marshal(pamqp_body.ContentBody(body[start : start + step]), channel))
    return b"".join(pieces)


# --- handshake ---------------------------------------------------------------------------


def test_handshake_as_rabbitmq() -> None:
    peer = connect()
    assert peer.send(PROTOCOL_HEADER[:3]) == []
    assert peer.conn.data_to_send(0) == b""
    peer.send(PROTOCOL_HEADER[3:])
    [(_, start)] = peer.methods()
    assert isinstance(start, commands.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "PLAIN AMQPLAIN"
    assert start.locales == "en_US"
    capabilities = start.server_properties["capabilities"]
    assert capabilities["publisher_confirms"] is True
    assert capabilities["connection.blocked"] is True
    assert capabilities["authentication_failure_close"] is True

    peer.send(start_ok())
    [(_, tune)] = peer.methods()
    assert isinstance(tune, commands.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)

    assert (
        peer.send(commands.Connection.TuneOk(channel_max=100, frame_max=8192, heartbeat=30)) == []
    )
    events = peer.send(commands.Connection.Open(virtual_host="/"))
    assert events == [
        ConnectionOpened(
            username="guest",
            vhost="/",
            client_properties={"product": "test", "capabilities": CLIENT_CAPABILITIES},
            capabilities=CLIENT_CAPABILITIES,
            frame_max=8192,
            channel_max=100,
            heartbeat=30,
            create_vhost=True,
        )
    ]
    assert [type(m) for _, m in peer.methods()] == [commands.Connection.OpenOk]
    assert peer.conn.state is ConnectionState.OPEN


def test_pipelined_handshake_in_one_chunk() -> None:
    peer = connect()
    events = peer.send(
        PROTOCOL_HEADER,
        start_ok(),
        commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0),
    )
    # channel_max 0 means "no limit", which RabbitMQ refuses when it has one.
    assert isinstance(events[-1], ConnectionClosed)
    methods = peer.methods()
    close = methods[-1][1]
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 530
    assert close.reply_text == (
        "NOT_ALLOWED - negotiated channel_max = 0 (no limit) is higher than the maximum "
        "allowed value (2047)"
    )
    assert (close.class_id, close.method_id) == (10, 30)


@pytest.mark.parametrize(
    "header_bytes",
    [b"AMQP\x01\x01\x00\x09", b"AMQP\x00\x00\x08\x00", b"GET / HTTP/1.1\r\n", b"\x16\x03\x01"],
)
def test_other_protocol_headers_get_ours_back_and_a_close(header_bytes: bytes) -> None:
    peer = connect()
    events = peer.send(header_bytes)
    assert peer.conn.data_to_send(0) == PROTOCOL_HEADER
    assert peer.conn.closed
    assert [type(e) for e in events] == [ConnectionClosed]
    assert peer.send(b"more") == []


@pytest.mark.parametrize(
    ("frame_max", "text"),
    [
        (1000, "negotiated frame_max = 1000 is lower than the minimum allowed value (4096)"),
        (0, "negotiated frame_max = 0 is higher than the maximum allowed value (131072)"),
        (200000, "negotiated frame_max = 200000 is higher than the maximum allowed value (131072)"),
    ],
)
def test_frame_max_negotiation(frame_max: int, text: str) -> None:
    peer = connect()
    peer.send(PROTOCOL_HEADER, start_ok())
    peer.frames()
    peer.send(commands.Connection.TuneOk(channel_max=10, frame_max=frame_max, heartbeat=0))
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (530, f"NOT_ALLOWED - {text}")


def test_frame_max_applies_after_tune_ok() -> None:
    peer = open_peer(frame_max=4096)
    open_channel(peer)
    peer.send(publish_frames(b"x" * 5000))  # one body frame of 5000 > 4096
    close = only_close(peer)
    assert close.reply_code == ReplyCode.FRAME_ERROR
    assert "frame_too_large,5000,4088" in close.reply_text
    assert peer.conn.closed  # frame sync is lost: no wait for close-ok


def test_start_ok_larger_than_the_initial_frame_max_is_dropped() -> None:
    peer = connect()
    peer.send(PROTOCOL_HEADER)
    peer.frames()
    big = start_ok()
    big.client_properties["padding"] = "x" * 5000
    peer.send(big)
    assert peer.frames() == []  # a handshake error: RabbitMQ just hangs up
    assert peer.conn.closed


# --- authentication ----------------------------------------------------------------------


def test_wrong_password_with_auth_failure_close_capability() -> None:
    peer = connect()
    peer.send(PROTOCOL_HEADER)
    peer.frames()
    events = peer.send(start_ok(password="nope"))
    close = only_close(peer)
    assert close.reply_code == 403
    assert close.reply_text == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )
    assert (close.class_id, close.method_id) == (10, 11)
    assert isinstance(events[-1], ConnectionClosed)
    assert peer.conn.state is ConnectionState.CLOSING
    peer.send(commands.Connection.CloseOk())
    assert peer.conn.closed


def test_wrong_password_without_the_capability_is_a_silent_close() -> None:
    peer = connect()
    peer.send(PROTOCOL_HEADER)
    peer.frames()
    events = peer.send(start_ok(password="nope", capabilities={"basic.nack": True}))
    assert peer.frames() == []
    assert peer.conn.closed
    assert events == [
        ConnectionClosed(
            403,
            "ACCESS_REFUSED - PLAIN login refused: user 'guest' - invalid credentials",
            "server",
        )
    ]


@pytest.mark.parametrize(
    ("host", "user", "password", "accepted"),
    [
        ("127.0.0.1", "guest", "guest", True),
        ("127.8.9.10", "guest", "guest", True),
        ("::1", "guest", "guest", True),
        ("::ffff:127.0.0.1", "guest", "guest", True),
        ("10.0.0.5", "guest", "guest", False),
        ("2001:db8::1", "guest", "guest", False),
        ("10.0.0.5", "alice", "s3cret", True),
        ("10.0.0.5", "alice", "", False),
        ("10.0.0.5", "mallory", "s3cret", False),
    ],
)
def test_credentials_and_the_loopback_rule(
    host: str, user: str, password: str, accepted: bool
) -> None:
    peer = connect(peer_host=host)
    peer.send(PROTOCOL_HEADER)
    peer.frames()
    peer.send(start_ok(user, password, capabilities={}))
    if accepted:
        assert peer.conn.state is ConnectionState.TUNING
    else:
        assert peer.conn.closed


def test_loopback_refusal_text() -> None:
    with pytest.raises(AmqpError) as info:
        Authenticator(USERS).authenticate("PLAIN", b"\x00guest\x00guest", "192.168.1.2")
    assert info.value.explanation == (
        "PLAIN login refused: user 'guest' can only connect via localhost"
    )
    assert Authenticator(USERS, loopback_users=()).authenticate(
        "PLAIN", b"\x00guest\x00guest", "192.168.1.2"
    )


def test_amqplain_as_py_amqp_sends_it() -> None:
    # py-amqp (kombu, Celery) sends a field table without its length prefix.
    table = encode.field_table({"LOGIN": "alice", "PASSWORD": "s3cret"})[4:]
    peer = connect(peer_host="10.1.1.1")
    peer.send(PROTOCOL_HEADER)
    peer.send(
        commands.Connection.StartOk(
            client_properties={}, mechanism="AMQPLAIN", response=table.decode()
        )
    )
    assert peer.conn.state is ConnectionState.TUNING
    assert peer.conn.username == "alice"


@pytest.mark.parametrize(
    ("mechanism", "response", "code"),
    [
        ("EXTERNAL", "", ReplyCode.COMMAND_INVALID),
        ("CRAM-MD5", "", ReplyCode.COMMAND_INVALID),
        ("PLAIN", "guest\x00guest", ReplyCode.SYNTAX_ERROR),
        ("PLAIN", "authz\x00guest\x00guest", ReplyCode.SYNTAX_ERROR),
        ("PLAIN", "\x00guest\x00gu\x00est", ReplyCode.SYNTAX_ERROR),
        ("AMQPLAIN", "\x05LOGINS\x00\x00\x00\x05guest", ReplyCode.SYNTAX_ERROR),
        ("AMQPLAIN", "\xff\xff", ReplyCode.SYNTAX_ERROR),
    ],
)
def test_bad_mechanisms_and_responses(mechanism: str, response: str, code: int) -> None:
    with pytest.raises(AmqpError) as info:
        Authenticator(USERS).authenticate(mechanism, response, "127.0.0.1")
    assert info.value.reply_code == code
    assert "guest" not in info.value.explanation or mechanism == "AMQPLAIN"


def test_auth_helpers() -> None:
    assert parse_plain(b"\x00u\x00p") == ("u", "p")
    assert is_loopback("127.0.0.1") and not is_loopback("localhost")
    assert not is_loopback("::ffff:10.0.0.1")
    with pytest.raises(ValueError):
        Authenticator(USERS, mechanisms=("PLAIN", "GSSAPI"))


def test_only_offered_mechanisms_are_accepted() -> None:
    auth = Authenticator(USERS, mechanisms=("PLAIN",))
    with pytest.raises(AmqpError) as info:
        auth.authenticate("AMQPLAIN", b"", "127.0.0.1")
    assert info.value.explanation == "invalid authentication mechanism 'AMQPLAIN'"


# --- vhosts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("access", "text"),
    [
        (VhostAccess.NOT_FOUND, "NOT_ALLOWED - vhost prod not found"),
        (VhostAccess.REFUSED, "NOT_ALLOWED - access to vhost 'prod' refused for user 'guest'"),
    ],
)
def test_vhost_policy_refusals(access: VhostAccess, text: str) -> None:
    asked = []

    def policy(user: str, vhost: str) -> VhostAccess:
        asked.append((user, vhost))
        return access

    peer = connect(policy=policy)
    peer.send(PROTOCOL_HEADER, start_ok())
    peer.send(commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    peer.frames()
    events = peer.send(commands.Connection.Open(virtual_host="prod"))
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (530, text)
    assert (close.class_id, close.method_id) == (10, 40)
    assert asked == [("guest", "prod")]
    assert [type(e) for e in events] == [ConnectionClosed]


def test_vhost_allowed_without_creation() -> None:
    peer = connect(policy=lambda user, vhost: VhostAccess.ALLOWED)
    peer.send(PROTOCOL_HEADER, start_ok())
    peer.send(commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    [opened] = peer.send(commands.Connection.Open(virtual_host="prod"))
    assert isinstance(opened, ConnectionOpened)
    assert (opened.vhost, opened.create_vhost) == ("prod", False)


def test_connection_method_in_the_wrong_state() -> None:
    peer = open_peer()
    peer.send(commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (
        504,
        "CHANNEL_ERROR - unexpected method in connection state running",
    )
    assert (close.class_id, close.method_id) == (10, 31)


def test_frames_on_channels_before_open_are_a_silent_handshake_error() -> None:
    peer = connect()
    peer.send(PROTOCOL_HEADER)
    peer.frames()
    peer.send(commands.Channel.Open(), channel=1)
    assert peer.frames() == []
    assert peer.conn.closed


# --- channels ----------------------------------------------------------------------------


def test_channel_lifecycle() -> None:
    peer = open_peer()
    open_channel(peer, 1)
    open_channel(peer, 7)
    assert peer.conn.open_channels == [1, 7]
    events = peer.send(
        commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
        channel=1,
    )
    assert events == [ChannelClosed(1, 200, "bye", True)]
    assert [(c, type(m)) for c, m in peer.methods()] == [(1, commands.Channel.CloseOk)]
    open_channel(peer, 1)  # the number is free again


def test_method_on_a_channel_that_is_not_open() -> None:
    peer = open_peer()
    peer.send(commands.Queue.Declare(queue="q"), channel=3)
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (504, "CHANNEL_ERROR - expected 'channel.open'")
    assert (close.class_id, close.method_id) == (50, 10)


def test_second_channel_open() -> None:
    peer = open_peer()
    open_channel(peer)
    peer.send(commands.Channel.Open(), channel=1)
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (
        504,
        "CHANNEL_ERROR - second 'channel.open' seen",
    )


def test_channel_max_is_enforced() -> None:
    peer = open_peer(channel_max=2)
    open_channel(peer, 1)
    open_channel(peer, 2)
    peer.send(commands.Channel.Open(), channel=3)
    close = only_close(peer)
    assert close.reply_code == 530
    assert close.reply_text == (
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    )


def test_broker_methods_become_events() -> None:
    peer = open_peer()
    open_channel(peer)
    declare = commands.Queue.Declare(queue="q", durable=True)
    ack = commands.Basic.Ack(delivery_tag=3)
    events = peer.send(declare, ack, commands.Confirm.Select(), channel=1)
    assert [type(e) for e in events] == [MethodReceived] * 3
    assert events[0].channel == 1
    assert events[0].method.queue == "q"
    assert peer.frames() == []  # the broker layer answers these


def test_server_only_methods_from_a_client_are_command_invalid() -> None:
    peer = open_peer()
    open_channel(peer)
    deliver = make_method(
        commands.Basic.Deliver, consumer_tag="c", delivery_tag=1, exchange="", routing_key="q"
    )
    peer.send(deliver, channel=1)
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (503, "COMMAND_INVALID - unimplemented method")
    assert (close.class_id, close.method_id) == (60, 60)


def test_connection_methods_off_channel_zero() -> None:
    peer = open_peer()
    open_channel(peer)
    peer.send(commands.Connection.Open(virtual_host="/"), channel=1)
    assert only_close(peer).reply_code == ReplyCode.COMMAND_INVALID


def test_channel_flow() -> None:
    peer = open_peer()
    open_channel(peer)
    assert peer.send(commands.Channel.Flow(active=False), channel=1) == [
        ChannelFlowChanged(1, False)
    ]
    [(_, flow_ok)] = peer.methods()
    assert isinstance(flow_ok, commands.Channel.FlowOk) and flow_ok.active is False
    assert not peer.conn.channel_flow_active(1)
    assert peer.send(commands.Channel.Flow(active=True), channel=1) == [ChannelFlowChanged(1, True)]
    assert peer.conn.channel_flow_active(1)


def test_channel_flow_off_like_rabbitmq() -> None:
    peer = open_peer(settings=ConnectionSettings(support_channel_flow=False))
    open_channel(peer)
    peer.send(commands.Channel.Flow(active=False), channel=1)
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (540, "NOT_IMPLEMENTED - active=false")


def test_soft_error_closes_the_channel_and_waits_for_close_ok() -> None:
    peer = open_peer()
    open_channel(peer)
    events = peer.conn.send_error(
        1, AmqpError(ReplyCode.NOT_FOUND, "no queue 'q' in vhost '/'", 50, 10)
    )
    assert events == [ChannelClosed(1, 404, "NOT_FOUND - no queue 'q' in vhost '/'", False)]
    [(channel, close)] = peer.methods()
    assert channel == 1 and isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (404, 50, 10)
    # Until close-ok, everything but close/close-ok is dropped.
    assert peer.send(commands.Queue.Declare(queue="x"), channel=1) == []
    assert peer.send(publish_frames(b"abc")) == []
    assert not peer.conn.send_method(1, commands.Basic.QosOk())
    assert peer.conn.send_error(1, AmqpError(ReplyCode.NOT_FOUND, "again")) == []
    peer.send(
        commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), channel=1
    )
    assert [type(m) for _, m in peer.methods()] == [commands.Channel.CloseOk]
    peer.send(commands.Channel.CloseOk(), channel=1)
    assert peer.conn.open_channels == []
    open_channel(peer)


def test_hard_error_from_the_broker_layer_closes_the_connection() -> None:
    peer = open_peer()
    open_channel(peer)
    open_channel(peer, 2)
    events = peer.conn.send_error(
        1, AmqpError(ReplyCode.COMMAND_INVALID, "unknown exchange type 'x'")
    )
    assert [type(e) for e in events] == [ChannelClosed, ChannelClosed, ConnectionClosed]
    assert only_close(peer).reply_code == 503
    assert peer.conn.state is ConnectionState.CLOSING
    assert peer.send(commands.Queue.Declare(queue="q"), channel=2) == []
    assert peer.methods() == []
    peer.send(commands.Connection.CloseOk())
    assert peer.conn.closed


# --- content assembly --------------------------------------------------------------------


def test_publish_in_several_body_frames() -> None:
    peer = open_peer()
    open_channel(peer)
    body = bytes(range(256)) * 100
    [message] = peer.send(publish_frames(body, frame_size=1000))
    assert isinstance(message, ContentReceived)
    assert message.body == body
    assert message.method.routing_key == "q"
    assert message.properties.message_id == "m1"
    assert message.properties_raw == commands.Basic.Properties(message_id="m1").marshal()


def test_empty_body_needs_no_body_frame() -> None:
    peer = open_peer()
    open_channel(peer)
    [message] = peer.send(publish_frames(b""))
    assert isinstance(message, ContentReceived) and message.body == b""


def test_interleaved_channels_assemble_separately() -> None:
    peer = open_peer()
    open_channel(peer, 1)
    open_channel(peer, 2)
    # Frames of different channels may interleave; frames themselves may not.
    one = split_frames(publish_frames(b"one", channel=1))
    two = split_frames(publish_frames(b"two", channel=2))
    events = peer.send(*[f for pair in zip(one, two, strict=True) for f in pair])
    assert [(e.channel, e.body) for e in events] == [(1, b"one"), (2, b"two")]


def split_frames(data: bytes) -> list[bytes]:
    frames = []
    while data:
        size = 8 + int.from_bytes(data[3:7], "big")
        frames.append(data[:size])
        data = data[size:]
    return frames


def unexpected(peer: Peer, data: bytes) -> commands.Connection.Close:
    open_channel(peer)
    peer.send(data)
    close = only_close(peer)
    assert close.reply_code == ReplyCode.UNEXPECTED_FRAME
    return close


def test_body_without_header() -> None:
    publish = frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    close = unexpected(open_peer(), publish + frame.marshal(pamqp_body.ContentBody(b"x"), 1))
    assert close.reply_text == (
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header "
        "frame instead"
    )
    assert (close.class_id, close.method_id) == (60, 40)


def test_header_without_publish() -> None:
    close = unexpected(open_peer(), frame.marshal(header.ContentHeader(0, 1), 1))
    assert close.reply_text == (
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    )
    assert (close.class_id, close.method_id) == (0, 0)


def test_body_without_anything() -> None:
    unexpected(open_peer(), frame.marshal(pamqp_body.ContentBody(b"x"), 1))


def test_method_while_body_is_expected() -> None:
    data = publish_frames(b"abcdef")[:-14] + frame.marshal(commands.Basic.Ack(delivery_tag=1), 1)
    close = unexpected(open_peer(), data)
    assert close.reply_text == (
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead"
    )


def test_method_while_header_is_expected() -> None:
    data = frame.marshal(commands.Basic.Publish(routing_key="q"), 1) * 2
    unexpected(open_peer(), data)


def test_header_of_another_class() -> None:
    header_payload = b"\x00\x32\x00\x00" + (1).to_bytes(8, "big") + b"\x00\x00"
    data = frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    data += b"\x02\x00\x01" + len(header_payload).to_bytes(4, "big") + header_payload + b"\xce"
    close = unexpected(open_peer(), data)
    assert close.reply_text.endswith(
        "expected content header for class 60, got one for class 50 instead"
    )


def test_body_longer_than_announced() -> None:
    peer = open_peer()
    open_channel(peer)
    data = frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    data += frame.marshal(header.ContentHeader(0, 2), 1)
    data += frame.marshal(pamqp_body.ContentBody(b"abc"), 1)
    peer.send(data)
    close = only_close(peer)
    assert (close.reply_code, close.reply_text) == (
        501,
        "FRAME_ERROR - content body frame exceeds remaining content size",
    )


def test_message_over_max_size_closes_only_the_channel() -> None:
    peer = open_peer(settings=ConnectionSettings(max_message_size=10))
    open_channel(peer)
    events = peer.send(publish_frames(b"x" * 11, frame_size=4))
    assert events == [
        ChannelClosed(
            1,
            406,
            "PRECONDITION_FAILED - message size 11 is larger than configured max size 10",
            False,
        )
    ]
    [(_, close)] = peer.methods()
    assert isinstance(close, commands.Channel.Close)
    assert (close.class_id, close.method_id) == (60, 40)
    assert peer.conn.state is ConnectionState.OPEN  # the body frames were dropped


def test_content_frames_on_channel_zero() -> None:
    peer = open_peer()
    peer.send(frame.marshal(header.ContentHeader(0, 1), 0))
    assert only_close(peer).reply_code == ReplyCode.UNEXPECTED_FRAME


def test_heartbeat_on_a_channel() -> None:
    peer = open_peer()
    open_channel(peer)
    peer.send(b"\x08\x00\x01\x00\x00\x00\x00\xce")
    assert only_close(peer).reply_code == ReplyCode.UNEXPECTED_FRAME


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x09\x00\x00\x00\x00\x00\x00\xce", 501),  # unknown frame type
        (b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x63\xce", 540),  # basic method 99
        (b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x28\x00", 501),  # bad end octet
    ],
)
def test_frame_errors_close_the_connection(data: bytes, code: int) -> None:
    peer = open_peer()
    open_channel(peer)
    events = peer.send(data)
    assert only_close(peer).reply_code == code
    assert [type(e) for e in events] == [ChannelClosed, ConnectionClosed]


# --- sending ----------------------------------------------------------------------------


def test_send_content_uses_the_negotiated_frame_max() -> None:
    peer = open_peer(frame_max=4096)
    open_channel(peer)
    deliver = make_method(
        commands.Basic.Deliver,
        consumer_tag="ctag",
        delivery_tag=1,
        redelivered=False,
        exchange="",
        routing_key="q",
    )
    raw = commands.Basic.Properties(content_type="text/plain").marshal()
    assert peer.conn.send_content(1, deliver, b"y" * 10000, properties_raw=raw)
    frames = peer.frames()
    assert isinstance(frames[0], MethodFrame) and isinstance(frames[1], HeaderFrame)
    assert frames[1].properties_raw == raw
    assert [len(f.payload) for f in frames[2:]] == [4088, 4088, 1824]
    assert not peer.conn.send_content(9, deliver, b"")  # channel 9 is not open


# --- closing -----------------------------------------------------------------------------


def test_client_close() -> None:
    peer = open_peer()
    open_channel(peer, 1)
    open_channel(peer, 2)
    events = peer.send(
        commands.Connection.Close(reply_code=200, reply_text="Normal", class_id=0, method_id=0)
    )
    assert events == [
        ChannelClosed(1, 200, "Normal", True),
        ChannelClosed(2, 200, "Normal", True),
        ConnectionClosed(200, "Normal", "client"),
    ]
    assert [type(m) for _, m in peer.methods()] == [commands.Connection.CloseOk]
    assert peer.conn.closed
    assert peer.conn.connection_lost() == []


def test_server_close_and_crossing_close() -> None:
    peer = open_peer()
    open_channel(peer)
    events = peer.conn.close()
    assert events[-1] == ConnectionClosed(320, "CONNECTION_FORCED - broker shutdown", "server")
    assert only_close(peer).reply_code == 320
    peer.send(commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    assert [type(m) for _, m in peer.methods()] == [commands.Connection.CloseOk]
    assert peer.conn.closed


def test_connection_lost_releases_channels_once() -> None:
    peer = open_peer()
    open_channel(peer, 1)
    open_channel(peer, 3)
    events = peer.conn.connection_lost()
    assert events == [
        ChannelClosed(1, 0, "connection lost", False),
        ChannelClosed(3, 0, "connection lost", False),
        ConnectionClosed(0, "connection lost", "lost"),
    ]
    assert peer.conn.connection_lost() == []
    assert peer.conn.tick(1000.0) == []


# --- time --------------------------------------------------------------------------------


def test_heartbeats_are_sent_at_half_the_interval() -> None:
    peer = open_peer(heartbeat=10)
    assert peer.conn.next_deadline() == 5.0
    assert not peer.conn.heartbeat_due(4.9)
    assert peer.conn.heartbeat_due(5.0)
    peer.conn.tick(5.0)
    peer.conn.tick(5.5)  # not queued twice before it is written
    assert peer.conn.data_to_send(5.5) == HEARTBEAT_FRAME
    assert not peer.conn.heartbeat_due(6.0)
    assert peer.conn.next_deadline() == 10.5


def test_peer_dead_after_two_silent_intervals() -> None:
    peer = open_peer(heartbeat=10)
    assert not peer.conn.peer_dead(19.9)
    peer.now = 15.0
    peer.send(HEARTBEAT_FRAME)  # any octet counts
    assert not peer.conn.peer_dead(34.9)
    assert peer.conn.peer_dead(35.0)
    open_channel(peer)
    events = peer.conn.tick(40.0)
    assert events[-1] == ConnectionClosed(0, "missed heartbeats from client, timeout: 10s", "lost")
    assert peer.conn.closed


def test_no_heartbeats_when_disabled() -> None:
    peer = open_peer(heartbeat=0)
    assert peer.conn.next_deadline() is None
    assert not peer.conn.heartbeat_due(1e9)
    assert not peer.conn.peer_dead(1e9)


def test_handshake_timeout() -> None:
    peer = connect(settings=ConnectionSettings(handshake_timeout=10))
    peer.send(PROTOCOL_HEADER)
    assert peer.conn.next_deadline() == 10
    assert not peer.conn.peer_dead(9.9)
    assert peer.conn.peer_dead(10.0)
    assert peer.conn.tick(10.0) == [ConnectionClosed(0, "handshake timeout", "lost")]
    assert peer.conn.closed


def test_close_ok_timeout() -> None:
    peer = open_peer(heartbeat=0)
    peer.now = 100.0
    peer.conn.tick(100.0)
    peer.send(commands.Channel.Open(), channel=5)
    peer.conn.send_error(0, AmqpError(ReplyCode.INTERNAL_ERROR, "oops"))
    assert peer.conn.state is ConnectionState.CLOSING
    assert not peer.conn.peer_dead(129.0)
    assert peer.conn.peer_dead(130.0)
    assert peer.conn.tick(130.0) == []  # ConnectionClosed was already emitted
    assert peer.conn.closed


# --- connection.blocked ------------------------------------------------------------------


def test_blocked_and_unblocked_for_capable_clients() -> None:
    peer = open_peer()
    peer.conn.set_blocked(True, "low on memory")
    peer.conn.set_blocked(True, "low on memory")
    [(_, blocked)] = peer.methods()
    assert isinstance(blocked, commands.Connection.Blocked)
    assert blocked.reason == "low on memory"
    assert peer.conn.blocked
    peer.conn.set_blocked(False)
    assert [type(m) for _, m in peer.methods()] == [commands.Connection.Unblocked]


def test_blocked_is_not_sent_without_the_capability() -> None:
    peer = open_peer(capabilities={"basic.nack": True})
    peer.conn.set_blocked(True)
    peer.conn.set_blocked(False)
    assert peer.frames() == []


def test_blocked_before_open_is_sent_after_open_ok() -> None:
    peer = connect()
    peer.conn.set_blocked(True, "low on disk")
    peer.send(PROTOCOL_HEADER, start_ok())
    peer.send(commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0))
    peer.send(commands.Connection.Open(virtual_host="/"))
    kinds = [type(m) for _, m in peer.methods()]
    assert kinds[-2:] == [commands.Connection.OpenOk, commands.Connection.Blocked]


def test_update_secret_is_acknowledged() -> None:
    peer = open_peer()
    peer.send(commands.Connection.UpdateSecret(new_secret="t", reason="refresh"))
    assert [type(m) for _, m in peer.methods()] == [commands.Connection.UpdateSecretOk]


# --- fuzzing through the connection -----------------------------------------------------

VALID_CLOSE_CODES = {c.value for c in ReplyCode}


def assert_sane(peer: Peer) -> None:
    """Whatever came in, the server said only well-formed things."""
    for channel, method in peer.methods():
        if isinstance(method, commands.Connection.Close | commands.Channel.Close):
            assert method.reply_code in VALID_CLOSE_CODES
            assert len(method.reply_text.encode()) <= 255
        assert channel == 0 or peer.conn.state is not ConnectionState.AWAITING_HEADER


@given(st.binary(max_size=1024), st.integers(1, 64))
@settings(max_examples=examples(200), deadline=None)
def test_fuzz_random_bytes_after_a_valid_header(garbage: bytes, chunk: int) -> None:
    peer = connect()
    data = PROTOCOL_HEADER + garbage
    for start in range(0, len(data), chunk):
        peer.send(data[start : start + chunk])  # never raises
    assert_sane(peer)
    assert sum(isinstance(e, ConnectionClosed) for e in peer.events) <= 1


frame_parts = st.tuples(
    st.sampled_from([1, 2, 3, 8, 1, 1]),
    st.integers(0, 3),
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from(
            [
                frame.marshal(m, 0)[7:-1]
                for m in (
                    commands.Channel.Open(),
                    commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0),
                    commands.Channel.CloseOk(),
                    commands.Basic.Publish(routing_key="q"),
                    commands.Queue.Declare(queue="q"),
                    commands.Connection.Close(
                        reply_code=200, reply_text="", class_id=0, method_id=0
                    ),
                    commands.Connection.CloseOk(),
                    commands.Channel.Flow(active=False),
                )
            ]
            + [
                frame.marshal(header.ContentHeader(0, 3), 0)[7:-1],
                frame.marshal(header.ContentHeader(0, 0), 0)[7:-1],
                b"abc",
            ]
        ),
    ),
)


@given(st.lists(frame_parts, max_size=12))
@settings(max_examples=examples(300), deadline=None)
def test_fuzz_frames_after_the_handshake(parts: list[tuple[int, int, bytes]]) -> None:
    peer = open_peer()
    for kind, channel, payload in parts:
        data = kind.to_bytes(1, "big") + channel.to_bytes(2, "big")
        data += len(payload).to_bytes(4, "big") + payload + b"\xce"
        peer.send(data)
    assert_sane(peer)
    closed = [e for e in peer.events if isinstance(e, ConnectionClosed)]
    assert len(closed) <= 1
    if closed:
        assert peer.conn.state in (ConnectionState.CLOSING, ConnectionState.CLOSED)
    opened = {e.channel for e in peer.events if isinstance(e, ChannelOpened)}
    for event in peer.events:
        if isinstance(event, ChannelClosed | MethodReceived | ContentReceived):
            assert event.channel in opened


# --- real clients ------------------------------------------------------------------------


class TinyServer:
    """One loopback connection served by the core alone, plus a few canned
    broker answers; records every byte the client sent."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = bytearray()
        self.events: list[Event] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        sock, (host, _) = self.listener.accept()
        conn = AmqpConnection(Authenticator(USERS), host, now=0.0)
        clock = 0.0
        with sock:
            sock.settimeout(10)
            while not conn.closed:
                try:
                    data = sock.recv(65536)
                except OSError:
                    break
                if not data:
                    self.events.extend(conn.connection_lost())
                    break
                clock += 0.001
                self.received += data
                for event in conn.receive_data(data, clock):
                    self.events.append(event)
                    self._answer(conn, event)
                sock.sendall(conn.data_to_send(clock))
        self.listener.close()

    @staticmethod
    def _answer(conn: AmqpConnection, event: Event) -> None:
        if isinstance(event, MethodReceived):
            method = event.method
            if isinstance(method, commands.Queue.Declare):
                reply = make_method(
                    commands.Queue.DeclareOk,
                    queue=method.queue or "amq.gen-test",
                    message_count=0,
                    consumer_count=0,
                )
                conn.send_method(event.channel, reply)
            elif isinstance(method, commands.Confirm.Select):
                conn.send_method(event.channel, commands.Confirm.SelectOk())
        elif isinstance(event, ContentReceived) and event.method.exchange == "confirm":
            conn.send_method(event.channel, commands.Basic.Ack(delivery_tag=1))

    def join(self) -> None:
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def summary(events: list[Event]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, MethodReceived):
            out.append(("method", event.channel, event.method.name))
        elif isinstance(event, ContentReceived):
            out.append(("content", event.channel, event.method.routing_key, event.body))
        else:
            out.append((type(event).__name__,))
    return out


def test_pika_runs_against_the_core_and_its_bytes_replay() -> None:
    import pika

    server = TinyServer()
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=server.port,
        credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=30,
        blocked_connection_timeout=5,
        socket_timeout=5,
    )
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    result = channel.queue_declare(queue="work", durable=True)
    assert result.method.queue == "work"
    channel.basic_publish(
        exchange="",
        routing_key="work",
        body=b"x" * 300_000,  # three body frames at pika's 131072 frame_max
        properties=pika.BasicProperties(content_type="text/plain", delivery_mode=2),
    )
    channel.close()
    connection.close()
    server.join()

    expected = [
        ("ConnectionOpened",),
        ("ChannelOpened",),
        ("method", 1, "Queue.Declare"),
        ("content", 1, "work", b"x" * 300_000),
        ("ChannelClosed",),
        ("ConnectionClosed",),
    ]
    assert summary(server.events) == expected
    opened = server.events[0]
    assert isinstance(opened, ConnectionOpened)
    assert opened.heartbeat == 30
    assert opened.capabilities["connection.blocked"] is True
    message = server.events[3]
    assert isinstance(message, ContentReceived)
    assert message.properties.delivery_mode == 2

    # The exact bytes pika sent, replayed through a fresh core, in one go and
    # one octet at a time, give the same events.
    captured = bytes(server.received)
    assert captured.startswith(PROTOCOL_HEADER)
    for chunk in (len(captured), 1):
        replay = AmqpConnection(Authenticator(USERS), "127.0.0.1", now=0.0)
        events: list[Event] = []
        for start in range(0, len(captured), chunk):
            events += replay.receive_data(captured[start : start + chunk], 1.0)
        assert summary(events) == expected


def test_aiormq_runs_against_the_core() -> None:
    import aiormq

    server = TinyServer()

    async def client() -> None:
        connection = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{server.port}/")
        channel = await connection.channel()
        await channel.confirm_delivery()
        confirmation = await channel.basic_publish(b"hello", exchange="confirm", routing_key="r")
        assert isinstance(confirmation, commands.Basic.Ack)
        await channel.close()
        await connection.close()

    asyncio.run(asyncio.wait_for(client(), 15))
    server.join()
    kinds = summary(server.events)
    assert kinds[0] == ("ConnectionOpened",)
    assert ("method", 1, "Confirm.Select") in kinds
    assert ("content", 1, "r", b"hello") in kinds
    assert kinds[-1] == ("ConnectionClosed",)
