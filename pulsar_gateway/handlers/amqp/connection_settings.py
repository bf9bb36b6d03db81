"""What the server offers in a connection negotiation, and who may open which vhost.

Kept apart from the state machine so the listener can build both from
`gateway.toml` without touching protocol code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pulsar_gateway.handlers.amqp.broker_model import VhostAccess
from pulsar_gateway.handlers.amqp.frames import FRAME_MIN_SIZE

# Advertised in connection.start; clients switch features on from these
# (pika refuses confirm_delivery without publisher_confirms, for one).
DEFAULT_CAPABILITIES: Mapping[str, bool] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


VhostPolicy = Callable[[str, str], VhostAccess]


def allow_and_create(username: str, vhost: str) -> VhostAccess:
    """Default policy: any authenticated user, any vhost, created on first use."""
    return VhostAccess.CREATE


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Server side of the negotiation; the defaults are RabbitMQ 3.10's."""

    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    handshake_timeout: float = 10.0
    # RabbitMQ 3.8-3.13's max_message_size (4.0 lowered it to 16 MiB; the ceiling is 512 MiB)
    max_message_size: int = 128 * 1024 * 1024
    # bodies still being received, over all channels of a connection (not in RabbitMQ):
    # two largest messages at once
    max_incoming_body_bytes: int = 256 * 1024 * 1024
    product: str = "Pulsar Gateway"
    version: str = "0.1.0"
    capabilities: Mapping[str, bool] = field(default_factory=lambda: dict(DEFAULT_CAPABILITIES))
    # RabbitMQ refuses channel.flow active=false with 540; the spec allows it.
    support_channel_flow: bool = True

    def __post_init__(self) -> None:
        if self.frame_max and self.frame_max < FRAME_MIN_SIZE:
            raise ValueError(f"frame_max must be 0 or at least {FRAME_MIN_SIZE}")
        if not 0 <= self.channel_max <= 65535:
            raise ValueError("channel_max must be within 0..65535")
        if not 0 <= self.heartbeat <= 65535:
            raise ValueError("heartbeat must be within 0..65535")
        if self.max_incoming_body_bytes < self.max_message_size:
            raise ValueError("max_incoming_body_bytes must be at least max_message_size")
