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
import dataclasses
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, StoredDelivery
from pulsar_gateway.handlers.amqp.delivery_limits import outgoing_properties
from pulsar_gateway.handlers.amqp.direct_reply import ReplyConsumer
from pulsar_gateway.handlers.amqp.frames import make_method
from pulsar_gateway.handlers.amqp.queue_engine import QueueEngine

# The longest a stored publish's confirm waits for its delivery to this channel's own
# consumer (see Channel.hold): the read-back from Pulsar takes milliseconds.
CONFIRM_HOLD_SECONDS = 0.5
# a delivery's octets besides its body (method, content header, frame ends), about: what
# Consumer.deliver_ready counts against the write buffer's room for each
DELIVER_FRAMING = 100
# deliveries that came before their own publish's store answered, kept for its confirm
# (see Channel.hold) while the channel has publishes in flight; at most this many
EARLY_DELIVERIES_KEPT = 1024


class ChannelConnection(Protocol):
    """What a channel needs of its connection (see connection_broker.ConnectionBroker)."""

    id: str
    capabilities: dict[str, Any]

    def send(self, channel: int, method: base.Frame) -> None: ...

    def send_content(
        self, channel: int, method: base.Frame, body: bytes, properties_raw: bytes
    ) -> None: ...

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: AmqpMessage,
        counted: bool = True,
    ) -> None:
        """basic.deliver of a stored message with its content (the hot path's encoder);
        `counted` in gateway_amqp_messages_total (out), as every delivery but a direct
        reply-to reply is."""
        ...

    def send_delivers(
        self,
        channel: int,
        consumer_tag: str,
        first_tag: int,
        messages: list[AmqpMessage],
        redelivered: list[bool],
    ) -> None:
        """`send_deliver` for a run of one consumer's messages, tags from `first_tag`."""
        ...

    def write_room(self) -> int:
        """Bytes deliveries may still add before `has_write_room` refuses them."""
        ...

    def has_write_room(self) -> bool:
        """False while output waits for the peer; the connection resumes the
        channels' deliveries itself once there is room again."""
        ...

    def confirms_ready(self, channel: Channel) -> None:
        """Confirms the channel held for a delivery may go out now (in order)."""
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

    def deliver_ready(self, engine: QueueEngine, most: int) -> None:
        """Deliver the engine's next ready messages: up to `most`, and as many as credit
        and the write buffer allow now (at least one: the engine found credit). A run is
        encoded in one go and asks for one flush (docs/backend.md, "What an AMQP delivery
        costs"); the checks `has_credit` makes per message are made here for the run."""
        channel = self.channel
        if not self.no_ack:
            if self.prefetch:
                most = min(most, self.prefetch - self.unacked)
            if channel.global_prefetch:
                most = min(most, channel.global_prefetch - len(channel.unacked))
        room = channel.connection.write_room()
        deliveries: list[StoredDelivery] = []
        flags: list[bool] = []
        while True:
            delivery, redelivered = engine.take_ready()
            deliveries.append(delivery)
            flags.append(redelivered)
            room -= len(delivery.message.body) + DELIVER_FRAMING
            if len(deliveries) >= most or room <= 0:
                break
        if self.no_ack:
            engine.settle(deliveries, was_outstanding=True)
        channel.deliver_run(self, engine, deliveries, flags)

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
    # stored, held until its copies reach this channel's consumers (see Channel.hold)
    hold: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class TxBuffer:
    """What tx.commit applies: publishes (queues, message, mandatory) and settlements.

    `size` is what it holds in bytes (see `connection_broker.tx_cost`), kept as it grows
    so the amqp.max_tx_bytes check costs O(1) per publish.
    """

    publishes: list[tuple[frozenset[str], AmqpMessage, bool]] = field(default_factory=list)
    settlements: list[tuple[str, int, bool, bool]] = field(default_factory=list)
    size: int = 0


