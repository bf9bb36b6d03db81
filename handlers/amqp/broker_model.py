"""The one seam between the AMQP broker layer and storage (Pulsar, or a fake).

The broker layer (channels, consumers, confirms) will call only these
methods; the Pulsar implementation lives in `gateway/` and maps them as the
design says: a queue is a Pulsar topic with one durable Shared subscription
that all its AMQP consumers share; a publish is written to every routed
queue's topic; ack -> acknowledge, requeue -> negative-acknowledge
(redelivered later, `redelivered` set); exchanges, queues and bindings are
metadata-store records. Dead-lettering and TTL are broker-layer logic built
from `publish` + `ack`, so storage needs no AMQP knowledge beyond these shapes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from handlers.amqp.topology import Binding, Exchange, Queue, Topology


@dataclass(frozen=True, slots=True)
class AmqpMessage:
    """A published message as stored: content header octets kept verbatim.

    `properties_raw` (flags + property values, as the client sent them) is
    what basic.deliver sends back, so properties survive byte for byte. The
    decoded fields a store may want for its own metadata are copied out.
    """

    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes = field(repr=False)
    persistent: bool = False  # delivery_mode == 2
    expiration_ms: int | None = None  # per-message TTL from the expiration property
    timestamp_ms: int = 0  # when the gateway accepted it


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    """A message read back from a queue, with the id used to ack or requeue it.

    `message_id` is opaque to the broker layer (Pulsar's serialized MessageId).
    """

    queue: str
    message_id: bytes
    message: AmqpMessage
    redelivery_count: int = 0

    @property
    def redelivered(self) -> bool:
        return self.redelivery_count > 0


@runtime_checkable
class QueueSubscription(Protocol):
    """One consumer on a queue's shared subscription (a Pulsar Shared consumer).

    The broker layer bounds unacked deliveries (basic.qos) by how often it
    calls `receive`; unacked messages are redelivered when this is closed.
    """

    async def receive(self) -> StoredDelivery:
        """The next message, waiting until there is one."""
        ...

    async def poll(self) -> StoredDelivery | None:
        """The next message if one is ready now (basic.get), else None."""
        ...

    async def ack(self, message_ids: Sequence[bytes]) -> None:
        """Acknowledge: the messages are done with and never redelivered."""
        ...

    async def requeue(self, message_ids: Sequence[bytes]) -> None:
        """Negative-acknowledge: deliver them again, to any consumer."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class BrokerStore(Protocol):
    """Durable state of every vhost: topology records and queue contents."""

    async def create_vhost(self, vhost: str) -> None:
        """Make the vhost usable (its Pulsar namespace); idempotent."""
        ...

    async def load_topology(self, vhost: str) -> Topology:
        """The vhost's exchanges, queues and bindings as last saved."""
        ...

    async def save_exchange(self, vhost: str, exchange: Exchange) -> None: ...

    async def remove_exchange(self, vhost: str, name: str) -> None: ...

    async def save_queue(self, vhost: str, queue: Queue) -> None:
        """Record the queue and create its topic and durable subscription."""
        ...

    async def remove_queue(self, vhost: str, name: str) -> None:
        """Forget the queue and drop its subscription (its messages go with it)."""
        ...

    async def save_binding(self, vhost: str, binding: Binding) -> None: ...

    async def remove_binding(self, vhost: str, binding: Binding) -> None: ...

    async def publish(self, vhost: str, queues: Collection[str], message: AmqpMessage) -> None:
        """Append one copy to each queue; returns once every copy is stored,
        which is when a publisher confirm may be sent."""
        ...

    async def purge(self, vhost: str, queue: str) -> int:
        """Drop every ready message (skip the subscription to the end); the count."""
        ...

    async def message_count(self, vhost: str, queue: str) -> int:
        """Messages not yet acknowledged (the subscription backlog)."""
        ...

    async def subscribe(self, vhost: str, queue: str) -> QueueSubscription:
        """A new consumer on the queue's shared subscription (one per AMQP consumer)."""
        ...
