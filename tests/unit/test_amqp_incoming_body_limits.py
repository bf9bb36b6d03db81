"""Half-received messages are bounded per connection (issue 10, item 13).

Every channel could hold a largest (128 MiB) message whose body trickles in: 2047 channels,
256 GiB. Now each content header reserves its announced body size in the connection's
budget (amqp.max_incoming_body_bytes) until the message is whole or dropped; a header that
would pass it, like one over amqp.max_message_bytes, closes its channel with 406
PRECONDITION_FAILED before any of its body is buffered.
"""

from __future__ import annotations

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from harness.amqp_peer import Peer, open_peer
from pulsar_gateway.gateway.config import AmqpSection, ConfigError, load_settings
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import ChannelOpened, ContentReceived
from pulsar_gateway.handlers.amqp.server import offered_settings

MIB = 1024 * 1024


def _peer(max_message: int, max_incoming: int, channels: int) -> Peer:
    settings = ConnectionSettings(
        max_message_size=max_message, max_incoming_body_bytes=max_incoming
    )
    peer = open_peer(settings=settings)
    for number in range(1, channels + 1):
        assert peer.send(commands.Channel.Open(), channel=number) == [ChannelOpened(number)]
    peer.frames()
    return peer


def _start(peer: Peer, channel: int, size: int) -> None:
    """basic.publish and a content header announcing ``size`` bytes; no body yet."""
    peer.send(
        commands.Basic.Publish(exchange="", routing_key="q"),
        header.ContentHeader(0, size, commands.Basic.Properties()),
        channel=channel,
    )


def _body(peer: Peer, channel: int, data: bytes) -> list:
    return peer.send(frame.marshal(pamqp_body.ContentBody(data), channel))


def _closes(peer: Peer) -> list[tuple[int, commands.Channel.Close]]:
    return [(n, m) for n, m in peer.methods() if isinstance(m, commands.Channel.Close)]


def test_defaults_are_rabbitmqs_max_message_size_and_two_such_messages() -> None:
    section = AmqpSection()
    assert section.max_message_bytes == 128 * MIB
    assert section.max_incoming_body_bytes == 256 * MIB
    offered = offered_settings(AmqpSection(max_message_bytes=MIB, max_incoming_body_bytes=3 * MIB))
    assert (offered.max_message_size, offered.max_incoming_body_bytes) == (MIB, 3 * MIB)


def test_settings_must_let_one_largest_message_in() -> None:
    with pytest.raises(ConfigError, match="max_incoming_body_bytes"):
        load_settings(
            None,
            {"amqp.max_message_bytes": str(4 * MIB), "amqp.max_incoming_body_bytes": str(MIB)},
        )
    with pytest.raises(ConfigError, match="max_message_bytes"):
        load_settings(None, {"amqp.max_message_bytes": str(513 * MIB)})


def test_a_message_over_max_message_bytes_is_refused_at_its_header_with_rabbitmqs_text() -> None:
    peer = _peer(128 * MIB, 256 * MIB, 1)
    _start(peer, 1, 128 * MIB + 1)
    [(number, close)] = _closes(peer)
    assert number == 1
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert close.reply_text == (
        "PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728"
    )
    assert peer.conn.incoming_body_bytes == 0
    # at RabbitMQ's ceiling its text drops "configured"
    peer = _peer(512 * MIB, 512 * MIB, 1)
    _start(peer, 1, 512 * MIB + 1)
    [(_, close)] = _closes(peer)
    assert close.reply_text.endswith("message size 536870913 is larger than max size 536870912")


def test_half_received_bodies_across_channels_are_bounded_per_connection() -> None:
    peer = _peer(1000, 2500, 4)
    _start(peer, 1, 1000)
    _start(peer, 2, 1000)
    assert peer.conn.incoming_body_bytes == 2000
    assert _closes(peer) == []
    _start(peer, 3, 1000)  # a third would take the connection to 3000 > 2500
    [(number, close)] = _closes(peer)
    assert number == 3
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "amqp.max_incoming_body_bytes" in close.reply_text
    assert (close.class_id, close.method_id) == (60, 40)
    assert peer.conn.incoming_body_bytes == 2000
    # the refused channel's body frames are dropped unbuffered; the others go on
    assert _body(peer, 3, b"z" * 1000) == []
    assert peer.conn.incoming_body_bytes == 2000
    assert _body(peer, 1, b"a" * 600) == []
    [message] = _body(peer, 1, b"a" * 400)
    assert isinstance(message, ContentReceived) and message.body == b"a" * 1000
    assert peer.conn.incoming_body_bytes == 1000  # a whole message gives its share back
    _start(peer, 4, 1000)
    assert _closes(peer) == []
    assert peer.conn.incoming_body_bytes == 2000


def test_a_closed_channel_gives_its_half_received_body_back() -> None:
    peer = _peer(1000, 1000, 2)
    _start(peer, 1, 1000)
    _body(peer, 1, b"a" * 10)
    # a method in mid-content is a hard error on RabbitMQ; a soft one from the broker layer
    # (here simulated) closes only the channel and must release what it held
    peer.conn.send_error(1, AmqpError(ReplyCode.PRECONDITION_FAILED, "refused"))
    assert peer.conn.incoming_body_bytes == 0
    _start(peer, 2, 1000)
    assert [n for n, _ in _closes(peer)] == [1]
    assert peer.conn.incoming_body_bytes == 1000


def test_empty_bodies_reserve_nothing() -> None:
    peer = _peer(1000, 1000, 1)
    for _ in range(3):
        peer.send(
            commands.Basic.Publish(exchange="", routing_key="q"),
            header.ContentHeader(0, 0, commands.Basic.Properties()),
            channel=1,
        )
    assert peer.conn.incoming_body_bytes == 0
    assert _closes(peer) == []
