"""Publishes of one connection, publisher confirms, and the backpressure they cause.

The store write of a publish runs as a task so a publisher streams; its confirm goes out
when it is stored, in publish order (a run of finished publishes is acknowledged with one
multiple=true ack). While the publishes awaiting the store hold more than
amqp.max_in_flight_bytes, or the gateway-wide alarm is raised (publish_alarm.py), the
connection is blocked: connection.blocked goes to clients that asked for it, as under
RabbitMQ's memory alarm, and the socket side stops reading until `wait_unblocked`
returns. Publishes on a transactional channel are held by the transaction instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pamqp import commands

from pulsar_gateway.handlers.amqp.authorization import authorize_publish
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.channel import Channel, PendingConfirm
from pulsar_gateway.handlers.amqp.delayed_exchange import delay_of
from pulsar_gateway.handlers.amqp.direct_reply import REPLY_TO, is_reply_address, no_reply_consumer
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import ContentReceived
from pulsar_gateway.handlers.amqp.exchange_routing import route, sender_selected_keys
from pulsar_gateway.handlers.amqp.field_values import text_or_none
from pulsar_gateway.handlers.amqp.frames import make_method
from pulsar_gateway.handlers.amqp.method_context import MethodContext, TransactionLedger
from pulsar_gateway.handlers.amqp.property_octets import replace_shortstr
from pulsar_gateway.handlers.amqp.publish_alarm import PublishAlarm
from pulsar_gateway.handlers.amqp.transactions import tx_cost

log = logging.getLogger("gateway.amqp")

_B = commands.Basic
# What a publish awaiting the store costs beyond its bytes (its task, future, message and
# confirm objects, roughly): so empty bodies are bounded too, if by a larger count.
PUBLISH_OVERHEAD = 1024


@dataclass(frozen=True, slots=True)
class PublishLimits:
    """How much one connection's publishes may hold in memory (the [amqp] settings).

    `max_tx_bytes`: uncommitted publishes and settlements of the connection's open
    transactions together (amqp.max_tx_bytes).
    `max_in_flight_bytes`: publishes handed to the store and not yet stored (one copy
    per queue, plus PUBLISH_OVERHEAD each); at it the connection is blocked until they
    are down to half (amqp.max_in_flight_bytes).
    `alarm`: the same bytes counted across every connection of the listener
    (amqp.max_total_in_flight_bytes, publish_alarm.py); while it is raised, a connection
    that publishes is blocked too.
    """

    max_tx_bytes: int = 128 * 1024 * 1024
    max_in_flight_bytes: int = 16 * 1024 * 1024
    alarm: PublishAlarm | None = None


class Publishing:
    """basic.publish content and confirm.select of one connection (see the module
    docstring)."""

    def __init__(
        self,
        context: MethodContext,
        limits: PublishLimits,
        ledger: TransactionLedger,
        set_blocked: Callable[..., None],
    ) -> None:
        """`set_blocked(blocked, reason)` tells the connection core (and through it the
        client) that its publishes are held back."""
        self.context = context
        self.limits = limits
        self.ledger = ledger
        self.set_blocked = set_blocked
        self.in_flight_bytes = 0  # publishes handed to the store, not yet stored
        # the same publishes' writes, awaited before connection.close-ok (publishes_stored)
        self._writes: set[asyncio.Future[None]] = set()
        self._unblocked = asyncio.Event()
        self._unblocked.set()
        self.closed = False
        # channels with stored publishes whose confirms go out at the next write (an
        # ordered set): a group's stores all answer in one loop turn, and one multiple=true
        # ack per channel and turn costs the gateway and the client far less than one each
        self._confirms_due: dict[Channel, None] = {}
        self.received = 0  # basic.publish contents not yet counted in the metrics
        if limits.alarm is not None:
            limits.alarm.watch(self._maybe_unblock)

    async def wait_unblocked(self) -> None:
        """Returns once the publishes in flight hold few enough bytes to read from the peer
        again."""
        await self._unblocked.wait()

    # --- publishing -------------------------------------------------------------------

    def publish(self, channel: Channel, event: ContentReceived) -> None:
        method = event.method
        if method.immediate:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        context = self.context
        vh = context.state
        authorize_publish(
            context.access, context.namespace, vh.name, method.exchange, method.routing_key
        )
        self.received += 1  # counted per write (ConnectionBroker._before_output)
        properties = event.properties
        properties_raw = event.properties_raw
        if properties.reply_to == REPLY_TO:
            if channel.reply_consumer is None:
                raise no_reply_consumer()
            properties_raw = replace_shortstr(
                properties_raw, "reply_to", channel.reply_consumer.address
            )
        if is_reply_address(method.exchange, method.routing_key):
            self._reply(channel, event, properties_raw)
            return
        headers = properties.headers if isinstance(properties.headers, dict) else None
        delay = delay_of(vh.topology, method.exchange, headers)
        if delay is not None and channel.tx is None:
            self._hold(channel, event, properties_raw, delay)
            return
        queues = route(
            vh.topology,
            method.exchange,
            method.routing_key,
            headers,
            sender_selected_keys(headers),
        )
        message = AmqpMessage(
            method.exchange,
            method.routing_key,
            properties_raw,
            event.body,
            properties.delivery_mode == 2,
            _expiration(properties.expiration),
            int(time.time() * 1000),
            properties.priority or 0,
        )
        if channel.tx is not None:
            self.ledger.hold(channel.tx, tx_cost(message))
            channel.tx.publishes.append((queues, message, method.mandatory))
            return
        pending: PendingConfirm | None = None
        if channel.confirm:
            channel.publish_seq += 1
            pending = PendingConfirm(channel.publish_seq)
            channel.confirms.append(pending)
        refused = False
        if queues:
            queues, full = vh.overflow(queues, message)
            refused = bool(full)
            if pending is not None and refused:
                pending.ok = False  # basic.nack, as RabbitMQ for x-overflow reject-publish
        if not queues:
            if method.mandatory and not refused:
                self.return_unroutable(channel, message)
            if pending is not None:
                pending.done = True
                self.flush_confirms(channel)
            return
        cost = tx_cost(message) * len(queues) + PUBLISH_OVERHEAD
        self._count_in(cost)
        write = vh.write(
            queues, message, lambda t: self._published(channel, pending, cost, t, queues, message)
        )
        channel.writing[write] = queues
        self._writes.add(write)

    def _reply(self, channel: Channel, event: ContentReceived, properties_raw: bytes) -> None:
        """A direct reply-to reply: straight to the requester's channel, never stored.
        Confirmed at once; unroutable (returned when mandatory) when its consumer is gone.
        RabbitMQ 3.10 also returned a delivered reply published as mandatory; later
        versions do not, nor does the gateway (docs/compatibility.md)."""
        method = event.method
        message = AmqpMessage(method.exchange, method.routing_key, properties_raw, event.body)
        target = self.context.state.replies.find(method.routing_key)
        if target is not None:
            target.channel.deliver_reply(target.tag, message)
        elif method.mandatory:
            self.return_unroutable(channel, message)
        if channel.tx is None and channel.confirm:
            channel.publish_seq += 1
            channel.confirms.append(PendingConfirm(channel.publish_seq, done=True))
            self.flush_confirms(channel)

    def _hold(
        self, channel: Channel, event: ContentReceived, properties_raw: bytes, delay: int
    ) -> None:
        """A publish to a delayed-message exchange with a delay: held by the vhost until it
        is due (delayed_exchange.py); confirmed once held, never returned."""
        method, properties = event.method, event.properties
        message = AmqpMessage(
            method.exchange,
            method.routing_key,
            properties_raw,
            event.body,
            properties.delivery_mode == 2,
            None,
            int(time.time() * 1000),
            properties.priority or 0,
        )
        pending: PendingConfirm | None = None
        if channel.confirm:
            channel.publish_seq += 1
            pending = PendingConfirm(channel.publish_seq)
            channel.confirms.append(pending)
        cost = tx_cost(message) + PUBLISH_OVERHEAD
        self._count_in(cost)
        write = asyncio.ensure_future(self.context.state.delayed.hold(message, delay))
        write.add_done_callback(
            lambda t: self._published(channel, pending, cost, t, frozenset(), message)
        )
        self._writes.add(write)

    def _count_in(self, cost: int) -> None:
        """A publish of `cost` bytes goes to the store: block the peer past the bounds."""
        self.in_flight_bytes += cost
        alarm = self.limits.alarm
        if alarm is not None:
            alarm.add(cost)
        if self._unblocked.is_set():
            # RabbitMQ says "low on memory" (its node-wide alarm); here, which bound it is
            if self.in_flight_bytes >= self.limits.max_in_flight_bytes:
                self._block("publishes awaiting storage exceed amqp.max_in_flight_bytes")
            elif alarm is not None and alarm.raised:
                self._block(
                    "the gateway's publishes awaiting storage exceed amqp.max_total_in_flight_bytes"
                )

    def _block(self, reason: str) -> None:
        self._unblocked.clear()
        self.set_blocked(True, reason)
        self.context.request_flush()

    def _maybe_unblock(self) -> None:
        """Read the peer again once its own publishes are down to half their bound and the
        gateway-wide alarm is not raised (called after each store, and when the alarm clears)."""
        if self._unblocked.is_set() or self.closed:
            return
        if self.in_flight_bytes > self.limits.max_in_flight_bytes // 2:
            return
        if self.limits.alarm is not None and self.limits.alarm.raised:
            return
        self._unblocked.set()
        self.set_blocked(False)
        self.context.request_flush()

    def _published(
        self,
        channel: Channel,
        pending: PendingConfirm | None,
        cost: int,
        task: asyncio.Future[None],
        queues: frozenset[str],
        message: AmqpMessage,
    ) -> None:
        channel.writing.pop(task, None)
        self._writes.discard(task)
        self.in_flight_bytes -= cost
        if self.limits.alarm is not None:
            self.limits.alarm.remove(cost)
        self._maybe_unblock()
        error = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if error is not None:
            log.warning("amqp publish failed: %s", error)
        if pending is not None:
            pending.ok = pending.ok and error is None
            copies = _own_deliveries(channel, queues) if pending.ok else 0
            held = copies > 0 and channel.hold(pending, message, copies)
            channel.writes_settled()
            if held:
                return
            pending.done = True
            if not self._confirms_due:
                self.context.request_flush()
            self._confirms_due[channel] = None

    def return_unroutable(self, channel: Channel, message: AmqpMessage) -> None:
        method = make_method(
            _B.Return,
            reply_code=ReplyCode.NO_ROUTE,
            reply_text="NO_ROUTE",
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        self.context.send_content(channel.number, method, message.body, message.properties_raw)

    # --- confirms ---------------------------------------------------------------------

    async def confirm_select(self, channel: Channel, m: commands.Confirm.Select) -> None:
        if channel.tx is not None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
        channel.confirm = True
        self.context.reply(channel, commands.Confirm.SelectOk(), m.nowait)

    def flush_due_confirms(self) -> None:
        """The confirms of the publishes stored since the last write (called just before
        the connection's output is written)."""
        if self._confirms_due:
            due, self._confirms_due = self._confirms_due, {}
            for channel in due:
                self.flush_confirms(channel)

    def flush_confirms(self, channel: Channel) -> None:
        """Send the confirms that are now in order: runs of one outcome as one
        multiple=true ack or nack."""
        if channel.closed:
            return
        done = channel.confirmed_prefix()
        index = 0
        while index < len(done):
            item = done[index]
            end = index
            while end + 1 < len(done) and done[end + 1].ok == item.ok:
                end += 1
            kind = _B.Ack if item.ok else _B.Nack
            self.context.send(
                channel.number,
                make_method(kind, delivery_tag=done[end].seq, multiple=end > index),
            )
            index = end + 1

    # --- closing ----------------------------------------------------------------------

    @staticmethod
    def channel_closed(channel: Channel) -> None:
        """Held and pending confirms of a closed channel have nowhere to go."""
        channel.drop_holds()
        channel.confirms.clear()

    async def publishes_stored(self, timeout: float) -> bool:
        """Wait until every publish this connection handed to the store is stored (or
        failed), at most ``timeout`` seconds; True when none is left.

        The listener holds connection.close-ok until then: a client that published and
        closed takes close-ok as "the broker has my messages", so a basic.get on another
        connection right after must find them, as on RabbitMQ (docs/architecture.md,
        "Data path: AMQP publish and deliver", step 9).
        """
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=timeout)
        return not self._writes

    def close(self) -> None:
        self.closed = True
        if self.limits.alarm is not None:
            self.limits.alarm.unwatch(self._maybe_unblock)


def _own_deliveries(channel: Channel, queues: frozenset[str]) -> int:
    """How many copies of a stored publish this channel's consumers are about to get
    (one per queue it went to where a consumer here has credit): its confirm
    follows them. A queue that also has consumers on other channels does not count:
    its copy may go to one of those (RabbitMQ orders nothing across channels), and
    holding the confirm for it would only delay it by Channel.hold's time limit."""
    if not channel.consumers or channel.closed:
        return 0
    return len(
        {
            consumer.engine.name
            for consumer in channel.consumers.values()
            if consumer.engine.name in queues
            and consumer.active
            and consumer.has_credit()
            and all(getattr(c, "channel", None) is channel for c in consumer.engine.consumers)
        }
    )


def _expiration(value: Any) -> int | None:
    """The expiration property as a per-message TTL in ms (None when unset); a
    value that is not a non-negative integer is refused with 406, as RabbitMQ does."""
    text = text_or_none(value)
    if text is None or not text:
        return None
    try:
        number = int(text)
    except ValueError:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}'") from None
    if number < 0:
        raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}'")
    return number
