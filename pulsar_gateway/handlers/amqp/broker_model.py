"""The one seam between the AMQP broker layer and storage (Pulsar, or a fake).

The broker layer (channels, consumers, confirms) calls only these methods;
the Pulsar implementation lives in `storage/amqp/store.py` and maps them as
the design says: a queue is a Pulsar topic with one durable Shared
subscription that all its AMQP consumers share; a publish is written to every
routed queue's topic; ack -> acknowledge; a requeue keeps the message unacked
in Pulsar and puts it back in its place in the broker layer (`redelivered`
set); exchanges, queues and bindings are metadata-store records.
Dead-lettering, TTL, max-length, purge and message counts are broker-layer
logic built from `publish`, `fetch` and `ack`, so storage needs no AMQP
knowledge beyond these shapes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from pulsar_gateway.handlers.amqp.topology import Binding, Exchange, Queue, Topology


class VhostAccess(Enum):
    """Answer of the vhost policy for (user, vhost) at connection.open.

    Part of the port's vocabulary: the store decides it for a vhost name (the reserved
    names, `PulsarAmqpStore.vhost_access`), the listener and the cluster add theirs, and
    the connection core acts on it."""

    ALLOWED = "allowed"
    CREATE = "create"  # allowed; the vhost does not exist yet and is to be created
    NOT_FOUND = "not-found"
    REFUSED = "refused"
    # the vhost would map onto the gateway's own state (gateway/reserved_names.py): no user
    # may open it; ACCESS_REFUSED rather than RabbitMQ's 530 for a missing permission
    RESERVED = "reserved"
    # in a cluster (docs/cluster.md, "AMQP on one port"): another member owns the vhost; the
    # listener hands the connection over to it instead of answering connection.open
    ELSEWHERE = "elsewhere"
    # ... or this member owns it but may not serve it now (its lease is stale, or it is
    # taking the vhost over): 320 CONNECTION_FORCED, and the client reconnects
    MOVING = "moving"


# AmqpMessage and StoredDelivery are never changed once made (dataclasses.replace makes a
# changed copy), but not frozen: a frozen dataclass's __init__ sets each field through
# object.__setattr__, 0.6 us an instance against 0.12, and every consumed message makes one
# of each (docs/backend.md, "What an AMQP delivery costs"). Their equality and hash stay
# what frozen gave them (unsafe_hash: the fields' hash).


@dataclass(slots=True, unsafe_hash=True)
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
    priority: int = 0  # the priority property (0 when unset), for x-max-priority queues


@dataclass(slots=True, unsafe_hash=True)
class StoredDelivery:
    """A message read back from a queue, with the id used to ack or requeue it.

    `message_id` is opaque to the broker layer (the store's handle on the
    Pulsar message); `redelivery_count` is what Pulsar counted.
    """

    queue: str
    message_id: Hashable
    message: AmqpMessage
    redelivery_count: int = 0
    # a quorum queue's unsuccessful deliveries so far, sent as x-delivery-count (None for
    # queues that do not count them: delivery_limits.py)
    delivery_count: int | None = None
    # its offset in a stream queue, sent as x-stream-offset (stream_engine.py)
    stream_offset: int | None = None

    @property
    def redelivered(self) -> bool:
        return self.redelivery_count > 0


@runtime_checkable
class QueueReader(Protocol):
    """The one Pulsar consumer of a queue in this process (a Shared consumer).

    The broker layer hands what it fetches to its AMQP consumers itself
    (round robin, basic.qos, requeue in place), so a queue needs only one
    consumer per gateway process, and basic.get sees the same messages as
    basic.consume. Messages fetched and not acked are redelivered by Pulsar
    when the reader closes or the process dies.
    """

    async def fetch(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        """Up to `limit` messages, waiting up to `timeout` seconds for the first."""
        ...

    def ack(self, message_ids: Iterable[Hashable]) -> None:
        """Done with: never delivered again."""
        ...

    async def nudge(self) -> None:
        """Make the broker dispatch again: messages are expected and none arrive."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class StreamCursor(Protocol):
    """A reader of a stream queue's log from a position on, in log order (stream_engine.py).

    A stream is never consumed away: each AMQP consumer of it reads with a cursor of its
    own, and `message_id` of what it reads is the position a later cursor may start at.
    """

    async def read(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        """Up to `limit` messages, waiting up to `timeout` seconds (None: for ever) for
        the first."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class BrokerStore(Protocol):
    """Durable state of every vhost: topology records and queue contents."""

    async def create_vhost(self, vhost: str) -> None:
        """Make the vhost usable (its Pulsar namespace); idempotent."""
        ...

    async def load_topology(self, vhost: str) -> Topology:
        """The vhost's durable exchanges, queues and bindings as last saved."""
        ...

    async def save_exchange(self, vhost: str, exchange: Exchange) -> None: ...

    async def remove_exchange(self, vhost: str, name: str) -> None: ...

    async def save_queue(self, vhost: str, queue: Queue) -> None:
        """Record the queue (if durable) and create its topic and an empty subscription."""
        ...

    async def remove_queue(self, vhost: str, name: str) -> None:
        """Forget the queue and drop its subscription (its messages go with it)."""
        ...

    async def save_binding(self, vhost: str, binding: Binding) -> None: ...

    async def remove_binding(self, vhost: str, binding: Binding) -> None: ...

    def publish(self, vhost: str, queues: Collection[str], message: AmqpMessage) -> Awaitable[None]:
        """Append one copy to each queue; done once every copy is stored, which is when a
        publisher confirm may be sent. A store may return a Future (no task per publish,
        the hot path's cost) or be a coroutine function."""
        ...

    async def open_queue(self, vhost: str, queue: str) -> QueueReader:
        """The queue's consumer on its shared subscription."""
        ...

    async def open_stream(self, vhost: str, queue: str, start: Hashable | None) -> StreamCursor:
        """A cursor on a stream queue's log, AT `start` (a `message_id` read before), or at
        the log's beginning when None."""
        ...

    def load_count(self, vhost: str, queue: str) -> int:
        """The queue's message count as last saved (messages not yet acknowledged)."""
        ...

    async def save_count(self, vhost: str, queue: str, count: int) -> None:
        """Keep the count durable (written now and then, not on every change)."""
        ...
