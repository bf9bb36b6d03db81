"""The connection's states and the steps of its handshake, as RabbitMQ's reader has them.

Pure functions of the settings and what the client sent: the connection.start the server
offers, the checks of connection.tune-ok, and what connection.open is refused with for the
vhost policy's answer. The state machine (connection_state.py) calls them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import Enum

from pamqp import commands

from pulsar_gateway.handlers.amqp.broker_model import VhostAccess
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings
from pulsar_gateway.handlers.amqp.content_assembly import method_ids
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.frames import FRAME_MIN_SIZE
from pulsar_gateway.handlers.amqp.heartbeat_clock import Phase

CHANNEL_MIN = 1
_Connection = commands.Connection


class ConnectionState(Enum):
    """Where the connection is in its life; RabbitMQ's reader has the same steps."""

    AWAITING_HEADER = "awaiting-header"
    STARTING = "starting"  # connection.start sent, awaiting start-ok
    TUNING = "tuning"  # connection.tune sent, awaiting tune-ok
    OPENING = "opening"  # awaiting connection.open
    OPEN = "open"
    CLOSING = "closing"  # connection.close sent, awaiting close-ok
    CLOSED = "closed"  # nothing more to read; close the socket after flushing
    # connection.open for a vhost another member serves: the driver passes the socket on
    # to that member (ConnectionHandedOff); this core reads and writes nothing more
    HANDED_OFF = "handed-off"


PHASES = {
    ConnectionState.AWAITING_HEADER: Phase.HANDSHAKE,
    ConnectionState.STARTING: Phase.HANDSHAKE,
    ConnectionState.TUNING: Phase.HANDSHAKE,
    ConnectionState.OPENING: Phase.HANDSHAKE,
    ConnectionState.OPEN: Phase.RUNNING,
    ConnectionState.CLOSING: Phase.CLOSING,
    ConnectionState.CLOSED: Phase.DONE,
    ConnectionState.HANDED_OFF: Phase.DONE,
}
# states in which the core takes no more input and keeps no time
INERT_STATES = frozenset({ConnectionState.CLOSED, ConnectionState.HANDED_OFF})
RABBIT_STATE_NAMES = {
    ConnectionState.STARTING: "starting",
    ConnectionState.TUNING: "tuning",
    ConnectionState.OPENING: "opening",
    ConnectionState.OPEN: "running",
}


def server_start(
    settings: ConnectionSettings, mechanisms: Iterable[str]
) -> commands.Connection.Start:
    """connection.start: who the server is, its capabilities and SASL mechanisms."""
    return _Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties={
            "product": settings.product,
            "version": settings.version,
            "platform": f"Python {sys.version.split()[0]}",
            "information": "AMQP 0-9-1 on Apache Pulsar",
            "capabilities": dict(settings.capabilities),
        },
        mechanisms=" ".join(mechanisms),
        locales="en_US",
    )


def check_tune_ok(settings: ConnectionSettings, method: commands.Connection.TuneOk) -> None:
    """The client's frame_max and channel_max must lie within the server's (530)."""
    _check_negotiated("frame_max", FRAME_MIN_SIZE, settings.frame_max, method.frame_max)
    _check_negotiated("channel_max", CHANNEL_MIN, settings.channel_max, method.channel_max)


def open_refusal(access: VhostAccess, vhost: str, username: str) -> AmqpError | None:
    """What connection.open is refused with for the vhost policy's answer, as RabbitMQ
    words it; None when the connection may go on (here or handed to another member)."""
    if access is VhostAccess.NOT_FOUND:
        return AmqpError(ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found")
    if access is VhostAccess.REFUSED:
        return AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"access to vhost '{vhost}' refused for user '{username}'",
        )
    if access is VhostAccess.RESERVED:
        return AmqpError(
            ReplyCode.ACCESS_REFUSED,
            f"access to vhost '{vhost}' refused: it maps onto the gateway's own namespace",
        )
    if access is VhostAccess.MOVING:
        return AmqpError(
            ReplyCode.CONNECTION_FORCED,
            f"vhost '{vhost}' is moving to another gateway; reconnect",
        )
    return None


def _check_negotiated(field_name: str, minimum: int, server: int, client: int) -> None:
    """RabbitMQ's validate_negotiated_integer_value, with its texts (530)."""
    if client != 0 and client < minimum:
        _fail_negotiation(field_name, "lower", "minimum", minimum, client)
    if server != 0 and (client == 0 or client > server):
        _fail_negotiation(field_name, "higher", "maximum", server, client)


def _fail_negotiation(
    field_name: str, comparison: str, bound: str, limit: int, client: int
) -> None:
    detail = " (no limit)" if field_name == "channel_max" and client == 0 else ""
    raise AmqpError(
        ReplyCode.NOT_ALLOWED,
        f"negotiated {field_name} = {client}{detail} is {comparison} than the {bound} "
        f"allowed value ({limit})",
        *method_ids(_Connection.Tune()),
    )
