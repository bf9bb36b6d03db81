"""The Kafka listener: accepts sockets within the connection limits, serves each as a
`KafkaConnection` (connection.py: frames in, API handlers, responses out in request order).

What one client can make the listener hold is bounded (docs: conf/gateway.toml):

- memory: the queued-bytes budgets (`max_queued_request_bytes[_per_connection|_per_ip]`,
  Kafka's queued.max.request.bytes), taken per frame and given back when its response is written
  or its connection ends (connection.py). While a budget is full the listener does not read
  the socket: TCP backpressure, not memory growth. A request's array entries are capped
  (`max_request_entries`) and big ones are decoded off the event loop (requests.py).
- time: idle connections, stalled frames, clients that stop reading (connection.py).
- connections: `max_connections` in all and `max_connections_per_ip` from one address.
- the log: per-request warnings pass through a `LogLimiter`, so a flood of bad requests
  does not flood the log too.

Security (docs/security.md): with `kafka.tls_cert_file` the listener speaks TLS only
(SSL/SASL_SSL), or, with `kafka.tls_port` too, a second listener there does, beside the
plaintext one, each advertising its own port in Metadata; with `kafka.sasl_mechanisms` a
connection (on either) is served nothing but ApiVersions and the SASL APIs (sasl.py) until
it has authenticated, as Kafka does, and any other request closes it. An authenticated
connection gets its own copy of the context whose `access` holds its user's rights
(handlers/authorization.py); without SASL every client keeps everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.cluster.view import txn_key
from pulsar_gateway.gateway.config import KafkaSection, is_loopback_host
from pulsar_gateway.gateway.topic_names import split_partition_topic
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.authorization import AUDIT_LOGGERS, Authorizer
from pulsar_gateway.handlers.kafka import body_reader
from pulsar_gateway.handlers.kafka.connection import KafkaConnection
from pulsar_gateway.handlers.kafka.consumer_groups import ConsumerGroups
from pulsar_gateway.handlers.kafka.context import BrokerIdentity, KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.port import KafkaStorage
from pulsar_gateway.handlers.kafka.quotas import ClientQuotas, ConnectionMute
from pulsar_gateway.handlers.kafka.request_order import RequestOrder
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.handlers.kafka.share_groups import ShareGroups, ShareSettings
from pulsar_gateway.handlers.kafka.transaction_coordinator import TransactionCoordinator
from pulsar_gateway.handlers.listener_limits import (
    ByteBudget,
    ConnectionLimits,
    LogLimiter,
    PerIpBudgets,
    PerIpCount,
    bound_address,
)
from pulsar_gateway.handlers.tls_accept import TlsListener
from pulsar_gateway.kafka_codec.compression import InflateBudget
from pulsar_gateway.kafka_codec.protocol import compile_codecs
from pulsar_gateway.security.credentials import NoUsers, UserDirectory
from pulsar_gateway.security.oauthbearer import TokenValidator
from pulsar_gateway.security.tls import certificate_common_name

log = logging.getLogger("gateway.kafka")

# Loggers whose warnings a client can cause once per request.
PER_REQUEST_LOGGERS = (
    "gateway.kafka",
    "gateway.kafka.produce",
    "gateway.kafka.auth",
    AUDIT_LOGGERS["kafka"],
)


class KafkaServer:
    name = "kafka"

    def __init__(
        self,
        settings: KafkaSection,
        storage: KafkaStorage,
        users: UserDirectory | None = None,
        tls: ssl.SSLContext | None = None,
        tokens: TokenValidator | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.users: UserDirectory = users or NoUsers()
        self.authorizer = authorizer or Authorizer()
        self.tls = tls
        self.tokens = tokens  # OAUTHBEARER's JWT validator
        self.groups = GroupCoordinator(
            storage.offsets,
            min_session_ms=settings.group_min_session_timeout_ms,
            max_session_ms=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        )
        self.consumer_groups = ConsumerGroups(
            session_timeout_ms=settings.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
        )
        self.share_groups = ShareGroups(
            storage.shares,
            ShareSettings(
                record_lock_ms=settings.share_record_lock_duration_ms,
                delivery_count_limit=settings.share_delivery_count_limit,
                max_in_flight=settings.share_partition_max_record_locks,
                auto_offset_reset=settings.share_auto_offset_reset,
                session_timeout_ms=settings.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
            ),
            feeds=storage.share_feeds,
        )
        self.transactions = (
            None
            if storage.transactions is None
            else TransactionCoordinator(
                storage.transactions,
                storage.topics,
                storage.offsets,
                storage.producer_ids,
                max_timeout_ms=settings.transaction_max_timeout_ms,
                answer_seconds=settings.coordinator_answer_seconds,
                serves=_transactions_served_by(storage),
            )
        )
        self._server: asyncio.base_events.Server | TlsListener | None = None
        self._tls_server: TlsListener | None = None  # beside: kafka.tls_port
        self._tls_context: KafkaContext | None = None  # its context: its advertised port
        self._connections: set[asyncio.Task[None]] = set()
        self.context: KafkaContext | None = None
        self.queued = ByteBudget(settings.max_queued_request_bytes)
        # between a connection's budget and the listener's: one address's share
        self.queued_per_ip = PerIpBudgets(settings.max_queued_request_bytes_per_ip, self.queued)
        self.limits = ConnectionLimits(
            "kafka", settings.max_connections, settings.max_connections_per_ip, log
        )
        self.log_limiter = LogLimiter()
        # with SASL: connections that have not logged in yet, per address
        self.strangers = PerIpCount(settings.max_unauthenticated_connections_per_ip)
        # one thread: big decodes queue behind each other instead of taking every core
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-decode")

    @property
    def address(self) -> tuple[str, int]:
        address = bound_address(self._server)
        assert address is not None
        return address

    @property
    def tls_address(self) -> tuple[str, int] | None:
        """The TLS listener's address when it runs beside the plaintext one."""
        return bound_address(self._tls_server)

    async def start(self) -> None:
        # before the first client: a first Fetch must not pay for compiling its codec
        compile_codecs()
        self.log_limiter.attach(*PER_REQUEST_LOGGERS)
        queued = self.queued
        metrics.QUEUED_REQUEST_BYTES.labels("kafka").set_function(lambda: queued.used)
        beside = self.tls is not None and self.settings.tls_port >= 0
        # TLS listeners accept plain sockets too: _accept applies the connection limits,
        # then upgrades (listener_limits.start_tls), so a flood of sockets that never send
        # a ClientHello is refused beyond the limits instead of held for its handshake
        if beside or self.tls is None:
            self._server = await body_reader.start_server(
                self._accept,
                self.settings.host,
                self.settings.port,
                limit=body_reader.READ_LIMIT,
                backlog=1024,
            )
        else:
            self._server = await self._tls_listener(self.settings.port, lambda: self.context)
        host, port = self.address
        advertised = advertised_host(self.settings.advertised_host, host)
        cluster = self.storage.cluster  # docs/cluster.md: this member's own node id
        identity = BrokerIdentity(
            cluster.me().node_id if cluster is not None else self.settings.node_id,
            advertised,
            self.settings.advertised_port or port,
            self.settings.cluster_id,
        )
        self.context = KafkaContext(
            self.settings,
            self.storage,
            identity,
            self.groups,
            authorizer=self.authorizer,
            transactions=self.transactions,
            quotas=None if self.storage.quotas is None else ClientQuotas(self.storage.quotas),
            consumer_groups=self.consumer_groups,
            share_groups=None if self.storage.shares is None else self.share_groups,
        )
        if self.storage.group_configs is not None:
            self.share_groups.group_configs = self.storage.group_configs.get
        if cluster is not None:
            # groups another member coordinates are refused, and dropped when they move
            self.groups.serves = self.context.serves_group
            cluster.on_change(self.groups.drop_unserved)
            self.consumer_groups.serves = self.context.serves_group
            cluster.on_change(self.consumer_groups.drop_unserved)
            self.share_groups.serves = self.context.serves_group
            self.share_groups.serves_partition = self.context.serves_partition
            cluster.on_change(self.share_groups.drop_unserved)
            cluster.on_change(self._forget_unserved_producers)
        if beside:
            self._tls_server = await self._tls_listener(
                self.settings.tls_port, lambda: self._tls_context
            )
            tls_host, tls_port = self.tls_address or ("", 0)
            # the same groups and producer sequences; only the advertised port differs
            tls_identity = dataclasses.replace(
                identity, port=self.settings.advertised_tls_port or tls_port
            )
            self._tls_context = dataclasses.replace(self.context, identity=tls_identity)
            log.info("kafka TLS listener on %s:%d", tls_host, tls_port)
        self._warn_about_security()
        self.limits.warn_about_descriptors()
        self.groups.start()
        self.consumer_groups.start()
        self.share_groups.start()
        if self.transactions is not None:
            self.transactions.start()

    def _forget_unserved_producers(self) -> None:
        context = self.context
        assert context is not None
        context.sequences.forget_unserved(
            lambda topic: context.serves_partition(*split_partition_topic(topic))
        )

    def _warn_about_security(self) -> None:
        """Say at start-up what a reader of the settings could miss."""
        mechanisms = self.settings.sasl_mechanisms
        if not self.settings.authenticates and not is_loopback_host(self.settings.host):
            # only reachable with kafka.allow_anonymous (config.py refuses it otherwise)
            log.warning(
                "kafka listener on %s serves clients that do not authenticate "
                "(kafka.allow_anonymous = true): anyone who reaches it may read, write and "
                "delete topics",
                self.settings.host,
            )
        if "PLAIN" in mechanisms and self.tls is None:
            log.warning(
                "kafka.sasl_mechanisms has PLAIN without TLS (kafka.tls_cert_file): "
                "passwords cross the network in clear text"
            )
        if mechanisms and isinstance(self.users, NoUsers):
            log.warning(
                "kafka.sasl_mechanisms is set but there is no users store: no one can log in"
            )

    async def stop(self) -> None:
        if self._server:
            self._server.close()
        if self._tls_server:
            self._tls_server.close()
        await self.groups.close()
        await self.consumer_groups.close()
        await self.share_groups.close()
        if self.transactions is not None:
            await self.transactions.close()
        await cancel_and_wait(*self._connections)
        if self._server:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        self._decoder.shutdown(wait=False, cancel_futures=True)
        self.log_limiter.detach()

    async def _tls_listener(
        self, port: int, context: Callable[[], KafkaContext | None]
    ) -> TlsListener:
        """A TLS listener (tls_accept.py): the limits apply to its sockets before their
        handshake, which is bounded like a frame (asyncio's default would hold it 60 s)."""
        assert self.tls is not None

        async def serve(
            reader: asyncio.StreamReader,
            writer: asyncio.StreamWriter,
            admitted: tuple[str, _Stranger | None],
        ) -> None:
            await self._serve(reader, writer, context(), *admitted)

        def release(admitted: tuple[str, _Stranger | None]) -> None:
            self._release(*admitted)

        listener = TlsListener(
            "kafka",
            self.tls,
            self.settings.frame_timeout_seconds,
            lambda sock, peer: self._admit(sock, peer, sock.close),
            serve,
            release,
            limit=body_reader.READ_LIMIT,
            make_reader=body_reader.BodyReader,
        )
        await listener.open(self.settings.host, port)
        return listener

    def _admit(
        self, sock: Any, peer: Any, close: Callable[[], object]
    ) -> tuple[str, _Stranger | None] | None:
        """The connection limits, with SASL on the count of those not logged in yet."""
        ip = self.limits.admit_socket(sock, peer, close)
        if ip is None:
            return None
        stranger = _Stranger(self.strangers, ip) if self.settings.sasl_mechanisms else None
        if stranger is not None and not stranger.counted:
            setting = "max_unauthenticated_connections_per_ip"
            self.limits.refuse(close, peer, setting, self.strangers.count(ip))
            self.limits.release(ip)
            return None
        return ip, stranger

    def _release(self, ip: str, stranger: _Stranger | None) -> None:
        self.limits.release(ip)
        if stranger is not None:
            stranger.logged_in()  # or gone: no longer counted either way

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A plaintext listener's connection."""
        sock = writer.get_extra_info("socket")
        admitted = self._admit(sock, writer.get_extra_info("peername"), writer.close)
        if admitted is not None:
            await self._serve(reader, writer, self.context, *admitted)

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        context: KafkaContext | None,
        ip: str,
        stranger: _Stranger | None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None and context is not None
        peer = writer.get_extra_info("peername")
        self._connections.add(task)
        metrics.CONNECTIONS.labels("kafka").inc()
        metrics.CONNECTIONS_TOTAL.labels("kafka").inc()
        queued = ByteBudget(
            self.settings.max_queued_request_bytes_per_connection, self.queued_per_ip.take(ip)
        )
        inflated = InflateBudget(self.settings.max_connection_inflated_bytes)
        context = dataclasses.replace(
            context, inflated=inflated, mute=ConnectionMute(), order=RequestOrder()
        )
        connection = KafkaConnection(context, reader, writer, peer, queued, self._decoder)
        connection.sasl = SaslSession(
            self.settings.sasl_mechanisms,
            self.users,
            peer,
            lifetime_ms=self.settings.sasl_session_lifetime_ms,
            tokens=self.tokens,
        )
        if stranger is not None:
            connection.on_login = stranger.logged_in
        try:
            if not self._certificate_user(connection.sasl, writer):
                writer.close()
                return
            await connection.serve()
        except asyncio.CancelledError:
            pass  # shutting down
        finally:
            metrics.CONNECTIONS.labels("kafka").dec()
            self._connections.discard(task)
            if not self._connections:  # (its reused Produce body buffers: none kept idle)
                context.bodies.clear()
            self.queued_per_ip.give_back(ip)
            self._release(ip, stranger)

    def _certificate_user(self, sasl: SaslSession, writer: asyncio.StreamWriter) -> bool:
        """kafka.tls_certificate_users on a TLS connection: its certificate names its user."""
        if not self.settings.tls_certificate_users or writer.get_extra_info("sslcontext") is None:
            return True
        return sasl.authenticate_certificate(
            certificate_common_name(writer.get_extra_info("peercert"))
        )


