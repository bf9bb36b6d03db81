"""Per-channel broker state: consumers, unacked deliveries, qos, confirms, tx.

Delivery tags are per channel and count up from 1; each maps to the queue
engine and stored message it came from, so ack/nack/reject and channel close
act on the right Pulsar message. Publisher confirms go out in publish order
(a run of finished publishes is acknowledged with one multiple=true ack).

A channel knows its connection only as a `ChannelConnection`, so this module
does not import the connection broker that creates channels.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.frames import make_method
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine


class ChannelConnection(Protocol):
    """What a channel needs of its connection (see connection_broker.ConnectionBroker)."""

    id: str
    capabilities: dict[str, Any]

    def send(self, channel: int, method: base.Frame) -> None: ...

    def send_content(
        self, channel: int, method: base.Frame, body: bytes, properties_raw: bytes
    ) -> None: ...

    def has_write_room(self) -> bool:
        """False while output waits for the peer; the connection resumes the
        channels' deliveries itself once there is room again."""
        ...


@dataclass(slots=True)
class Unacked:
    """A delivery the client has to settle: where it came from, so an ack or
    requeue reaches the right engine and stored message."""

    tag: int
    engine: QueueEngine
    delivery: StoredDelivery
    consumer: Consumer | None


class Consumer:
    """An AMQP consumer on one channel, fed by one queue engine."""

    def __init__(
        self,
        channel: Channel,
        tag: str,
        engine: QueueEngine,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.engine = engine
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.active = True

    def has_credit(self) -> bool:
        channel = self.channel
        if not self.active or not channel.can_deliver():
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return not (channel.global_prefetch and len(channel.unacked) >= channel.global_prefetch)

    def deliver(self, engine: QueueEngine, delivery: StoredDelivery, redelivered: bool) -> None:
        self.channel.deliver(self, engine, delivery, redelivered)

    def cancelled_by_server(self) -> None:
        """The queue went away: tell the client (consumer_cancel_notify) and forget us."""
        self.active = False
        self.channel.consumers.pop(self.tag, None)
        if self.channel.connection.capabilities.get("consumer_cancel_notify") is True:
            self.channel.connection.send(
                self.channel.number, make_method(commands.Basic.Cancel, consumer_tag=self.tag)
            )


@dataclass(slots=True)
class PendingConfirm:
    """A confirm-mode publish whose store write may still be running; confirms go
    out in publish order, so finished ones wait for those before them."""

    seq: int
    done: bool = False
    ok: bool = True


@dataclass(slots=True)
class TxBuffer:
    """What tx.commit applies: publishes (queues, message, mandatory) and settlements.

    `size` is what it holds in bytes (see `connection_broker.tx_cost`), kept as it grows
    so the amqp.max_tx_bytes check costs O(1) per publish.
    """

    publishes: list[tuple[frozenset[str], AmqpMessage, bool]] = field(default_factory=list)
    settlements: list[tuple[str, int, bool, bool]] = field(default_factory=list)
    size: int = 0


class Channel:
    """One open channel's broker state (see the module docstring)."""

    def __init__(self, connection: ChannelConnection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.next_tag = 1
        self.unacked: OrderedDict[int, Unacked] = OrderedDict()
        self.consumers: dict[str, Consumer] = {}
        self.prefetch = 0  # for consumers created from now on (global=false)
        self.global_prefetch = 0
        self.flow_active = True
        self.confirm = False
        self.publish_seq = 0
        self.confirms: deque[PendingConfirm] = deque()
        self.tx: TxBuffer | None = None
        self.closed = False
        self.consumer_seq = 0
        # this channel's publishes not stored yet, with the queues each goes to: a
        # basic.get on the channel waits for those to its queue (see `writes_to`)
        self.writing: dict[asyncio.Future[None], frozenset[str]] = {}

    def writes_to(self, queue: str) -> list[asyncio.Future[None]]:
        """The channel's publishes to `queue` still on their way to the store.

        RabbitMQ handles one channel's methods in order, so a basic.get after a
        basic.publish on the same channel finds the message, confirmed or not. The
        gateway stores it in Pulsar first and reads it back through the queue's
        subscription; a get that waits for these (then for the read-back, as the
        queue's count now includes them) sees what the channel published before it.
        Other channels are not waited for: RabbitMQ orders nothing across channels.
        """
        return [write for write, queues in self.writing.items() if queue in queues]

    def can_deliver(self) -> bool:
        if self.closed or not self.flow_active:
            return False
        return self.connection.has_write_room()

    def deliver(
        self, consumer: Consumer, engine: QueueEngine, delivery: StoredDelivery, redelivered: bool
    ) -> None:
        tag = self.next_tag
        self.next_tag += 1
        if not consumer.no_ack:
            self.unacked[tag] = Unacked(tag, engine, delivery, consumer)
            consumer.unacked += 1
        message = delivery.message
        method = make_method(
            commands.Basic.Deliver,
            consumer_tag=consumer.tag,
            delivery_tag=tag,
            redelivered=redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        self.connection.send_content(self.number, method, message.body, message.properties_raw)

    def take(self, tag: int, multiple: bool) -> list[Unacked]:
        """The unacked deliveries an ack/nack/reject names; [] when the tag is unknown."""
        if multiple:
            if tag == 0:
                taken = list(self.unacked.values())
            else:
                taken = [u for t, u in self.unacked.items() if t <= tag]
        else:
            item = self.unacked.get(tag)
            taken = [item] if item is not None else []
        for item in taken:
            del self.unacked[item.tag]
            if item.consumer is not None:
                item.consumer.unacked -= 1
        return taken

    def next_consumer_tag(self) -> str:
        self.consumer_seq += 1
        return f"amq.ctag-{self.connection.id}-{self.number}-{self.consumer_seq}"

    def confirmed_prefix(self) -> list[PendingConfirm]:
        """Finished confirms at the front of the queue, in order."""
        out = []
        while self.confirms and self.confirms[0].done:
            out.append(self.confirms.popleft())
        return out
