"""A scripted AMQP client for unit tests: it drives the sans-I/O core with pamqp
frames and decodes what the core sends back, so the core and the broker layer
are tested without sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pamqp import base, commands, frame

from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.broker_model import VhostAccess
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection
from pulsar_gateway.handlers.amqp.events import ConnectionOpened, Event
from pulsar_gateway.handlers.amqp.frames import PROTOCOL_HEADER, FrameReader, MethodFrame

USERS = {"guest": "guest", "alice": "s3cret"}
CLIENT_CAPABILITIES = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}


class Peer:
    """A scripted client: sends pamqp frames, decodes what the server sends."""

    def __init__(self, conn: AmqpConnection) -> None:
        self.conn = conn
        self.now = 0.0
        self.reader = FrameReader(0)
        self.events: list[Event] = []

    def send(self, *items: Any, channel: int = 0) -> list[Event]:
        data = b"".join(
            item if isinstance(item, bytes) else frame.marshal(item, channel) for item in items
        )
        events = self.conn.receive_data(data, self.now)
        self.events.extend(events)
        return events

    def frames(self) -> list[Any]:
        self.reader.feed(self.conn.data_to_send(self.now))
        found = []
        while (item := self.reader.next_frame()) is not None:
            found.append(item)
        return found

    def methods(self) -> list[tuple[int, base.Frame]]:
        return [(f.channel, f.method) for f in self.frames() if isinstance(f, MethodFrame)]


def connect(
    *,
    peer_host: str = "127.0.0.1",
    settings: ConnectionSettings | None = None,
    policy: Callable[[str, str], VhostAccess] | None = None,
) -> Peer:
    kwargs: dict[str, Any] = {"settings": settings}
    if policy is not None:
        kwargs["vhost_policy"] = policy
    conn = AmqpConnection(Authenticator(USERS), peer_host, now=0.0, **kwargs)
    return Peer(conn)


def start_ok(
    user: str = "guest",
    password: str = "guest",
    capabilities: dict[str, Any] | None = None,
    mechanism: str = "PLAIN",
) -> commands.Connection.StartOk:
    return commands.Connection.StartOk(
        client_properties={
            "product": "test",
            "capabilities": CLIENT_CAPABILITIES if capabilities is None else capabilities,
        },
        mechanism=mechanism,
        response=f"\x00{user}\x00{password}",
    )


def open_peer(
    heartbeat: int = 60,
    frame_max: int = 131072,
    channel_max: int = 2047,
    capabilities: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Peer:
    peer = connect(**kwargs)
    peer.send(PROTOCOL_HEADER)
    peer.send(start_ok(capabilities=capabilities))
    peer.send(
        commands.Connection.TuneOk(
            channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
        )
    )
    events = peer.send(commands.Connection.Open(virtual_host="/"))
    assert isinstance(events[0], ConnectionOpened)
    peer.frames()
    return peer