class _Stranger:
    """One connection counted in `KafkaServer.strangers` until it logs in or ends."""

    def __init__(self, strangers: PerIpCount, ip: str) -> None:
        self.strangers = strangers
        self.ip = ip
        self.counted = strangers.take(ip)

    def logged_in(self) -> None:
        if self.counted:
            self.counted = False
            self.strangers.give_back(self.ip)


def advertised_host(configured: str, bound: str) -> str:
    """The host clients are told to connect to: `kafka.advertised_host`, else the listener's
    address, except a wildcard one (0.0.0.0, ::), which no client can reach: then this
    machine's fully qualified name (its host name when it has none)."""
    if configured:
        return configured
    try:
        wildcard = ipaddress.ip_address(bound.split("%", 1)[0]).is_unspecified
    except ValueError:
        wildcard = not bound
    if not wildcard:
        return bound
    return socket.getfqdn() or socket.gethostname()


def _transactions_served_by(storage: KafkaStorage) -> Callable[[str], bool]:
    """Whether this gateway coordinates a transactional id: all of them alone, in a cluster
    those the view gives it (docs/cluster.md)."""
    cluster = storage.cluster
    if cluster is None:
        return lambda _transactional_id: True
    return lambda transactional_id: cluster.serves(txn_key(transactional_id))
