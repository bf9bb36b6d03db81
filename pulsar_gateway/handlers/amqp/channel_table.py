"""The channels of one AMQP connection inside the sans-I/O core.

Which channel numbers are open or closing, channel.open/close/flow, the content of a
basic.publish being assembled on each channel, and which methods go on to the broker
layer (the one table, broker_methods.py). The connection core (connection_state.py)
hands it every frame on a channel other than 0 once the connection is open, and shares
its output buffer with it.
"""

from __future__ import annotations

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.broker_methods import BROKER_METHODS
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings
from pulsar_gateway.handlers.amqp.content_assembly import (
    BodyBudget,
    ContentAssembler,
    method_ids,
    unexpected,
)
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import (
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ContentReceived,
    Event,
    MethodReceived,
)
from pulsar_gateway.handlers.amqp.frames import Frame, MethodFrame, encode_method, make_method
from pulsar_gateway.handlers.amqp.publish_run import PublishRun

_Channel = commands.Channel
_Basic = commands.Basic

# Replies to methods only the server sends; RabbitMQ rejects them (503), but
# they are harmless, and some clients answer a server-sent basic.cancel.
_IGNORED_METHODS: frozenset[type[base.Frame]] = frozenset({_Basic.CancelOk, _Channel.FlowOk})


class ChannelState:
    """One channel's state in the core."""

    __slots__ = ("number", "closing", "flow_active", "content")

    def __init__(self, number: int, max_message_size: int, budget: BodyBudget) -> None:
        self.number = number
        self.closing = False  # channel.close sent by us, close-ok awaited
        self.flow_active = True
        self.content = ContentAssembler(max_message_size, budget)


class ChannelTable:
    """The connection's channels (see the module docstring)."""

    def __init__(self, settings: ConnectionSettings, out: bytearray) -> None:
        """`out` is the connection's output buffer, which replies are appended to."""
        self._channels: dict[int, ChannelState] = {}
        self._out = out
        self._max_message_size = settings.max_message_size
        self._support_flow = settings.support_channel_flow
        self.channel_max = settings.channel_max  # the negotiated one after tune-ok
        # bodies being received over all channels (amqp.max_incoming_body_bytes)
        self.bodies = BodyBudget(settings.max_incoming_body_bytes)

    def open_numbers(self) -> list[int]:
        """Channels the broker may use (open, not closing)."""
        return sorted(n for n, c in self._channels.items() if not c.closing)

    def usable(self, number: int) -> bool:
        chan = self._channels.get(number)
        return chan is not None and not chan.closing

    def flow_active(self, number: int) -> bool:
        chan = self._channels.get(number)
        return chan is not None and not chan.closing and chan.flow_active

    def release_all(
        self, reply_code: int, reply_text: str, by_client: bool, events: list[Event]
    ) -> None:
        """The connection ends: every channel not already closing is closed."""
        for number in sorted(self._channels):
            chan = self._channels[number]
            if not chan.closing:
                chan.closing = True
                events.append(ChannelClosed(number, reply_code, reply_text, by_client))

    def clear(self) -> None:
        self._channels.clear()

    def frame(self, frame: Frame, events: list[Event]) -> None:
        number = frame.channel
        chan = self._channels.get(number)
        if chan is None:
            if not isinstance(frame, MethodFrame):
                raise unexpected("expected method frame, got non method frame instead")
            if not isinstance(frame.method, _Channel.Open):
                raise AmqpError(
                    ReplyCode.CHANNEL_ERROR, "expected 'channel.open'", *method_ids(frame.method)
                )
            self._open(number, events)
        elif chan.closing:
            self._closing_frame(chan, frame)
        elif not chan.content.idle:
            message = chan.content.add(frame)
            if message is not None:
                events.append(message)
        elif isinstance(frame, MethodFrame):
            self._method(chan, frame.method, events)
        else:
            raise unexpected("expected method frame, got non method frame instead")

    def take_publish(self, run: PublishRun, events: list[Event]) -> bool:
        """A publish read whole (publish_run.py) as its message, when its channel would
        take the three frames one by one without a word: open, not closing, no content
        under way, and the body within the message size and the connection's budget (its
        reservation would end with the body frame). False leaves it to `frame`."""
        chan = self._channels.get(run.channel)
        if chan is None or chan.closing or not chan.content.idle:
            return False
        size = len(run.body)
        bodies = self.bodies
        if size > self._max_message_size or bodies.used + size > bodies.limit:
            return False
        events.append(
            ContentReceived(run.channel, run.method, run.properties, run.properties_raw, run.body)
        )
        return True

    def _open(self, number: int, events: list[Event]) -> None:
        if self.channel_max and len(self._channels) >= self.channel_max:
            raise AmqpError(
                ReplyCode.NOT_ALLOWED,
                f"number of channels opened ({len(self._channels)}) has reached "
                f"the negotiated channel_max ({self.channel_max})",
            )
        self._channels[number] = ChannelState(number, self._max_message_size, self.bodies)
        self._out += encode_method(number, make_method(_Channel.OpenOk, channel_id=""))
        events.append(ChannelOpened(number))

    def _closing_frame(self, chan: ChannelState, frame: Frame) -> None:
        """After our channel.close only close-ok frees the number (RabbitMQ too)."""
        if not isinstance(frame, MethodFrame):
            return
        if isinstance(frame.method, _Channel.CloseOk):
            del self._channels[chan.number]
        elif isinstance(frame.method, _Channel.Close):
            self._out += encode_method(chan.number, _Channel.CloseOk())

    def _method(self, chan: ChannelState, method: base.Frame, events: list[Event]) -> None:
        kind = type(method)
        if isinstance(method, _Basic.Publish):
            chan.content.start(method)
        elif kind in BROKER_METHODS:
            events.append(MethodReceived(chan.number, method))
        elif isinstance(method, _Channel.Close):
            del self._channels[chan.number]
            self._out += encode_method(chan.number, _Channel.CloseOk())
            events.append(
                ChannelClosed(chan.number, method.reply_code or 0, method.reply_text or "", True)
            )
        elif isinstance(method, _Channel.Flow):
            self._flow(chan, method, events)
        elif isinstance(method, _Channel.Open):
            raise AmqpError(
                ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen", *method_ids(method)
            )
        elif kind not in _IGNORED_METHODS:
            # Server-only methods, and connection methods off channel 0.
            raise AmqpError(ReplyCode.COMMAND_INVALID, "unimplemented method", *method_ids(method))

    def _flow(self, chan: ChannelState, method: commands.Channel.Flow, events: list[Event]) -> None:
        active = bool(method.active)
        if not active and not self._support_flow:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "active=false", *method_ids(method))
        self._out += encode_method(chan.number, _Channel.FlowOk(active=active))
        if active != chan.flow_active:
            chan.flow_active = active
            events.append(ChannelFlowChanged(chan.number, active))

    def close(self, number: int, error: AmqpError, events: list[Event]) -> None:
        """channel.close for a soft error on an open channel; nothing when the channel is
        already closing or gone."""
        chan = self._channels.get(number)
        if chan is None or chan.closing:
            return
        close = make_method(
            _Channel.Close,
            reply_code=error.reply_code,
            reply_text=error.reply_text,
            class_id=error.class_id,
            method_id=error.method_id,
        )
        self._out += encode_method(chan.number, close)
        chan.closing = True
        chan.content.reset()
        events.append(ChannelClosed(chan.number, error.reply_code, error.reply_text, False))
