"""The AMQP 0-9-1 listener: an asyncio socket loop around the sans-I/O core.

Each connection is a `Session` (session.py): a socket loop around the sans-I/O core
`AmqpConnection` and its `ConnectionBroker`, with heartbeats, backpressure and hand-off.
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
from collections.abc import Callable

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.config import AmqpSection
from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.broker import AmqpBroker
from pulsar_gateway.handlers.amqp.broker_model import BrokerStore
from pulsar_gateway.handlers.amqp.connection_settings import (
    ConnectionSettings,
    VhostPolicy,
    allow_and_create,
)
from pulsar_gateway.handlers.amqp.handoff import (
    HandOffError,
    Origin,
    OriginVerifier,
)
from pulsar_gateway.handlers.amqp.management import ConnectionSummary
from pulsar_gateway.handlers.amqp.publish_alarm import PublishAlarm
from pulsar_gateway.handlers.amqp.session import (
    LOGIN_CHECKS,
    NOT_YET,
    READ_SIZE,
    REVOKED,
    Session,
)
from pulsar_gateway.handlers.amqp.vhost_owners import VhostOwners
from pulsar_gateway.handlers.authorization import AUDIT_LOGGERS, Access, Authorizer
from pulsar_gateway.handlers.listener_limits import ConnectionLimits, LogLimiter, bound_address
from pulsar_gateway.handlers.tls_accept import TlsListener
from pulsar_gateway.security.credentials import NoUsers, UserDirectory, shown

log = logging.getLogger("gateway.amqp")

# How often open connections' users are checked against the users store (and the table).
USER_CHECK_SECONDS = 1.0
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
        self.login_checks = asyncio.Semaphore(LOGIN_CHECKS)  # session.py runs the checks
        self.tls = tls  # the AMQPS listener's (amqp.tls_port), beside the plaintext one
        self._tls_server: TlsListener | None = None
        self.owners = owners
        self.member_secret = member_secret
        self.origins = OriginVerifier(member_secret) if member_secret else None
        self._member_server: asyncio.base_events.Server | None = None
        self._closing_moved: asyncio.Task[None] | None = None
        self._moved_pending = False
        self.connection_settings = offered_settings(settings)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._sessions: set[Session] = set()
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
            # the connection limits apply before the TLS handshake, which is bounded like
            # the AMQP one (handlers/tls_accept.py)
            self._tls_server = TlsListener(
                "amqp",
                self.tls,
                self.settings.handshake_timeout_seconds,
                lambda sock, peer: self.limits.admit_socket(sock, peer, sock.close),
                lambda reader, writer, ip: self._accept(reader, writer, admitted=ip),
                self.limits.release,
                limit=READ_SIZE,
            )
            await self._tls_server.open(
                self.settings.host, self.settings.tls_port, reuse_port=bool(reuse_port)
            )
            host, port = self.tls_address or ("", 0)
            log.info("amqps (TLS) listener on %s:%d", host, port)
        self.limits.warn_about_descriptors()
        self._user_check = asyncio.create_task(self._check_users(), name="amqp user check")

    async def _check_users(self) -> None:
        """Close the connections of users removed or given a new password since login."""
        while True:
            await asyncio.sleep(USER_CHECK_SECONDS)
            for session in list(self._sessions):
                if session.credentials in (NOT_YET, REVOKED) or session.conn.closed:
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

    async def close_connection(self, name: str, reason: str) -> bool:
        """Close the open connection `/api/connections` names `name` (320 CONNECTION_FORCED
        with `reason`, as RabbitMQ's management UI does); False when none is open."""
        for session in list(self._sessions):
            if session.conn.closed or session.conn.username is None:
                continue
            if session.summary().name == name:
                await session.force_close(reason, "on request of the management console")
                return True
        return False

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
        admitted: str | None = None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        ip = admitted or self.limits.admit(writer)  # AMQPS: admitted before its handshake
        if ip is None:
            return
        peer = writer.get_extra_info("peername") or ("?", 0)
        self._connections.add(task)
        metrics.CONNECTIONS.labels("amqp").inc()
        metrics.CONNECTIONS_TOTAL.labels("amqp").inc()
        session: Session | None = None
        try:
            session = Session(
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
