"""What a queue engine (queue_engine.py) needs of its consumers and of its vhost.

The engine is created by the vhost (vhost_state.py) and fed to consumers of channels
(channel.py); it sees both only through these Protocols, so it imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pulsar_gateway.handlers.amqp.broker_model import StoredDelivery

if TYPE_CHECKING:  # the engine names itself in these calls
    from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine


class QueueConsumer(Protocol):
    """What the engine needs of an AMQP consumer (see channel.Consumer)."""

    tag: str
    no_ack: bool
    exclusive: bool
    prefetch: int
    unacked: int

    def has_credit(self) -> bool: ...

    def deliver(self, engine: QueueEngine, delivery: StoredDelivery, redelivered: bool) -> None: ...

    def deliver_ready(self, engine: QueueEngine, most: int) -> None:
        """Deliver up to `most` of the engine's ready messages (`QueueEngine.take_ready`),
        at least one."""
        ...

    def cancelled_by_server(self) -> None: ...


class QueueVhost(Protocol):
    """What the engine needs of its vhost (see vhost_state.VhostState): the name
    its store calls take, and where messages leaving the queue unconsumed go."""

    name: str

    def dead_letter(
        self, engine: QueueEngine, deliveries: list[StoredDelivery], reason: str
    ) -> None: ...
