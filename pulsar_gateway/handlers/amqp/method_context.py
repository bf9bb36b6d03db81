"""What the collaborators of a connection broker need of it and of each other.

`ConnectionBroker` (connection_broker.py) owns the connection's output, its channels and
its vhost, and hands each channel method to one collaborator (broker_methods.py): topology
(topology_methods.py), deliveries (deliveries.py), publishing (publishing.py) and
transactions (transactions.py). Each sees the broker and the others only through the small
Protocols here, so a collaborator can be read, and tested, alone.
"""

from __future__ import annotations

from typing import Protocol

from pamqp import base

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.channel import Channel, TxBuffer
from pulsar_gateway.handlers.amqp.vhost_state import VhostState
from pulsar_gateway.handlers.authorization import Access


class MethodContext(Protocol):
    """The connection as its collaborators see it: who it is, where its methods act, and
    how answers go out."""

    id: str
    access: Access  # the user's rights (set at connection.open)
    namespace: str  # the vhost's Pulsar namespace, for authorization

    @property
    def state(self) -> VhostState:
        """The vhost the connection opened (AmqpError 541 before connection.open)."""
        ...

    @property
    def vhost(self) -> VhostState | None: ...

    def send(self, channel: int, method: base.Frame) -> None: ...

    def send_content(
        self, channel: int, method: base.Frame, body: bytes, properties_raw: bytes
    ) -> None: ...

    def reply(self, channel: Channel, method: base.Frame, nowait: bool = False) -> None:
        """Send `method` unless the client asked for no answer (nowait)."""
        ...

    def request_flush(self) -> None:
        """Ask the socket side to write what the core has queued."""
        ...


class Settlement(Protocol):
    """Acks, nacks and rejects of delivered messages (deliveries.py), which a committed
    transaction applies."""

    def settle(self, channel: Channel, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
        """`kind` is "ack" or "nack" (basic.reject is a nack of one tag)."""
        ...


class Returns(Protocol):
    """basic.return of an unroutable mandatory publish (publishing.py), which a committed
    transaction sends too."""

    def return_unroutable(self, channel: Channel, message: AmqpMessage) -> None: ...


class TransactionLedger(Protocol):
    """The bytes the connection's open transactions hold (transactions.py): publishes and
    settlements count against amqp.max_tx_bytes while a transaction holds them."""

    def hold(self, tx: TxBuffer, cost: int) -> None:
        """Count `cost` more bytes in `tx`, or refuse them with 406 (AmqpError)."""
        ...

    def drop(self, tx: TxBuffer | None) -> None:
        """`tx` is committed, rolled back or closed: its bytes are free."""
        ...
