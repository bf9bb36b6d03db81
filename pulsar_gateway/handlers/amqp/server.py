"""The AMQP 0-9-1 listener: an asyncio socket loop around the sans-I/O core.

Per connection: a reader task feeds socket bytes to `AmqpConnection`, hands
the events to the `ConnectionBroker` in order and writes `data_to_send()`; a
timer task sends heartbeats and gives up on a silent peer at the core's
`next_deadline`. Deliveries produced elsewhere (queue engines) ask for one
flush per loop iteration. Backpressure: while the publishes awaiting the store hold
more than amqp.max_in_flight_bytes the core is `blocked` (connection.blocked goes out)
and the socket is not read.
A bad frame closes only its own connection, with the protocol's reply code.

Session lifetime (docs/security.md): each second the listener compares every open
connection's user with what that user logged in with; a user removed or whose password
changed (`pulsar-gateway users remove|passwd`) has its connections closed with 320
CONNECTION_FORCED, as RabbitMQ does when a user is deleted.

Abuse bounds, as on the Kafka listener: `max_connections` and `max_connections_per_ip`
(refused at accept), the handshake timeout (a socket that never completes connection.open),
and `frame_timeout_seconds` for a frame whose bytes stop coming, which heartbeats (when the
client turned them off) would never notice. Protocol violations count in
`gateway_bad_input_total{protocol="amqp"}` and the per-connection log lines pass a LogLimiter.

Authorization (handlers/amqp/authorization.py): at connection.open the session asks the
authorizer for the user's access to the vhost's namespace and hands it to its broker,
which checks each operation; a users-store user is bound by its rights, a user of the
config's `amqp.users` table is not (docs/security.md).

In a cluster (docs/cluster.md, "AMQP on one port") every member may share the public port
(`amqp.reuse_port`) and also listens on a member-to-member port (`amqp.cluster_host` and
`cluster_port`). A connection for a vhost another member owns is handed to that member at
connection.open (handoff.py); a member that stops serving a vhost closes its connections
with 320 CONNECTION_FORCED, which clients recover from by reconnecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.authorization import may_open
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.broker_model import BrokerStore, VhostAccess
from pulsar_gateway.handlers.amqp.connection_broker import WRITE_BUFFER_LIMIT, ConnectionBroker
from pulsar_gateway.handlers.amqp.connection_settings import (
    ConnectionSettings,
    VhostPolicy,
    allow_and_create,
)
from pulsar_gateway.handlers.amqp.connection_state import AmqpConnection, ConnectionState
from pulsar_gateway.handlers.amqp.errors import ReplyCode
from pulsar_gateway.handlers.amqp.events import ConnectionClosed, Event
from pulsar_gateway.handlers.amqp.handoff import (
    HandOffError,
    HandshakeRecorder,
    Origin,
    OriginVerifier,
    hand_off,
    sign_origin,
)
from pulsar_gateway.handlers.amqp.management import ConnectionSummary
from pulsar_gateway.handlers.amqp.publish_alarm import PublishAlarm
from pulsar_gateway.handlers.amqp.publishing import PublishLimits
from pulsar_gateway.handlers.amqp.vhost_owners import VhostOwners
from pulsar_gateway.handlers.authorization import AUDIT_LOGGERS, Access, Authorizer
from pulsar_gateway.handlers.listener_limits import ConnectionLimits, LogLimiter, bound_address
from pulsar_gateway.security.credentials import NoUsers, UserDirectory, shown
from pulsar_gateway.security.tls import certificate_common_name

log = logging.getLogger("gateway.amqp")

READ_SIZE = 256 * 1024
# Output beyond which the socket is not read. Deliveries stop by themselves at
# WRITE_BUFFER_LIMIT; what still grows is what the client's own publishes cause
# (basic.return of unroutable mandatory messages, confirms): stop taking publishes from a
# client that does not read their answers, until it has read them back under the limit.
OUTPUT_HIGH_WATER = 2 * WRITE_BUFFER_LIMIT
# How often open connections' users are checked against the users store (and the table).
USER_CHECK_SECONDS = 1.0
# Longest connection.close-ok waits for the connection's publishes to be stored: long
# enough to ride out a broker restart's reconnect, short of a client's own close timeout.
CLOSE_STORE_WAIT_SECONDS = 30.0
# Loggers whose lines a client can cause once per connection or per request.
PER_REQUEST_LOGGERS = ("gateway.amqp", AUDIT_LOGGERS["amqp"])


def offered_settings(settings: AmqpSection) -> ConnectionSettings:
    """What the server offers in the negotiation, from the [amqp] section; the
    rest keeps RabbitMQ's defaults."""
    return ConnectionSettings(
        frame_max=settings.frame_max,
        channel_max=settings.channel_max,
        heartbeat=settings.heartbeat_seconds,
        handshake_timeout=settings.handshake_timeout_seconds,
        max_message_size=settings.max_message_bytes,
        max_incoming_body_bytes=settings.max_incoming_body_bytes,
    )


