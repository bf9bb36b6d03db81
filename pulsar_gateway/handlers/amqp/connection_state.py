"""The AMQP 0-9-1 connection as a sans-I/O state machine.

Bytes go in through `receive_data`, events come out, bytes to write come
out of `data_to_send`. There are no sockets, tasks or timers here: time is a
monotonic clock value the driver passes in, and `tick` / `heartbeat_due` /
`peer_dead` turn it into heartbeats and timeouts. The core owns everything
RabbitMQ's reader owns (handshake, auth, tuning, vhost access, channel
bookkeeping, content assembly, close handshakes, connection.blocked) and hands
every other channel method to the broker layer as an event.

Error handling follows RabbitMQ's reader: before connection.open-ok most
errors close the socket silently (auth failures are reported only to clients
with the `authentication_failure_close` capability); afterwards hard errors
send connection.close and soft ones channel.close.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage, VhostAccess
from pulsar_gateway.handlers.amqp.channel_table import ChannelTable
from pulsar_gateway.handlers.amqp.connection_settings import (
    ConnectionSettings,
    VhostPolicy,
    allow_and_create,
)
from pulsar_gateway.handlers.amqp.content_assembly import (
    method_ids,
)
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import (
    ConnectionClosed,
    ConnectionHandedOff,
    ConnectionOpened,
    Event,
)
from pulsar_gateway.handlers.amqp.frames import (
    FRAME_MIN_SIZE,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    BodyFrame,
    DeliverHeads,
    Frame,
    FrameReader,
    HeaderCheck,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    check_protocol_header,
    encode_content,
    encode_delivers,
    encode_method,
    encode_properties,
    make_method,
)
from pulsar_gateway.handlers.amqp.handshake import (
    INERT_STATES,
    PHASES,
    RABBIT_STATE_NAMES,
    ConnectionState,
    check_tune_ok,
    open_refusal,
    server_start,
)
from pulsar_gateway.handlers.amqp.heartbeat_clock import HeartbeatClock
from pulsar_gateway.handlers.amqp.publish_run import next_publish

_Connection = commands.Connection
_Channel = commands.Channel
_Basic = commands.Basic


class AmqpConnection:
    """One client connection, from protocol header to close, without I/O.

    `now` values are a monotonic clock in seconds; the driver reads it once per
    wake-up and passes it to every call that takes it.
    """

    def __init__(
        self,
        authenticator: Authenticator,
        peer_host: str,
        now: float,
        settings: ConnectionSettings | None = None,
        vhost_policy: VhostPolicy = allow_and_create,
        defer_login: bool = False,
    ) -> None:
        """`defer_login`: connection.start-ok's password check (a key derivation) is not
        run here but left in `pending_login` for the driver to run off the event loop and
        hand back with `login_finished`; frames after start-ok wait for it."""
        self.settings = settings or ConnectionSettings()
        self.peer_host = peer_host
        self._auth = authenticator
        self._defer_login = defer_login
        self._login: Callable[[], str] | None = None  # the password check, deferred
        self._login_ids = (0, 0)  # start-ok's class and method ids, for its refusal
        self._vhost_policy = vhost_policy
        self._state = ConnectionState.AWAITING_HEADER
        self._reader = FrameReader(FRAME_MIN_SIZE)
        self._header = b""
        self._out = bytearray()
        # called before the output is taken: the broker adds what it gathered over the
        # loop turn (publisher confirms, one multiple=true ack per channel)
        self.before_output: Callable[[], None] | None = None
        self._deliver_heads: DeliverHeads = {}  # frames.encode_deliver's, this connection's
        self._channels = ChannelTable(self.settings, self._out)
        self._clock = HeartbeatClock(now, self.settings.handshake_timeout)
        self._now = now
        self._heartbeat_queued = False
        self._finished = False  # ConnectionClosed emitted
        self.frame_max = FRAME_MIN_SIZE
        self.channel_max = self.settings.channel_max
        self.heartbeat = 0
        self.username: str | None = None
        self.vhost: str | None = None
        self.client_properties: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self.auth_mechanism: str | None = None
        self._blocked = False
        self._blocked_reason = ""
        self._blocked_sent = False

    # --- public state -----------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def closed(self) -> bool:
        """True when the socket should be closed once `data_to_send` is written."""
        return self._state is ConnectionState.CLOSED

    @property
    def handed_off(self) -> bool:
        """connection.open named a vhost another member serves: nothing was answered to
        it, and the bytes after it were not read."""
        return self._state is ConnectionState.HANDED_OFF

    @property
    def open_channels(self) -> list[int]:
        """Channels the broker may use (open, not closing)."""
        return self._channels.open_numbers()

    @property
    def partial_frame_bytes(self) -> int:
        """How much of a frame has arrived while the rest has not (0: none): the driver
        bounds the wait for the rest (frame_pace.py), since with heartbeats off nothing
        else would."""
        return self._reader.buffered

    @property
    def incoming_body_bytes(self) -> int:
        """Bytes reserved by content headers whose bodies have not fully arrived."""
        return self._channels.bodies.used

    @property
    def pending_login(self) -> Callable[[], str] | None:
        """With `defer_login`: start-ok's password check, to run off the loop (it returns
        the user name or raises `AmqpError`) and hand to `login_finished`; else None."""
        return self._login

    @property
    def blocked(self) -> bool:
        """Backpressure is on: the driver should stop reading from the socket."""
        return self._blocked

    def channel_flow_active(self, channel: int) -> bool:
        """False after the client asked, with channel.flow, to pause deliveries."""
        return self._channels.flow_active(channel)

    # --- input ------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """Feed bytes from the socket; returns what the broker layer must act on."""
        events: list[Event] = []
        if self._state in INERT_STATES or not data:
            return events
        self._now = now
        self._clock.received(now)
        if self._state is ConnectionState.AWAITING_HEADER:
            data = self._receive_header(data, events)
            if self.state is not ConnectionState.STARTING:
                return events
        self._reader.feed(data)
        self._read_frames(events)
        return events

    def login_finished(self, outcome: str | AmqpError, now: float) -> list[Event]:
        """`pending_login`'s outcome, the user name or its refusal: connection.tune or the
        refusal is answered, then the frames that came meanwhile are read."""
        events: list[Event] = []
        self._login = None
        self._now = now
        if self._state is not ConnectionState.STARTING:
            return events  # closed meanwhile (the socket, the handshake's deadline)
        if isinstance(outcome, AmqpError):
            self._fail(0, outcome.blame(*self._login_ids), events)
        else:
            self.username = outcome
            self._send_tune()
        self._read_frames(events)
        return events

    def _read_frames(self, events: list[Event]) -> None:
        """Dispatch the frames read so far, unless a login check is pending."""
        reader = self._reader
        while self._state not in INERT_STATES and self._login is None:
            if self._state is ConnectionState.OPEN:
                # a whole publish at once when it is the common case (publish_run.py)
                run = next_publish(reader)
                if run is not None and self._channels.take_publish(run, events):
                    reader.skip(run.end)
                    continue
            try:
                frame = reader.next_frame()
            except AmqpError as error:
                self._fail(0, error, events)
                if self._reader.broken:
                    self._set_closed()  # frame sync is lost: nothing more can be read
                continue
            if frame is None:
                break
            try:
                self._dispatch(frame, events)
            except AmqpError as error:
                self._fail(frame.channel, error, events)

    def connection_lost(self) -> list[Event]:
        """The socket is gone (EOF or error): release every channel."""
        events: list[Event] = []
        self._finish(0, "connection lost", "lost", events)
        self._set_closed()
        return events

    # --- time -------------------------------------------------------------------------

    def heartbeat_due(self, now: float) -> bool:
        """True when nothing was sent for half the heartbeat interval."""
        return self._clock.heartbeat_due(now, PHASES[self._state])

    def peer_dead(self, now: float) -> bool:
        """True when the peer is to be given up on (see `HeartbeatClock`)."""
        return self._clock.expired(now, PHASES[self._state]) is not None

    def next_deadline(self) -> float | None:
        """The earliest clock value at which `tick` may have something to do."""
        return self._clock.next_deadline(PHASES[self._state])

    def tick(self, now: float) -> list[Event]:
        """Queue a heartbeat if one is due; give up on a dead peer."""
        events: list[Event] = []
        if self._state in INERT_STATES:
            return events
        self._now = now
        reason = self._clock.expired(now, PHASES[self._state])
        if reason is not None:
            self._finish(0, reason, "lost", events)
            self._set_closed()
        elif self.heartbeat_due(now) and not self._heartbeat_queued:
            self._out += HEARTBEAT_FRAME
            self._heartbeat_queued = True
        return events

    # --- output -----------------------------------------------------------------------

    def data_to_send(self, now: float) -> bytes:
        """Everything queued for the socket since the last call."""
        if self.before_output is not None:
            self.before_output()
        if not self._out:
            return b""
        data = bytes(self._out)
        self._out.clear()
        self._clock.sent(now)
        self._heartbeat_queued = False
        return data

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet taken by `data_to_send`."""
        return len(self._out)

    def send_method(self, channel: int, method: base.Frame) -> bool:
        """Queue a reply or server-initiated method on an open channel.

        Returns False (and sends nothing) when the channel is closing or gone,
        which is normal when a reply races a channel error.
        """
        if not self._usable(channel):
            return False
        self._out += encode_method(channel, method)
        return True

    def send_content(
        self,
        channel: int,
        method: base.Frame,
        body: bytes,
        properties_raw: bytes | None = None,
        properties: commands.Basic.Properties | None = None,
    ) -> bool:
        """Queue basic.deliver / get-ok / return with its content, split by frame_max.

        Pass the stored `properties_raw` when delivering a published message.
        """
        if not self._usable(channel):
            return False
        raw = properties_raw if properties_raw is not None else encode_properties(properties)
        self._out += encode_content(channel, method, body, raw, self.frame_max)
        return True

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        first_tag: int,
        messages: Sequence[AmqpMessage],
        redelivered: Sequence[bool],
    ) -> bool:
        """Queue basic.deliver with its content for each of a run of one consumer's
        messages, tags from `first_tag`: `send_content`'s octets, on the fast path
        (frames.encode_delivers) that every consumed message takes."""
        if not self._usable(channel):
            return False
        heads = self._deliver_heads
        self._out += encode_delivers(
            channel, consumer_tag, first_tag, messages, redelivered, self.frame_max, heads
        )
        return True

    def send_error(self, channel: int, error: AmqpError) -> list[Event]:
        """Report a failed channel method: channel.close for soft errors,
        connection.close for hard ones (RabbitMQ decides by reply code too)."""
        events: list[Event] = []
        self._fail(channel, error, events)
        return events

    def close(
        self, reply_code: int = ReplyCode.CONNECTION_FORCED, explanation: str = "broker shutdown"
    ) -> list[Event]:
        """Server-initiated connection.close (shutdown, user kicked)."""
        events: list[Event] = []
        if self._state is ConnectionState.OPEN:
            self._close_connection(AmqpError(reply_code, explanation), events)
        elif self._state is not ConnectionState.CLOSING:
            self._finish(int(reply_code), explanation, "server", events)
            self._set_closed()
        return events

    def set_blocked(self, blocked: bool, reason: str = "low on resources") -> None:
        """Backpressure on or off; tells clients with the connection.blocked capability.

        connection.blocked goes out at once (after open-ok when set earlier);
        RabbitMQ waits for the client's next publish, which only delays it.
        The driver should also stop reading the socket while `blocked`.
        """
        if blocked == self._blocked:
            return
        self._blocked = blocked
        self._blocked_reason = reason
        if self._state is ConnectionState.OPEN:
            self._send_blocked_state()

    # --- handshake --------------------------------------------------------------------

    def _receive_header(self, data: bytes, events: list[Event]) -> bytes:
        self._header += data
        check = check_protocol_header(self._header)
        if check is HeaderCheck.INCOMPLETE:
            return b""
        if check is HeaderCheck.REJECTED:
            # As RabbitMQ: answer with the header we speak, then hang up.
            self._out += PROTOCOL_HEADER
            self._finish(0, "bad protocol header", "server", events)
            self._set_closed()
            return b""
        rest = self._header[len(PROTOCOL_HEADER) :]
        self._header = b""
        start = server_start(self.settings, self._auth.mechanisms)
        self._out += encode_method(0, start)
        self._state = ConnectionState.STARTING
        return rest

    def _dispatch(self, frame: Frame, events: list[Event]) -> None:
        if self._state is ConnectionState.CLOSING:
            self._dispatch_closing(frame)
            return
        if frame.channel == 0:
            if isinstance(frame, HeartbeatFrame):
                return
            if isinstance(frame, MethodFrame):
                self._method0(frame.method, events)
                return
            raise _unexpected_frame(frame)
        if self._state is not ConnectionState.OPEN or isinstance(frame, HeartbeatFrame):
            raise _unexpected_frame(frame)
        self._channels.frame(frame, events)

    def _dispatch_closing(self, frame: Frame) -> None:
        """After our connection.close only close and close-ok matter (RabbitMQ too)."""
        if frame.channel != 0 or not isinstance(frame, MethodFrame):
            return
        if isinstance(frame.method, _Connection.Close):
            self._out += encode_method(0, _Connection.CloseOk())
            self._set_closed()
        elif isinstance(frame.method, _Connection.CloseOk):
            self._set_closed()

    def _method0(self, method: base.Frame, events: list[Event]) -> None:
        state = self._state
        if isinstance(method, _Connection.Close):
            self._out += encode_method(0, _Connection.CloseOk())
            self._finish(method.reply_code or 0, method.reply_text or "", "client", events)
            self._set_closed()
        elif state is ConnectionState.STARTING and isinstance(method, _Connection.StartOk):
            self._start_ok(method)
        elif state is ConnectionState.TUNING and isinstance(method, _Connection.TuneOk):
            self._tune_ok(method)
        elif state is ConnectionState.OPENING and isinstance(method, _Connection.Open):
            self._open(method, events)
        elif state is ConnectionState.OPEN and isinstance(method, _Connection.UpdateSecret):
            # Passwords do not expire here; acknowledge so OAuth-style clients go on.
            self._out += encode_method(0, _Connection.UpdateSecretOk())
        else:
            raise AmqpError(
                ReplyCode.CHANNEL_ERROR,
                f"unexpected method in connection state {RABBIT_STATE_NAMES[state]}",
                *method_ids(method),
            )

    def _start_ok(self, method: commands.Connection.StartOk) -> None:
        properties = method.client_properties
        self.client_properties = properties if isinstance(properties, dict) else {}
        capabilities = self.client_properties.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.auth_mechanism = method.mechanism
        try:
            check = self._auth.begin(method.mechanism, method.response or b"", self.peer_host)
            if self._defer_login:
                self._login, self._login_ids = check, method_ids(method)
                return
            self.username = check()
        except AmqpError as error:
            raise error.blame(*method_ids(method)) from None
        self._send_tune()

    def _send_tune(self) -> None:
        tune = _Connection.Tune(
            channel_max=self.settings.channel_max,
            frame_max=self.settings.frame_max,
            heartbeat=self.settings.heartbeat,
        )
        self._out += encode_method(0, tune)
        self._state = ConnectionState.TUNING

    def _tune_ok(self, method: commands.Connection.TuneOk) -> None:
        check_tune_ok(self.settings, method)
        self.frame_max = method.frame_max
        self.channel_max = self._channels.channel_max = method.channel_max
        self.heartbeat = method.heartbeat  # the client's choice, as RabbitMQ takes it
        self._clock.interval = method.heartbeat
        self._reader.frame_max = method.frame_max
        self._state = ConnectionState.OPENING

    def _open(self, method: commands.Connection.Open, events: list[Event]) -> None:
        vhost = method.virtual_host
        username = self.username or ""
        access = self._vhost_policy(username, vhost)
        refusal = open_refusal(access, vhost, username)
        if refusal is not None:
            raise refusal.blame(*method_ids(method))
        self.vhost = vhost
        if access is VhostAccess.ELSEWHERE:
            self._state = ConnectionState.HANDED_OFF
            events.append(ConnectionHandedOff(vhost))
            return
        self._out += encode_method(0, _Connection.OpenOk())
        self._state = ConnectionState.OPEN
        events.append(
            ConnectionOpened(
                username=username,
                vhost=vhost,
                client_properties=self.client_properties,
                capabilities=self.capabilities,
                frame_max=self.frame_max,
                channel_max=self.channel_max,
                heartbeat=self.heartbeat,
                create_vhost=access is VhostAccess.CREATE,
            )
        )
        if self._blocked:
            self._send_blocked_state()

    # --- errors and closing -----------------------------------------------------------

    def _fail(self, channel: int, error: AmqpError, events: list[Event]) -> None:
        """Answer a protocol error the way RabbitMQ's reader does in this state."""
        state = self._state
        if state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            return
        if state is ConnectionState.OPEN:
            if channel and not error.hard:
                self._channels.close(channel, error, events)
                # else the channel is already closing or gone: nothing to say
            else:
                self._close_connection(error, events)
        elif state is ConnectionState.OPENING:
            self._close_connection(error, events)
        elif (
            state is ConnectionState.STARTING
            and error.reply_code == ReplyCode.ACCESS_REFUSED
            and self.capabilities.get("authentication_failure_close") is True
        ):
            # The real reason is for the log; the client gets RabbitMQ's safe text.
            safe = AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {self.auth_mechanism}. "
                "For details see the broker logfile.",
                error.class_id,
                error.method_id,
            )
            self._close_connection(safe, events)
        elif state is ConnectionState.TUNING and error.reply_code == ReplyCode.NOT_ALLOWED:
            self._close_connection(error, events)
        else:
            # Other handshake errors: RabbitMQ does not trust the client yet and
            # drops the socket without a word.
            self._finish(error.reply_code, error.reply_text, "server", events)
            self._set_closed()

    def _close_connection(self, error: AmqpError, events: list[Event]) -> None:
        close = make_method(
            _Connection.Close,
            reply_code=error.reply_code,
            reply_text=error.reply_text,
            class_id=error.class_id,
            method_id=error.method_id,
        )
        self._out += encode_method(0, close)
        self._state = ConnectionState.CLOSING
        self._clock.closing(self._now)
        self._finish(error.reply_code, error.reply_text, "server", events)

    def _finish(
        self,
        reply_code: int,
        reply_text: str,
        cause: Literal["client", "server", "lost"],
        events: list[Event],
    ) -> None:
        """Release every channel and emit the one ConnectionClosed."""
        if self._finished:
            return
        self._finished = True
        self._channels.release_all(reply_code, reply_text, cause == "client", events)
        events.append(ConnectionClosed(reply_code, reply_text, cause))

    def _set_closed(self) -> None:
        self._state = ConnectionState.CLOSED
        self._channels.clear()

    def _usable(self, channel: int) -> bool:
        if self._state is not ConnectionState.OPEN:
            return False
        return self._channels.usable(channel)

    def _send_blocked_state(self) -> None:
        if self.capabilities.get("connection.blocked") is not True:
            return
        if self._blocked and not self._blocked_sent:
            self._out += encode_method(0, _Connection.Blocked(reason=self._blocked_reason))
            self._blocked_sent = True
        elif not self._blocked and self._blocked_sent:
            self._out += encode_method(0, _Connection.Unblocked())
            self._blocked_sent = False


def _unexpected_frame(frame: Frame) -> AmqpError:
    kind = {MethodFrame: 1, HeaderFrame: 2, BodyFrame: 3, HeartbeatFrame: 8}[type(frame)]
    return AmqpError(ReplyCode.UNEXPECTED_FRAME, f"type {kind}, channel {frame.channel}")