def delivery_key(message: AmqpMessage) -> tuple[str, str, int, bytes]:
    """What tells a message read back from the store from the others a channel has
    published lately: the gateway stamps each publish with its acceptance time."""
    return (message.exchange, message.routing_key, message.timestamp_ms, message.body)


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
        # stored confirm-mode publishes whose copies this channel's consumers are about
        # to receive, by `delivery_key`: one entry per copy (see `hold`)
        self.awaiting_delivery: dict[tuple[str, str, int, bytes], list[PendingConfirm]] = {}
        # copies delivered here before their publish's store answered, by `delivery_key`
        self.delivered_early: dict[tuple[str, str, int, bytes], int] = {}
        # the channel's consumer on amq.rabbitmq.reply-to (direct_reply.py), if any
        self.reply_consumer: ReplyConsumer | None = None

    def hold(self, pending: PendingConfirm, message: AmqpMessage, copies: int) -> bool:
        """Keep a stored publish's confirm until `copies` deliveries of it went out here;
        False when they all went out already (confirm it now).

        RabbitMQ enqueues a message, hands it to a consumer with credit and only then
        confirms it, so a channel that consumes what it publishes sees basic.deliver
        before the basic.ack. The gateway's copy comes back from Pulsar, usually after
        the store answered; the confirm waits for it, matched by what identifies the
        message (exchange, routing key, acceptance time, body), or CONFIRM_HOLD_SECONDS at
        the most: a copy may go to another channel's consumer, and a confirm never hangs.
        A copy may also come first (the gateway's own Pulsar client hands a consumer the
        entry before the producer's receipt is read): those are counted in
        `delivered_early` while the channel has publishes in flight.
        """
        key = delivery_key(message)
        early = self.delivered_early.pop(key, 0)
        if early > copies:
            self.delivered_early[key] = early - copies
        copies -= min(early, copies)
        if copies <= 0:
            return False
        self.awaiting_delivery.setdefault(key, []).extend([pending] * copies)
        loop = asyncio.get_running_loop()
        pending.hold = loop.call_later(CONFIRM_HOLD_SECONDS, self._release, key, pending)
        return True

    def writes_settled(self) -> None:
        """A publish's store answered: with none in flight, no early copy can matter."""
        if not self.writing:
            self.delivered_early.clear()

    def _release(self, key: tuple[str, str, int, bytes], pending: PendingConfirm) -> None:
        """The hold's time is up: confirm without the delivery."""
        waiting = self.awaiting_delivery.get(key)
        if waiting is not None:
            waiting[:] = [p for p in waiting if p is not pending]
            if not waiting:
                del self.awaiting_delivery[key]
        self._confirm_held(pending)

    def _confirm_held(self, pending: PendingConfirm) -> None:
        if pending.hold is not None:
            pending.hold.cancel()
            pending.hold = None
        if not pending.done and not self.closed:
            pending.done = True
            self.connection.confirms_ready(self)

    def _delivered(self, message: AmqpMessage) -> None:
        """A delivery went out: the confirm held for its last copy may follow it; with
        none held for it and publishes in flight, it may be a copy come early."""
        key = delivery_key(message)
        waiting = self.awaiting_delivery.get(key)
        if not waiting:
            if self.writing and self.confirm:
                early = self.delivered_early
                if len(early) >= EARLY_DELIVERIES_KEPT and key not in early:
                    del early[next(iter(early))]
                early[key] = early.get(key, 0) + 1
            return
        pending = waiting.pop(0)
        if not waiting:
            del self.awaiting_delivery[key]
        if pending not in waiting:
            self._confirm_held(pending)

    def drop_holds(self) -> None:
        """The channel closed: its held confirms have nowhere to go."""
        for waiting in self.awaiting_delivery.values():
            for pending in waiting:
                if pending.hold is not None:
                    pending.hold.cancel()
                    pending.hold = None
        self.awaiting_delivery.clear()
        self.delivered_early.clear()

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
        if delivery.delivery_count is not None or delivery.stream_offset is not None:
            message = dataclasses.replace(message, properties_raw=outgoing_properties(delivery))
        self.connection.send_deliver(self.number, consumer.tag, tag, redelivered, message)
        if self.awaiting_delivery or (self.writing and self.confirm):
            self._delivered(message)

    def deliver_run(
        self,
        consumer: Consumer,
        engine: QueueEngine,
        deliveries: list[StoredDelivery],
        redelivered: list[bool],
    ) -> None:
        """`deliver` for a run of one consumer's deliveries (Consumer.deliver_ready), sent
        with one call; one at a time where a delivery has more to do than go out (a
        confirm held for it, an x-delivery-count: an engine counts all or none)."""
        if (
            self.awaiting_delivery
            or (self.writing and self.confirm)
            or deliveries[0].delivery_count is not None
            or deliveries[0].stream_offset is not None
        ):
            for delivery, again in zip(deliveries, redelivered, strict=True):
                self.deliver(consumer, engine, delivery, again)
            return
        first = tag = self.next_tag
        self.next_tag += len(deliveries)
        if not consumer.no_ack:
            unacked = self.unacked
            for delivery in deliveries:
                unacked[tag] = Unacked(tag, engine, delivery, consumer)
                tag += 1
            consumer.unacked += len(deliveries)
        messages = [delivery.message for delivery in deliveries]
        self.connection.send_delivers(self.number, consumer.tag, first, messages, redelivered)

    def deliver_reply(self, consumer_tag: str, message: AmqpMessage) -> None:
        """A direct reply-to reply: delivered as published, nothing to settle (the
        reply consumer is no-ack); it skips credit and flow, as on RabbitMQ."""
        if self.closed:
            return
        tag = self.next_tag
        self.next_tag += 1
        self.connection.send_deliver(self.number, consumer_tag, tag, False, message, False)

    def take(self, tag: int, multiple: bool) -> list[Unacked]:
        """The unacked deliveries an ack/nack/reject names; [] when the tag is unknown."""
        if multiple:
            if tag == 0:
                taken = list(self.unacked.values())
            else:
                taken = self._take_up_to(tag)
        else:
            item = self.unacked.get(tag)
            taken = [item] if item is not None else []
        for item in taken:
            del self.unacked[item.tag]
            if item.consumer is not None:
                item.consumer.unacked -= 1
        return taken

    def _take_up_to(self, tag: int) -> list[Unacked]:
        """The unacked deliveries with tags up to `tag`. Tags go into `unacked` in
        ascending order, so they are its first items: the walk stops at the first tag
        past `tag` (an ack of 100 among 500 unacked costs 100 steps, not 500)."""
        taken = []
        for item in self.unacked.values():
            if item.tag > tag:
                break
            taken.append(item)
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
