"""One AMQP connection on the listener: the socket loop around its sans-I/O core.

A reader task feeds socket bytes to `AmqpConnection`, hands the events to the
`ConnectionBroker` in order and writes `data_to_send()`; a timer task sends heartbeats and
gives up on a silent peer at the core's `next_deadline`. Deliveries produced elsewhere
(queue engines) ask for one flush per loop iteration. While the core is `blocked` the
socket is not read; past OUTPUT_HIGH_WATER of unread output neither. A connection for a
vhost another member serves is handed to it here (handoff.py). What a session needs of its
listener (server.py) is the `SessionListener` Protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.authorization import may_open
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.broker_model import VhostAccess
from pulsar_gateway.handlers.amqp.connection_broker import WRITE_BUFFER_LIMIT, ConnectionBroker
from pulsar_gateway.handlers.amqp.connection_settings import ConnectionSettings, VhostPolicy
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection, ConnectionState
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import ConnectionClosed, ContentReceived, Event
from pulsar_gateway.handlers.amqp.frame_pace import FramePace
from pulsar_gateway.handlers.amqp.handoff import (
    HandOffError,
    HandshakeRecorder,
    Origin,
    hand_off,
    sign_origin,
)
from pulsar_gateway.handlers.amqp.management import ChannelSummary, ConnectionSummary
from pulsar_gateway.handlers.amqp.publish_alarm import PublishAlarm
from pulsar_gateway.handlers.amqp.publishing import PublishLimits
from pulsar_gateway.handlers.amqp.vhost_owners import VhostOwners
from pulsar_gateway.handlers.authorization import Access
from pulsar_gateway.security.credentials import shown
from pulsar_gateway.security.tls import certificate_common_name

log = logging.getLogger("gateway.amqp")

READ_SIZE = 256 * 1024
# Output beyond which the socket is not read. Deliveries stop by themselves at
# WRITE_BUFFER_LIMIT; what still grows is what the client's own publishes cause
# (basic.return of unroutable mandatory messages, confirms): stop taking publishes from a
# client that does not read their answers, until it has read them back under the limit.
OUTPUT_HIGH_WATER = 2 * WRITE_BUFFER_LIMIT
# Longest connection.close-ok waits for the connection's publishes to be stored: long
# enough to ride out a broker restart's reconnect, short of a client's own close timeout.
CLOSE_STORE_WAIT_SECONDS = 30.0
# password checks of one listener in worker threads at once: the rest wait their turn off
# the loop, and the default executor keeps threads for everything else
LOGIN_CHECKS = 2


class SessionListener(Protocol):
    """What a session needs of its listener (server.AmqpServer)."""

    settings: AmqpSection
    authenticator: Authenticator
    connection_settings: ConnectionSettings
    broker: AmqpBroker
    publish_alarm: PublishAlarm
    vhost_policy: VhostPolicy
    vhost_namespace: Callable[[str], str]
    owners: VhostOwners | None
    member_secret: bytes
    login_checks: asyncio.Semaphore  # password checks running at once (LOGIN_CHECKS)

    def access_for(self, username: str, peer: str) -> Access: ...


class Session:
    """One client connection on the listener: its socket, its core and its broker."""

    def summary(self) -> ConnectionSummary:
        local = self.writer.get_extra_info("sockname") or ("", 0)
        return ConnectionSummary(
            peer_host=self.peer,
            peer_port=self.peer_port,
            host=str(local[0]),
            port=int(local[1]),
            user=self.conn.username,
            vhost=self.conn.vhost,
            channels=len(self.conn.open_channels),
            blocked=self.conn.blocked,
            tls=self.writer.get_extra_info("sslcontext") is not None,
            connected_at_ms=self.connected_at_ms,
            client_properties=self.conn.client_properties,
            channel_list=tuple(
                ChannelSummary(
                    number=channel.number,
                    prefetch=channel.prefetch,
                    global_prefetch=channel.global_prefetch,
                    unacked=len(channel.unacked),
                    consumers=len(channel.consumers),
                    confirm=channel.confirm,
                    transactional=channel.tx is not None,
                    flow=channel.flow_active,
                )
                for _, channel in sorted(self.broker.channels.items())
            ),
        )

    def __init__(
        self,
        server: SessionListener,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer_host: str,
        peer_port: int,
        member_to_member: bool = False,
        origin: Origin | None = None,
    ) -> None:
        self.server = server
        self.member_to_member = member_to_member
        # the client's handshake, to replay to its vhost's owner (handoff.py)
        self.recorder = (
            HandshakeRecorder() if server.owners is not None and not member_to_member else None
        )
        self.reader = reader
        self.writer = writer
        settings = server.settings
        self.pace = FramePace(
            settings.frame_timeout_seconds,
            settings.frame_grace_seconds,
            settings.min_frame_bytes_per_second,
        )
        # handed over with a signed origin: the client's, as the accepting member saw them
        if origin is not None:
            peer_host = origin.peer_host
            self.common_name = origin.common_name
        else:
            self.common_name = certificate_common_name(writer.get_extra_info("peercert"))
        self.peer = peer_host
        # an origin from a member that found no certificate may carry None: no name
        self.authenticator = server.authenticator.for_certificate(self.common_name or "")
        # what the user logged in with, taken in the same step as the login
        self.credentials: object = NOT_YET
        self.conn = AmqpConnection(
            self.authenticator,
            peer_host,
            time.monotonic(),
            server.connection_settings,
            self._vhost_policy,
            defer_login=True,
        )
        self.broker = ConnectionBroker(
            server.broker,
            self.conn,
            self._request_flush,
            self._buffer_size,
            self._deliveries_held,
            PublishLimits(
                max_tx_bytes=server.settings.max_tx_bytes,
                max_in_flight_bytes=server.settings.max_in_flight_bytes,
                alarm=server.publish_alarm,
            ),
        )
        self.broker.peer = f"{peer_host}:{peer_port}"
        self.peer_port = peer_port
        self.connected_at_ms = int(time.time() * 1000)
        self._flush_scheduled = False
        self._hold_output = False  # connection.close-ok waits for stores
        self._drain_task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._wake_timer = asyncio.Event()
        self._timer_deadline: float | None = None  # what the timer sleeps until (None: ever)

    def _vhost_policy(self, username: str, vhost: str) -> VhostAccess:
        """The store's answer, narrowed by the user's rights on the vhost's namespace; the
        broker is handed the access its operations are checked against."""
        decision = self.server.vhost_policy(username, vhost)
        if decision not in (VhostAccess.ALLOWED, VhostAccess.CREATE):
            return decision
        access = self.server.access_for(username, self.broker.peer)
        namespace = self.server.vhost_namespace(vhost)
        if not may_open(access, namespace, vhost):
            return VhostAccess.REFUSED
        if self.server.owners is not None:
            routed = self.server.owners.route(vhost, self.member_to_member)
            if routed is not None:
                return routed
        self.broker.access, self.broker.namespace = access, namespace
        return decision

    def _buffer_size(self) -> int:
        """Output not yet on the wire: the transport's buffer plus what awaits a flush."""
        transport: Any = self.writer.transport
        queued = int(transport.get_write_buffer_size()) if transport else 0
        return queued + self.conn.pending_bytes

    def _request_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._hold_output:
            return  # _close_after_stores flushes when it is done
        data = self.conn.data_to_send(time.monotonic())
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def _deliveries_held(self) -> None:
        """Deliveries wait for a full write buffer (`ConnectionBroker.has_write_room`):
        write out what is queued, then resume them once the peer has read it."""
        self._request_flush()
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self._resume_after_drain())

    async def _resume_after_drain(self) -> None:
        """Deliver again once the peer has read enough of what it was sent."""
        try:
            await self._output_below(WRITE_BUFFER_LIMIT)
        finally:
            self._drain_task = None
        self.broker.resume_deliveries()

    async def _output_below(self, limit: int) -> None:
        """Returns once the output not yet on the wire is under ``limit`` (or the socket is
        closing)."""
        while not self.writer.is_closing() and self._buffer_size() >= limit:
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.drain()
            if self._buffer_size() >= limit:
                await asyncio.sleep(0.01)

    async def run(self) -> None:
        timer = asyncio.ensure_future(self._timer())
        try:
            await self._read_loop()
        finally:
            # awaited, not only cancelled: on Python 3.11 the timer's wait_for can swallow a
            # cancel, and the timer then waits on forever and is destroyed pending
            await cancel_and_wait(timer, self._drain_task)
            if not self.conn.closed and not self.conn.handed_off:
                await self.broker.handle(self.conn.connection_lost())
            await self.broker.connection_closed()
            self._flush()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.drain(), 2)
        if self.conn.handed_off:
            await self._hand_off()

    async def _hand_off(self) -> None:
        """Pass the connection to its vhost's owner and splice until either side closes;
        when no owner takes it, close the socket (the client reconnects)."""
        owners, recorder, vhost = self.server.owners, self.recorder, self.conn.vhost
        assert owners is not None and recorder is not None and vhost is not None
        owner = None if recorder.overflowed else await owners.target(vhost)
        if owner is None:
            metrics.AMQP_HANDOFFS.labels("no_owner").inc()
            log.warning(
                "amqp %s: closing the connection: no member serves vhost '%s' now",
                self.broker.peer,
                shown(vhost),
            )
            return
        try:
            metrics.AMQP_HANDOFFS.labels("handed_off").inc()
            secret = self.server.member_secret
            await hand_off(
                recorder.data,
                (self.reader, self.writer),
                owner.amqp_host,
                owner.amqp_port,
                self.server.settings.handshake_timeout_seconds,
                sign_origin(secret, Origin(self.peer, self.common_name)) if secret else b"",
            )
        except (OSError, TimeoutError, HandOffError, asyncio.IncompleteReadError) as exc:
            metrics.AMQP_HANDOFFS.labels("failed").inc()
            log.warning(
                "amqp %s: handing the connection to %s failed: %s",
                self.broker.peer,
                owner.member_id,
                exc,
            )

    async def _read_loop(self) -> None:
        while not self.conn.closed:
            if self.conn.blocked:
                await self.broker.wait_unblocked()
                self.pace.restart(self._loop.time())
                continue
            if self._buffer_size() >= OUTPUT_HIGH_WATER:
                # TCP backpressure on a client that does not read what its publishes
                # caused; heartbeats (if on) still end one that never reads again
                self._flush()
                await self._output_below(WRITE_BUFFER_LIMIT)
                if self.writer.is_closing():
                    return  # run() releases the connection
                self.pace.restart(self._loop.time())
                continue
            data = await self._read()
            if not data:
                await self.broker.handle(self.conn.connection_lost())
                return
            if self.recorder is not None and self.conn.state in _HANDSHAKE_STATES:
                self.recorder.record(data)
            events = self.conn.receive_data(data, time.monotonic())
            if self.conn.pending_login is not None:
                events += await self._check_login(self.conn.pending_login)
            # after the login check, which reads the frames that came with it
            self.pace.read(self._loop.time(), len(data), self.conn.partial_frame_bytes)
            if self.credentials is NOT_YET and self.conn.username is not None:
                self.credentials = self.authenticator.credentials_of(self.conn.username)
            _count_bad_input(events, "")
            if _client_closed(events):
                await self._close_after_stores(events)
            else:
                if not _only_publishes(events):
                    # the core's own replies go first (the broker's methods may await);
                    # publishes are handled without waiting, and one write then carries
                    # the confirms due with what they add (docs/backend.md)
                    self._flush()
                await self.broker.handle(events)
            self._flush()
            if self.conn.handed_off:
                return  # run() passes the connection on
            # No drain here: a client blocked writing to us must still be read, or both
            # sides wait for each other. Deliveries stop by themselves while the buffer is
            # full; only past OUTPUT_HIGH_WATER (above) does reading wait for the client.
            self._wake_timer_if_sooner()

    def _wake_timer_if_sooner(self) -> None:
        """Wake the timer when what was read brought its next deadline forward (a new
        handshake phase, our connection.close's wait for close-ok) or closed the
        connection. Input mostly moves deadlines later (the peer is alive): then the timer
        wakes when its old deadline comes and sleeps again, instead of taking a task
        wake-up and a new wait per read."""
        deadline = self.conn.next_deadline()
        target = self._timer_deadline
        if self.conn.closed or (deadline is not None and (target is None or deadline < target)):
            self._wake_timer.set()

    async def _read(self) -> bytes:
        """The socket's next bytes; b"" at its end, or when a frame under way has stalled
        or trickles (frame_pace.py). Between frames, heartbeats (if any) rule."""
        try:
            async with asyncio.timeout_at(self.pace.deadline()):
                return await self.reader.read(READ_SIZE)
        except TimeoutError:  # before OSError, of which it is one
            pass
        except (ConnectionError, OSError):
            return b""
        try:
            # what came while the deadline was due (the loop held up elsewhere) is in the
            # reader's buffer, read at once: judged on what the client did send
            async with asyncio.timeout(0):
                return await self.reader.read(READ_SIZE)
        except TimeoutError:
            pass
        except (ConnectionError, OSError):
            return b""
        metrics.BAD_INPUT.labels("amqp", "frame_timeout").inc()
        log.warning(
            "amqp %s: closing the connection: %s",
            self.broker.peer,
            self.pace.why(self._loop.time()),
        )
        return b""

    async def _check_login(self, check: Callable[[], str]) -> list[Event]:
        """start-ok's password check (a key derivation, ~2-3 ms) in a worker thread, at most
        `LOGIN_CHECKS` of the listener's at a time: on the event loop, a flood of bad logins
        held every other client (Kafka's too) for a derivation each; the socket is not read
        meanwhile."""
        async with self.server.login_checks:
            try:
                outcome: str | AmqpError = await asyncio.to_thread(check)
            except AmqpError as error:
                outcome = error
        return self.conn.login_finished(outcome, time.monotonic())

    async def _close_after_stores(self, events: list[Event]) -> None:
        """The client closed: its connection.close-ok (already in the core's output) goes
        out once its publishes are stored, those read with the close included, so that
        close-ok means "stored" as on RabbitMQ (docs/architecture.md, "Data path: AMQP
        publish and deliver", step 9)."""
        self._hold_output = True
        try:
            await self.broker.handle(events)
            if not await self.broker.publishes_stored(CLOSE_STORE_WAIT_SECONDS):
                log.warning(
                    "amqp %s: closing with publishes not stored after %g s",
                    self.broker.peer,
                    CLOSE_STORE_WAIT_SECONDS,
                )
        finally:
            self._hold_output = False

    async def revoke(self, user: str) -> None:
        """connection.close 320 CONNECTION_FORCED: the user is gone or has a new password."""
        self.credentials = REVOKED  # once
        metrics.AUTHENTICATIONS.labels("amqp", "none", "revoked").inc()
        await self.force_close(
            f"user '{user}' was removed or its password changed",
            f"of user '{shown(user)}': removed or password changed",
        )

    async def force_close(self, explanation: str, logged: str) -> None:
        """connection.close 320 CONNECTION_FORCED with `explanation`; `logged` ends the log
        line ("closing the connection <logged>")."""
        log.warning("amqp %s: closing the connection %s", self.broker.peer, logged)
        events = self.conn.close(ReplyCode.CONNECTION_FORCED, explanation)
        self._flush()
        await self.broker.handle(events)
        self._flush()
        self._wake_timer.set()  # the close-ok deadline

    async def _timer(self) -> None:
        while not self.conn.closed:
            deadline = self._timer_deadline = self.conn.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._wake_timer.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_timer.wait(), timeout)
            handshaking = self.conn.state in _HANDSHAKE_STATES
            events = self.conn.tick(time.monotonic())
            _count_bad_input(events, "handshake_timeout" if handshaking else "")
            self._flush()
            if events:
                await self.broker.handle(events)
            if self.conn.closed:
                if self._hold_output:
                    return  # _close_after_stores writes close-ok; run() closes the socket
                self._flush()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.writer.drain(), 2)
                self.writer.close()
                return


