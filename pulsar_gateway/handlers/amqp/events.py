"""What the sans-I/O AMQP connection tells its driver, h11-style.

`AmqpConnection.receive_data` returns these; the driver (the asyncio
listener) acts on them in order and then writes `data_to_send()`, so any reply
it queues while handling an event goes out after the core's own replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pamqp import base, commands


@dataclass(frozen=True, slots=True)
class ConnectionOpened:
    """connection.open-ok is queued: channels may now be opened.

    `create_vhost` is True when the vhost policy asked for the vhost to be
    created on first use (the namespace must exist before the first declare).
    """

    username: str
    vhost: str
    client_properties: dict[str, Any]
    capabilities: dict[str, Any]
    frame_max: int
    channel_max: int
    heartbeat: int
    create_vhost: bool


@dataclass(frozen=True, slots=True)
class ConnectionHandedOff:
    """connection.open named a vhost another cluster member serves (docs/cluster.md, "AMQP
    on one port"): nothing was answered, and the driver passes the connection on to that
    member, replaying the handshake it read. No `ConnectionClosed` follows."""

    vhost: str


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The AMQP session is over; emitted exactly once per connection.

    `cause` is "client" (connection.close received), "server" (we sent
    connection.close or refused the handshake) or "lost" (socket gone,
    missed heartbeats, handshake timeout). Every channel that was still open
    got its `ChannelClosed` just before this. The socket is to be closed once
    `AmqpConnection.closed` is true and `data_to_send()` has been written.
    """

    reply_code: int
    reply_text: str
    cause: Literal["client", "server", "lost"]


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    """channel.open-ok is queued; the broker layer may set up per-channel state."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The channel is gone for the broker: cancel its consumers, requeue its
    unacked deliveries, drop its pending confirms. Emitted once per channel."""

    channel: int
    reply_code: int
    reply_text: str
    by_client: bool


@dataclass(frozen=True, slots=True)
class ChannelFlowChanged:
    """channel.flow from the client: stop (or resume) deliveries on the channel."""

    channel: int
    active: bool


@dataclass(frozen=True, slots=True)
class MethodReceived:
    """A channel method for the broker layer (exchange, queue, basic, tx, confirm)."""

    channel: int
    method: base.Frame


@dataclass(frozen=True, slots=True)
class ContentReceived:
    """A complete basic.publish: method, content header and every body frame.

    `properties_raw` is the header's property octets as the client sent them;
    store and deliver those, so nothing is lost in a decode/encode round trip.
    """

    channel: int
    method: commands.Basic.Publish
    properties: commands.Basic.Properties
    properties_raw: bytes
    body: bytes = field(repr=False)


Event = (
    ConnectionOpened
    | ConnectionClosed
    | ConnectionHandedOff
    | ChannelOpened
    | ChannelClosed
    | ChannelFlowChanged
    | MethodReceived
    | ContentReceived
)
