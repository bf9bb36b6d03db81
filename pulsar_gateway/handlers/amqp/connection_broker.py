"""The broker side of one AMQP connection: events in, answers out.

`ConnectionBroker` acts on the events of one `AmqpConnection` (the sans-I/O core) and
answers through it. It owns what the whole connection shares (its output, its channels,
its vhost, its closing) and hands each channel method to the collaborator the one method
table names (broker_methods.py): `TopologyMethods` (exchange and queue methods),
`Deliveries` (consumers, basic.get, settlement), `Publishing` (publishes and confirms) and
`Transactions` (tx). Topology changes and stored messages go through the connection's
`VhostState`, so none of this sees Pulsar and all of it runs on a fake store in tests.

Methods of one connection are handled in order, each awaited before the next
(declares, deletes, gets). Publishes are the exception: the store write runs
as a task so a publisher streams, and the confirm is sent when it is stored.

Two kinds of backpressure: publishes awaiting the store block the connection
(publishing.py), and while the socket's write buffer is full deliveries wait
(`has_write_room`); the socket side is told (`deliveries_held`) and calls
`resume_deliveries` once the peer has caught up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pamqp import base

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.amqp.authorization import authorize_method
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.broker_methods import BROKER_METHODS, Role
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.channel import Channel
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection
from pulsar_gateway.handlers.amqp.content_assembly import method_ids
from pulsar_gateway.handlers.amqp.deliveries import Deliveries
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionClosed,
    ConnectionOpened,
    ContentReceived,
    Event,
    MethodReceived,
)
from pulsar_gateway.handlers.amqp.publishing import Publishing, PublishLimits
from pulsar_gateway.handlers.amqp.topology_methods import TopologyMethods
from pulsar_gateway.handlers.amqp.transactions import TransactionBytes, Transactions
from pulsar_gateway.handlers.amqp.vhost_state import VhostState
from pulsar_gateway.handlers.authorization import Access, everyone_allowed

log = logging.getLogger("gateway.amqp")

# A consumer without basic.qos would otherwise take the whole queue at once;
# RabbitMQ has no such cap, but the socket's write buffer check bounds it too.
WRITE_BUFFER_LIMIT = 4 * 1024 * 1024

MethodHandler = Callable[[Channel, Any], Awaitable[None]]


class ConnectionBroker:
    """The broker side of one connection: acts on the events of its `AmqpConnection`."""

    def __init__(
        self,
        broker: AmqpBroker,
        connection: AmqpConnection,
        request_flush: Callable[[], None],
        write_buffer_size: Callable[[], int],
        deliveries_held: Callable[[], None],
        limits: PublishLimits | None = None,
    ) -> None:
        """`request_flush` asks the socket side to write what the core has queued;
        `write_buffer_size` is the output not yet taken by the peer;
        `deliveries_held` tells the socket side that deliveries wait for room, so
        it calls `resume_deliveries` once the peer has read enough; `limits` bound what
        the connection's publishes hold (defaults: `PublishLimits()`)."""
        self.broker = broker
        self.connection = connection
        self.id = broker.new_connection_id()
        self.peer = connection.peer_host
        self.request_flush = request_flush
        self.write_buffer_size = write_buffer_size
        self.deliveries_held = deliveries_held
        self._holding_deliveries = False
        self.vhost: VhostState | None = None
        self.channels: dict[int, Channel] = {}
        self.capabilities: dict[str, Any] = {}
        self.limits = limits or PublishLimits()
        self.closed = False
        # the user's rights and the vhost's namespace, set by the listener at connection.open
        self.access: Access = everyone_allowed("amqp")
        self.namespace = ""
        self.tx_ledger = TransactionBytes(self.limits.max_tx_bytes)
        self.topology = TopologyMethods(self)
        self.deliveries = Deliveries(self, self.tx_ledger)
        self.publishing = Publishing(self, self.limits, self.tx_ledger, connection.set_blocked)
        connection.before_output = self._before_output
        self._delivered = 0  # basic.deliver sent since the last _before_output
        self.transactions = Transactions(self, self.tx_ledger, self.deliveries, self.publishing)
        roles: dict[Role, object] = {
            Role.TOPOLOGY: self.topology,
            Role.DELIVERIES: self.deliveries,
            Role.PUBLISHING: self.publishing,
            Role.TRANSACTIONS: self.transactions,
        }
        self._handlers: dict[type[base.Frame], MethodHandler] = {
            kind: getattr(roles[role], name) for kind, (role, name) in BROKER_METHODS.items()
        }

    @property
    def tx_bytes(self) -> int:
        """Bytes held by every open transaction of the connection."""
        return self.tx_ledger.held

    @property
    def in_flight_bytes(self) -> int:
        """Bytes of publishes handed to the store and not stored yet."""
        return self.publishing.in_flight_bytes

    @property
    def state(self) -> VhostState:
        if self.vhost is None:
            raise AmqpError(ReplyCode.INTERNAL_ERROR, "vhost not open")
        return self.vhost

    # --- output -----------------------------------------------------------------------

    def send(self, channel: int, method: base.Frame) -> None:
        if self.connection.send_method(channel, method):
            self.request_flush()

    def send_content(
        self, channel: int, method: base.Frame, body: bytes, properties_raw: bytes
    ) -> None:
        if self.connection.send_content(channel, method, body, properties_raw):
            self.request_flush()

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: AmqpMessage,
        counted: bool = True,
    ) -> None:
        if counted:
            self._delivered += 1
        if self.connection.send_deliver(
            channel, consumer_tag, delivery_tag, (message,), (redelivered,)
        ):
            self.request_flush()

    def send_delivers(
        self,
        channel: int,
        consumer_tag: str,
        first_tag: int,
        messages: list[AmqpMessage],
        redelivered: list[bool],
    ) -> None:
        self._delivered += len(messages)
        if self.connection.send_deliver(channel, consumer_tag, first_tag, messages, redelivered):
            self.request_flush()

    def write_room(self) -> int:
        """Bytes deliveries may still add before `has_write_room` refuses them."""
        return WRITE_BUFFER_LIMIT - self.write_buffer_size()

    def reply(self, channel: Channel, method: base.Frame, nowait: bool = False) -> None:
        if not nowait:
            self.send(channel.number, method)

    def has_write_room(self) -> bool:
        """Whether deliveries may go out now: not while the write buffer is full.
        The first refusal tells the socket side, once, until `resume_deliveries`."""
        if self.write_buffer_size() < WRITE_BUFFER_LIMIT:
            return True
        if not self._holding_deliveries:
            self._holding_deliveries = True
            self.deliveries_held()
        return False

    def resume_deliveries(self) -> None:
        """The peer has caught up: deliver on every channel again."""
        self._holding_deliveries = False
        for channel in list(self.channels.values()):
            self.deliveries.kick(channel)

    def _before_output(self) -> None:
        """The socket side takes the core's output: add the confirms of the loop turn,
        and count its messages in and out (a prometheus increment takes a lock, ~1.5 us:
        once a write, not once a message)."""
        self.publishing.flush_due_confirms()
        if self.publishing.received:
            metrics.AMQP_MESSAGES_IN.inc(self.publishing.received)
            self.publishing.received = 0
        if self._delivered:
            metrics.AMQP_MESSAGES_OUT.inc(self._delivered)
            self._delivered = 0

    def confirms_ready(self, channel: Channel) -> None:
        """A held confirm was released (Channel.hold): send what is now in order."""
        self.publishing.flush_confirms(channel)

    async def wait_unblocked(self) -> None:
        """Returns once the publishes in flight hold few enough bytes to read from the peer
        again."""
        await self.publishing.wait_unblocked()

    async def publishes_stored(self, timeout: float) -> bool:
        """See `Publishing.publishes_stored`: the listener's close-ok waits for it."""
        return await self.publishing.publishes_stored(timeout)

    # --- events -----------------------------------------------------------------------

    async def handle(self, events: list[Event]) -> None:
        for event in events:
            if type(event) is ContentReceived:
                # most events of a publisher's read: handled in place, no coroutine each
                refused = self._publish(event)
                if refused is not None:
                    await self._fail(event.channel, refused)
            else:
                await self._handle(event)

    def _publish(self, event: ContentReceived) -> AmqpError | None:
        """A message to publish; the error its channel or connection must close with."""
        channel = self.channels.get(event.channel)
        if channel is None or channel.closed:
            return None
        try:
            self.publishing.publish(channel, event)
        except AmqpError as error:
            return error.blame(*method_ids(event.method))
        return None

    async def _handle(self, event: Event) -> None:
        if isinstance(event, MethodReceived):
            channel = self.channels.get(event.channel)
            if channel is None or channel.closed:
                return
            try:
                await self._method(channel, event.method)
            except AmqpError as error:
                await self._fail(event.channel, error.blame(*method_ids(event.method)))
            except Exception as exc:  # a backend failure: the client gets 541, we go on
                log.exception(
                    "amqp %s: %s on channel %d failed",
                    self.peer,
                    type(event.method).__name__,
                    event.channel,
                )
                await self._fail(event.channel, AmqpError(ReplyCode.INTERNAL_ERROR, str(exc)))
        elif isinstance(event, ContentReceived):
            refused = self._publish(event)
            if refused is not None:
                await self._fail(event.channel, refused)
        elif isinstance(event, ChannelOpened):
            self.channels[event.channel] = Channel(self, event.channel)
        elif isinstance(event, ChannelClosed):
            await self._channel_closed(event.channel)
        elif isinstance(event, ChannelFlowChanged):
            channel = self.channels.get(event.channel)
            if channel is not None:
                channel.flow_active = event.active
                self.deliveries.kick(channel)
        elif isinstance(event, ConnectionOpened):
            self.capabilities = event.capabilities
            self.vhost = await self.broker.open_vhost(event.vhost, event.create_vhost)
        elif isinstance(event, ConnectionClosed):
            if event.cause == "server":
                log.info("amqp %s: connection closed: %s", self.peer, event.reply_text)
            elif event.cause == "lost" and event.reply_text != "connection lost":
                log.info("amqp %s: %s", self.peer, event.reply_text)
            await self.connection_closed()

    async def _fail(self, channel: int, error: AmqpError) -> None:
        if error.hard:
            log.info("amqp %s: closing the connection: %s", self.peer, error.reply_text)
        else:
            log.debug("amqp %s: closing channel %d: %s", self.peer, channel, error.reply_text)
        events = self.connection.send_error(channel, error)
        self.request_flush()
        await self.handle(events)

    async def _method(self, channel: Channel, method: base.Frame) -> None:
        handler = self._handlers.get(type(method))
        if handler is None:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"{method.name} not supported")
        authorize_method(self.access, self.namespace, self.state.name, method)
        await handler(channel, method)

    # --- closing ----------------------------------------------------------------------

    async def _channel_closed(self, number: int) -> None:
        channel = self.channels.pop(number, None)
        if channel is None or channel.closed:
            return
        channel.closed = True
        self.tx_ledger.drop(channel.tx)
        channel.tx = None
        self.publishing.channel_closed(channel)
        await self.deliveries.channel_closed(channel)

    async def connection_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.publishing.close()
        for number in list(self.channels):
            await self._channel_closed(number)
        await self.topology.delete_exclusive_queues()