NOT_YET: object = object()  # a session's credentials before its login
REVOKED: object = object()  # ... and after its connection.close for a changed user

_HANDSHAKE_STATES = frozenset(
    {
        ConnectionState.AWAITING_HEADER,
        ConnectionState.STARTING,
        ConnectionState.TUNING,
        ConnectionState.OPENING,
    }
)

# Connection errors that only a peer breaking the protocol causes (not a missing queue, a
# refused vhost or a lost socket): what gateway_bad_input_total counts, by reply code name.
_PROTOCOL_VIOLATIONS = frozenset(
    {
        ReplyCode.FRAME_ERROR,
        ReplyCode.SYNTAX_ERROR,
        ReplyCode.COMMAND_INVALID,
        ReplyCode.CHANNEL_ERROR,
        ReplyCode.UNEXPECTED_FRAME,
        ReplyCode.NOT_IMPLEMENTED,
        ReplyCode.ACCESS_REFUSED,  # a failed login: repeated, it is password guessing
    }
)


def _only_publishes(events: list[Event]) -> bool:
    return all(type(e) is ContentReceived for e in events)


def _client_closed(events: list[Event]) -> bool:
    return any(isinstance(e, ConnectionClosed) and e.cause == "client" for e in events)


def _count_bad_input(events: list[Event], lost_reason: str) -> None:
    """Count a connection the core closed because of what the peer sent (by reply code;
    reply code 0 is a wrong protocol header) or, with ``lost_reason``, one it gave up on."""
    for event in events:
        if not isinstance(event, ConnectionClosed):
            continue
        if event.cause == "server" and event.reply_code in _PROTOCOL_VIOLATIONS:
            reason = ReplyCode(event.reply_code).name.lower()
        elif event.cause == "server" and event.reply_code == 0:
            reason = "protocol_header"
        elif event.cause == "lost" and lost_reason:
            reason = lost_reason
        else:
            continue
        metrics.BAD_INPUT.labels("amqp", reason).inc()