class AmqpServer:
    """The AMQP listener, configured by its `[amqp]` section like the Kafka one."""

    name = "amqp"

    def __init__(
        self,
        settings: AmqpSection,
        store: BrokerStore,
        vhost_policy: VhostPolicy = allow_and_create,
        users: UserDirectory | None = None,
        tls: ssl.SSLContext | None = None,
        authorizer: Authorizer | None = None,
        vhost_namespace: Callable[[str], str] = str,
        owners: VhostOwners | None = None,
        member_secret: bytes = b"",
    ) -> None:
        """`vhost_namespace` maps a vhost onto the Pulsar namespace its rights are kept on
        (the store's mapping, docs/pulsar-mapping.md). `owners`: in a cluster, who serves
        which vhost; None: this listener serves every vhost. `member_secret`: shared by the
        members (`cluster.member_secret`); with it a hand-off carries the client's address
        and certificate name, signed (handoff.py)."""
        self.settings = settings
        self.vhost_policy = vhost_policy
        self.users: UserDirectory = users or NoUsers()
        self.authorizer = authorizer or Authorizer()
        self.vhost_namespace = vhost_namespace
        self.broker = AmqpBroker(store, settings.reader_idle_seconds)
        # an empty user table still lets guest in, as it always has; the users store (the
        # directory) takes precedence over the table (docs/security.md)
        self.authenticator = Authenticator(settings.users or {"guest": "guest"}, directory=users)
        self.tls = tls  # the AMQPS listener's (amqp.tls_port), beside the plaintext one
        self._tls_server: asyncio.base_events.Server | None = None
        self.owners = owners
        self.member_secret = member_secret
        self.origins = OriginVerifier(member_secret) if member_secret else None
        self._member_server: asyncio.base_events.Server | None = None
        self._closing_moved: asyncio.Task[None] | None = None
        self._moved_pending = False
        self.connection_settings = offered_settings(settings)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._sessions: set[_Session] = set()
        self.limits = ConnectionLimits(
            "amqp", settings.max_connections, settings.max_connections_per_ip, log
        )
        self.log_limiter = LogLimiter()
        self.publish_alarm = PublishAlarm(settings.max_total_in_flight_bytes)
        self._user_check: asyncio.Task[None] | None = None

    @property
    def address(self) -> tuple[str, int]:
        address = bound_address(self._server)
        assert address is not None
        return address

    @property
    def tls_address(self) -> tuple[str, int] | None:
        """The AMQPS listener's address, None without TLS."""
        return bound_address(self._tls_server)

    @property
    def member_address(self) -> tuple[str, int] | None:
        """The member-to-member listener's address, None outside a cluster."""
        return bound_address(self._member_server)

    async def start(self) -> None:
        self.log_limiter.attach(*PER_REQUEST_LOGGERS)
        # summed when scraped, not kept up to date on every publish
        sessions = self._sessions
        held = metrics.AMQP_PUBLISH_HELD_BYTES
        held.labels("incoming_bodies").set_function(
            lambda: sum(s.conn.incoming_body_bytes for s in sessions)
        )
        held.labels("transactions").set_function(lambda: sum(s.broker.tx_bytes for s in sessions))
        held.labels("in_flight").set_function(
            lambda: sum(s.broker.in_flight_bytes for s in sessions)
        )
        metrics.AMQP_BLOCKED_CONNECTIONS.set_function(
            lambda: sum(1 for s in sessions if s.conn.blocked)
        )
        reuse_port = self.settings.reuse_port or None
        self._server = await asyncio.start_server(
            self._accept,
            self.settings.host,
            self.settings.port,
            limit=READ_SIZE,
            backlog=1024,
            reuse_port=reuse_port,
        )
        if self.owners is not None:
            self._member_server = await asyncio.start_server(
                self._accept_member,
                self.settings.cluster_host,
                self.settings.cluster_port,
                limit=READ_SIZE,
                backlog=1024,
            )
            host, port = self.member_address or ("", 0)
            log.info("amqp member-to-member listener on %s:%d", host, port)
            self.owners.view.on_change(self._ownership_changed)
        if self.tls is not None:
            self._tls_server = await asyncio.start_server(
                self._accept,
                self.settings.host,
                self.settings.tls_port,
                limit=READ_SIZE,
                backlog=1024,
                reuse_port=reuse_port,
                ssl=self.tls,
                # the TLS handshake comes before _accept: bounded like the AMQP one
                ssl_handshake_timeout=self.settings.handshake_timeout_seconds,
            )
            host, port = self.tls_address or ("", 0)
            log.info("amqps (TLS) listener on %s:%d", host, port)
        self._user_check = asyncio.create_task(self._check_users(), name="amqp user check")

    async def _check_users(self) -> None:
        """Close the connections of users removed or given a new password since login."""
        while True:
            await asyncio.sleep(USER_CHECK_SECONDS)
            for session in list(self._sessions):
                if session.credentials in (_NOT_YET, _REVOKED) or session.conn.closed:
                    continue
                user = session.conn.username or ""
                now = self.authenticator.credentials_of(user)
                if now is not session.credentials and now != session.credentials:
                    await session.revoke(user)

    def connections(self) -> list[ConnectionSummary]:
        """The open connections that finished their handshake, for `/api/connections`."""
        return [
            s.summary()
            for s in list(self._sessions)
            if s.conn.username is not None and not s.conn.handed_off
        ]

    def _ownership_changed(self) -> None:
        """The membership changed or this member stopped serving: close, once, the
        connections of every vhost it no longer serves, then release those vhosts."""
        self._moved_pending = True  # a change during a pass gets a pass of its own
        if self._closing_moved is None or self._closing_moved.done():
            self._closing_moved = asyncio.ensure_future(self._close_moved())

    async def _close_moved(self) -> None:
        while self._moved_pending:
            self._moved_pending = False
            await self._close_moved_once()

    async def _close_moved_once(self) -> None:
        owners = self.owners
        assert owners is not None
        for session in list(self._sessions):
            vhost = session.conn.vhost
            if vhost is None or session.conn.handed_off or session.conn.closed:
                continue
            if not owners.serves(vhost):
                metrics.AMQP_HANDOFFS.labels("closed_moved").inc()
                await session.force_close(
                    f"vhost '{vhost}' moved to another gateway; reconnect",
                    f"on vhost '{shown(vhost)}': no longer served here",
                )
        for vhost in list(self.broker.vhosts):
            if not owners.serves(vhost):
                log.info("amqp vhost '%s': no longer served here, released", shown(vhost))
                await self.broker.release(vhost)

    async def stop(self) -> None:
        if self._user_check is not None:
            self._user_check.cancel()
        if self._server:
            self._server.close()
        if self._tls_server:
            self._tls_server.close()
        if self._member_server:
            self._member_server.close()
        if self._closing_moved is not None:
            self._closing_moved.cancel()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self.broker.close()
        if self._server:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        self.log_limiter.detach()

    def access_for(self, username: str, peer: str) -> Access:
        """A users-store user is bound by its rights; a user of `amqp.users` is not."""
        if self.users.lookup(username) is None:
            return self.authorizer.unrestricted("amqp", peer, username)
        return self.authorizer.bound("amqp", peer, username)

    async def _accept_member(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A connection another member handed over: served here, or closed, never passed on.
        With a shared secret it starts with the client's signed origin, which is checked
        before anything else is read."""
        origin = None
        if self.origins is not None:
            try:
                async with asyncio.timeout(self.settings.handshake_timeout_seconds):
                    origin = await self.origins.read(reader)
            except (HandOffError, TimeoutError, asyncio.IncompleteReadError, OSError) as exc:
                peer = writer.get_extra_info("peername") or ("?", 0)
                log.warning("amqp member connection from %s refused: %s", peer[0], exc)
                writer.close()
                return
        await self._accept(reader, writer, member_to_member=True, origin=origin)

    async def _accept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        member_to_member: bool = False,
        origin: Origin | None = None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        ip = self.limits.admit(writer)
        if ip is None:
            return
        peer = writer.get_extra_info("peername") or ("?", 0)
        self._connections.add(task)
        metrics.CONNECTIONS.labels("amqp").inc()
        metrics.CONNECTIONS_TOTAL.labels("amqp").inc()
        session: _Session | None = None
        try:
            session = _Session(
                self, reader, writer, str(peer[0]), int(peer[1]), member_to_member, origin
            )
            self._sessions.add(session)
            await session.run()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("amqp connection from %s failed", peer)
        finally:
            if session is not None:
                self._sessions.discard(session)
            self._connections.discard(task)
            self.limits.release(ip)
            metrics.CONNECTIONS.labels("amqp").dec()
            with contextlib.suppress(Exception):
                writer.close()


class _Session:
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
        )

    def __init__(
        self,
        server: AmqpServer,
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
        self.frame_timeout = server.settings.frame_timeout_seconds
        # handed over with a signed origin: the client's, as the accepting member saw them
        if origin is not None:
            peer_host = origin.peer_host
            self.common_name = origin.common_name
        else:
            self.common_name = certificate_common_name(writer.get_extra_info("peercert"))
        self.peer = peer_host
        self.authenticator = server.authenticator.for_certificate(self.common_name)
        # what the user logged in with, taken in the same step as the login
        self.credentials: object = _NOT_YET
        self.conn = AmqpConnection(
            self.authenticator,
            peer_host,
            time.monotonic(),
            server.connection_settings,
            self._vhost_policy,
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
                continue
            if self._buffer_size() >= OUTPUT_HIGH_WATER:
                # TCP backpressure on a client that does not read what its publishes
                # caused; heartbeats (if on) still end one that never reads again
                self._flush()
                await self._output_below(WRITE_BUFFER_LIMIT)
                if self.writer.is_closing():
                    return  # run() releases the connection
                continue
            # mid-frame, the rest must keep coming; between frames heartbeats (if any) rule
            stall = self.frame_timeout if self.conn.partial_frame else None
            try:
                async with asyncio.timeout(stall):
                    data = await self.reader.read(READ_SIZE)
            except TimeoutError:  # before OSError, of which it is one
                metrics.BAD_INPUT.labels("amqp", "frame_timeout").inc()
                log.warning(
                    "amqp %s: closing the connection: a frame stalled, no bytes for %g s "
                    "(amqp.frame_timeout_seconds)",
                    self.broker.peer,
                    stall,
                )
                data = b""
            except (ConnectionError, OSError):
                data = b""
            if not data:
                await self.broker.handle(self.conn.connection_lost())
                return
            if self.recorder is not None and self.conn.state in _HANDSHAKE_STATES:
                self.recorder.record(data)
            events = self.conn.receive_data(data, time.monotonic())
            if self.credentials is _NOT_YET and self.conn.username is not None:
                self.credentials = self.authenticator.credentials_of(self.conn.username)
            _count_bad_input(events, "")
            if _client_closed(events):
                await self._close_after_stores(events)
            else:
                self._flush()  # the core's own replies go first
                await self.broker.handle(events)
            self._flush()
            if self.conn.handed_off:
                return  # run() passes the connection on
            # No drain here: a client blocked writing to us must still be read, or both
            # sides wait for each other. Deliveries stop by themselves while the buffer is
            # full; only past OUTPUT_HIGH_WATER (above) does reading wait for the client.
            self._wake_timer.set()

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
        self.credentials = _REVOKED  # once
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
            deadline = self.conn.next_deadline()
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


_NOT_YET: object = object()  # a session's credentials before its login
_REVOKED: object = object()  # ... and after its connection.close for a changed user

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
