"""The Kafka listener: frames in, API handlers, responses out in request order.

Kafka clients pipeline requests and expect responses in the order they sent the
requests, so each request runs as its own task while a writer task answers them
strictly in order. A bad frame closes only its own connection, with a log line.

What one client can make the listener hold is bounded (docs: conf/gateway.toml):

- memory: a frame's bytes are taken from the connection's and the listener's queued-bytes
  budgets (`max_queued_request_bytes[_per_connection]`, Kafka's queued.max.request.bytes)
  before the frame is read, its decoded size is added once known, and all of it is given
  back when the response has been written. While a budget is full the listener does not read
  the socket: TCP backpressure, not memory growth. A request's array entries are capped
  (`max_request_entries`) and big ones are decoded off the event loop (requests.py).
- time: a connection without requests or responses for `connection_idle_seconds` is closed
  (Kafka's connections.max.idle.ms), as is one whose frame stops arriving mid-way or which
  stops reading its responses for `frame_timeout_seconds`.
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
import struct
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.cluster.view import txn_key
from pulsar_gateway.gateway.config import KafkaSection, is_loopback_host
from pulsar_gateway.gateway.topic_names import split_partition_topic
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.authorization import AUDIT_LOGGERS, Authorizer, peer_text
from pulsar_gateway.handlers.kafka.consumer_groups import ConsumerGroups
from pulsar_gateway.handlers.kafka.context import BrokerIdentity, KafkaContext
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.port import KafkaStorage
from pulsar_gateway.handlers.kafka.quotas import ClientQuotas, ConnectionMute
from pulsar_gateway.handlers.kafka.request_order import RequestOrder
from pulsar_gateway.handlers.kafka.requests import (
    ENTRY_BYTES,
    ConnectionClosing,
    DecodedRequest,
    admit,
    charge_produce,
    decode_off_loop,
    respond,
)
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.handlers.kafka.transaction_coordinator import TransactionCoordinator
from pulsar_gateway.handlers.listener_limits import (
    ByteBudget,
    ConnectionLimits,
    LogLimiter,
    bound_address,
)
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.compression import InflateBudget
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security.credentials import NoUsers, UserDirectory, shown
from pulsar_gateway.security.oauthbearer import TokenValidator
from pulsar_gateway.security.tls import certificate_common_name

log = logging.getLogger("gateway.kafka")

_SIZE = struct.Struct(">i")
MAX_PIPELINED = 64
WRITE_BUFFER_HIGH = 1 << 20
# An admitted frame must also arrive at this average rate (after frame_timeout_seconds of
# grace): a byte every 29 s would otherwise hold the frame's share of the budget for ever.
MIN_FRAME_BYTES_PER_SECOND = 256 * 1024
# Loggers whose warnings a client can cause once per request.
PER_REQUEST_LOGGERS = (
    "gateway.kafka",
    "gateway.kafka.produce",
    "gateway.kafka.auth",
    AUDIT_LOGGERS["kafka"],
)
SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


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
        self._server: asyncio.base_events.Server | None = None
        self._tls_server: asyncio.base_events.Server | None = None  # beside: kafka.tls_port
        self._tls_context: KafkaContext | None = None  # its context: its advertised port
        self._connections: set[asyncio.Task[None]] = set()
        self.context: KafkaContext | None = None
        self.queued = ByteBudget(settings.max_queued_request_bytes)
        self.limits = ConnectionLimits(
            "kafka", settings.max_connections, settings.max_connections_per_ip, log
        )
        self.log_limiter = LogLimiter()
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
        self.log_limiter.attach(*PER_REQUEST_LOGGERS)
        queued = self.queued
        metrics.QUEUED_REQUEST_BYTES.labels("kafka").set_function(lambda: queued.used)
        beside = self.tls is not None and self.settings.tls_port >= 0
        # a TLS handshake comes before _accept (and its connection limits): bounded like a
        # frame, so sockets that never finish one are not held for asyncio's 60 s
        handshake = {"ssl_handshake_timeout": self.settings.frame_timeout_seconds}
        self._server = await asyncio.start_server(
            self._accept,
            self.settings.host,
            self.settings.port,
            limit=1 << 20,
            backlog=1024,
            ssl=None if beside else self.tls,
            **(handshake if self.tls is not None and not beside else {}),
        )
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
        )
        if cluster is not None:
            # groups another member coordinates are refused, and dropped when they move
            self.groups.serves = self.context.serves_group
            cluster.on_change(self.groups.drop_unserved)
            self.consumer_groups.serves = self.context.serves_group
            cluster.on_change(self.consumer_groups.drop_unserved)
            cluster.on_change(self._forget_unserved_producers)
        if beside:
            self._tls_server = await asyncio.start_server(
                self._accept_tls,
                self.settings.host,
                self.settings.tls_port,
                limit=1 << 20,
                backlog=1024,
                ssl=self.tls,
                **handshake,
            )
            tls_host, tls_port = self.tls_address or ("", 0)
            # the same groups and producer sequences; only the advertised port differs
            tls_identity = dataclasses.replace(
                identity, port=self.settings.advertised_tls_port or tls_port
            )
            self._tls_context = dataclasses.replace(self.context, identity=tls_identity)
            log.info("kafka TLS listener on %s:%d", tls_host, tls_port)
        self._warn_about_security()
        self.groups.start()
        self.consumer_groups.start()
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
        if self.transactions is not None:
            await self.transactions.close()
        await cancel_and_wait(*self._connections)
        if self._server:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        self._decoder.shutdown(wait=False, cancel_futures=True)
        self.log_limiter.detach()

    async def _accept_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._accept(reader, writer, self._tls_context)

    async def _accept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        context: KafkaContext | None = None,
    ) -> None:
        task = asyncio.current_task()
        context = context or self.context
        assert task is not None and context is not None
        ip = self.limits.admit(writer)
        if ip is None:
            return
        peer = writer.get_extra_info("peername")
        self._connections.add(task)
        metrics.CONNECTIONS.labels("kafka").inc()
        metrics.CONNECTIONS_TOTAL.labels("kafka").inc()
        queued = ByteBudget(self.settings.max_queued_request_bytes_per_connection, self.queued)
        inflated = InflateBudget(self.settings.max_connection_inflated_bytes)
        context = dataclasses.replace(
            context, inflated=inflated, mute=ConnectionMute(), order=RequestOrder()
        )
        connection = _Connection(context, reader, writer, peer, queued, self._decoder)
        connection.sasl = SaslSession(
            self.settings.sasl_mechanisms,
            self.users,
            peer,
            lifetime_ms=self.settings.sasl_session_lifetime_ms,
            tokens=self.tokens,
        )
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
            self.limits.release(ip)

    def _certificate_user(self, sasl: SaslSession, writer: asyncio.StreamWriter) -> bool:
        """kafka.tls_certificate_users on a TLS connection: its certificate names its user."""
        if not self.settings.tls_certificate_users or writer.get_extra_info("sslcontext") is None:
            return True
        return sasl.authenticate_certificate(
            certificate_common_name(writer.get_extra_info("peercert"))
        )


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


class _Idle(Exception):
    """Nothing came in or went out for connection_idle_seconds: close quietly."""


class _Connection:
    def __init__(
        self,
        context: KafkaContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: Any,
        queued: ByteBudget,
        decoder: Executor,
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.queued = queued
        self.decoder = decoder
        self.responses: asyncio.Queue[tuple[asyncio.Task[bytes | None], int] | None] = (
            asyncio.Queue(MAX_PIPELINED)
        )
        self.loop = asyncio.get_running_loop()
        self.unanswered = 0  # requests read whose response is not written yet
        self.writer_gone = False
        # the watchdog's view: a frame begun and not complete (since when, until when)
        now = self.loop.time()
        self.last_activity = now  # a frame read or a response written
        self.last_progress = now  # bytes of the frame under way
        self.mid_frame = False
        self.frame_deadline = float("inf")
        self.timed_out: Exception | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.sasl = SaslSession((), NoUsers(), peer)
        # Fetches not yet answered: a long poll for a client that has gone is dropped, not
        # waited out (it would keep its partitions from closing for up to its max_wait)
        self._fetches: set[asyncio.Task[bytes | None]] = set()

    async def serve(self) -> None:
        writer_task = asyncio.create_task(self._write_responses())
        self._watch()
        try:
            await self._read_requests()
        except (asyncio.IncompleteReadError, ConnectionError):
            # the end of the stream, or the watchdog's doing: nobody will read an answer
            for fetch in self._fetches:
                fetch.cancel()
            if isinstance(self.timed_out, _Idle):
                log.debug("closing idle Kafka connection from %s", self.peer)
            elif self.timed_out is not None:
                log.warning("closing Kafka connection from %s: %s", self.peer, self.timed_out)
        except ConnectionClosing as reason:
            log.warning("closing Kafka connection from %s: %s", self.peer, reason)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            with contextlib.suppress(asyncio.QueueFull):
                self.responses.put_nowait(None)
            try:
                await asyncio.wait_for(writer_task, 30)
            except (TimeoutError, asyncio.CancelledError, Exception):
                writer_task.cancel()
            self.writer.close()
            self.queued.release_all()

    async def _read_requests(self) -> None:
        max_frame = self.settings.max_frame_bytes
        max_entries = self.settings.max_request_entries
        while True:
            await self._wait_out_throttle()
            size = _SIZE.unpack(await self._read_exactly(4))[0]
            if size < 8 or size > max_frame:
                metrics.BAD_INPUT.labels("kafka", "frame_size").inc()
                raise ConnectionClosing(f"frame of {size} bytes (limit {max_frame})")
            # backpressure: with the budget full, the socket is not read until answers go
            # out (and the watchdog does not count that wait against the client)
            self.mid_frame = False
            await self.queued.acquire(size)
            held = size
            try:
                frame = memoryview(await self._read_body(size))
                try:
                    header = protocol.parse_request_header(frame)
                except protocol.KafkaDecodeError as exc:
                    metrics.BAD_INPUT.labels("kafka", "header").inc()
                    raise ConnectionClosing(f"bad request header: {exc}") from None
                request = await decode_off_loop(header, frame, max_entries, self.decoder)
                decoded = request.entries * ENTRY_BYTES
                self.queued.charge(decoded)
                held += decoded
            except BaseException:
                self.queued.release(held)
                raise
            self.last_activity = self.loop.time()
            self.unanswered += 1
            if header.api_key in SASL_APIS:
                # settled before the next frame is read (which may depend on it), in a
                # thread: PLAIN's PBKDF2 takes ~2 ms, which the other connections would wait
                # out on the event loop during a storm of logins
                answer = await asyncio.to_thread(self._sasl, request)
                self._take_rights()
                task = asyncio.create_task(_ready(answer))
            else:
                if not self.sasl.current:
                    self._refuse_unauthenticated(header)
                # a Produce over its quota mutes the connection before the next read
                throttle = charge_produce(self.context, request)
                turn = admit(self.context, request)  # its place in the connection's line
                task = asyncio.create_task(respond(self.context, request, throttle, turn))
                if header.api_key == ApiKey.FETCH:
                    self._fetches.add(task)
                    task.add_done_callback(self._fetches.discard)
            await self.responses.put((task, held))
            if self.writer_gone or self.sasl.failed:
                return  # after a SASL failure: its answer goes out, then the connection closes

    async def _wait_out_throttle(self) -> None:
        """A client over its quota is not read from until its throttle time has passed
        (KIP-219's muted channel; docs/quotas.md). The idle timer does not count the wait."""
        mute = self.context.mute
        if mute is None:
            return
        while (left := mute.until - self.loop.time()) > 0:
            await asyncio.sleep(left)
            self.last_activity = self.loop.time()

    def _take_rights(self) -> None:
        """Once a user has authenticated, this connection's requests run with its rights:
        a copy of the listener's context with the user's `access`."""
        user = self.sasl.authenticated
        if not user or self.sasl.failed or self.context.access.user == user:
            return
        access = self.context.authorizer.bound("kafka", peer_text(self.peer), user)
        self.context = dataclasses.replace(self.context, access=access)

    def _sasl(self, request: DecodedRequest) -> bytes:
        """Answered here, in order with the frames read: the next frame may depend on it.
        Runs in a worker thread while the connection's reader waits for it, so nothing else
        touches the SASL state meanwhile."""
        header, body = request.header, request.body
        assert body is not None
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            answer = self.sasl.handshake(body)
        else:
            answer = self.sasl.authenticate(body)
        return protocol.encode_response(
            header.api_key, header.api_version, header.correlation_id, answer
        )

    def _refuse_unauthenticated(self, header: protocol.RequestHeader) -> None:
        """Kafka closes a connection that sends anything but ApiVersions before SASL."""
        if header.api_key == ApiKey.API_VERSIONS:
            return
        metrics.BAD_INPUT.labels("kafka", "unauthenticated").inc()
        self.unanswered -= 1
        name = protocol.API_NAMES.get(header.api_key, "unknown")
        user = self.sasl.authenticated
        if user and self.sasl.credentials_changed and not self.sasl.expired:
            metrics.AUTHENTICATIONS.labels("kafka", "none", "revoked").inc()
            raise ConnectionClosing(
                f"{name}: user '{shown(user)}' was removed or its password changed since it "
                "authenticated"
            )
        if user:  # KIP-368: not re-authenticated in time
            metrics.AUTHENTICATIONS.labels("kafka", "none", "expired").inc()
            raise ConnectionClosing(
                f"{name} after the SASL session of '{self.sasl.authenticated}' expired "
                "(kafka.sasl_session_lifetime_ms)"
            )
        metrics.AUTHENTICATIONS.labels("kafka", "none", "failure").inc()
        raise ConnectionClosing(f"{name} before SASL authentication (kafka.sasl_mechanisms is set)")

    async def _read_body(self, size: int) -> bytes:
        """The frame's body, which must also arrive at MIN_FRAME_BYTES_PER_SECOND overall."""
        now = self.loop.time()
        self.last_progress = now
        self.mid_frame = True
        grace = self.settings.frame_timeout_seconds + size / MIN_FRAME_BYTES_PER_SECOND
        self.frame_deadline = now + grace
        try:
            return await self._read_exactly(size)
        finally:
            self.mid_frame = False
            self.frame_deadline = float("inf")

    async def _read_exactly(self, n: int) -> bytes:
        """``n`` bytes. No timer per read (it cost 12% of a small Produce): the watchdog
        closes the socket under a read that waits too long, and the read then ends here."""
        chunks: list[bytes] = []
        left = n
        while left:
            chunk = await self.reader.read(left)
            if not chunk:
                raise asyncio.IncompleteReadError(b"".join(chunks), n)
            chunks.append(chunk)
            left -= len(chunk)
            self.last_progress = self.loop.time()
            self.mid_frame = True  # from the first byte of a size prefix on
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _watch(self) -> None:
        """Every quarter of the shorter timeout: close a connection whose frame stalled
        (frame_timeout_seconds without a byte, or the body too slow overall) or that has been
        idle (connection_idle_seconds with no request outstanding: a long-poll Fetch or a
        Produce waiting for storage is not idleness, and the clock restarts at its answer)."""
        settings = self.settings
        stall = settings.frame_timeout_seconds
        now = self.loop.time()
        reason: Exception | None = None
        if self.mid_frame and now - self.last_progress >= stall:
            reason = ConnectionClosing(
                f"frame stalled: no bytes for {stall:g} s (kafka.frame_timeout_seconds)"
            )
        elif self.mid_frame and now >= self.frame_deadline:
            reason = ConnectionClosing(
                f"frame arriving under {MIN_FRAME_BYTES_PER_SECOND} B/s after "
                f"{stall:g} s of grace (kafka.frame_timeout_seconds)"
            )
        elif (
            not self.mid_frame
            and not self.unanswered
            and now - self.last_activity >= settings.connection_idle_seconds
        ):
            reason = _Idle()
        if reason is None:
            period = max(0.05, min(stall, settings.connection_idle_seconds) / 4)
            self._watchdog = self.loop.call_later(period, self._watch)
            return
        if isinstance(reason, ConnectionClosing):
            metrics.BAD_INPUT.labels("kafka", "frame_timeout").inc()
        self.timed_out = reason
        self.writer.close()  # the pending read sees the end of the stream

    async def _write_responses(self) -> None:
        while True:
            item = await self.responses.get()
            if item is None:
                return
            task, held = item
            try:
                response = await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this writer is being stopped
                response = None  # a Fetch dropped because its client went away
            except ConnectionClosing as reason:
                log.warning("closing Kafka connection from %s: %s", self.peer, reason)
                return self._stop_writing()
            except Exception:
                log.exception("request from %s failed; closing its connection", self.peer)
                return self._stop_writing()
            if response is not None:
                self.writer.write(response)
                if self.writer.transport.get_write_buffer_size() > WRITE_BUFFER_HIGH:
                    if not await self._drained():
                        return self._stop_writing()
            # given back once written: a client that does not read its answers is throttled
            self.queued.release(held)
            self.unanswered -= 1
            self.last_activity = self.loop.time()

    async def _drained(self) -> bool:
        """Wait for the client to read; False if it read nothing for frame_timeout_seconds
        (it would hold its queued bytes, and this writer, for ever)."""
        stall = self.settings.frame_timeout_seconds
        try:
            async with asyncio.timeout(stall):
                await self.writer.drain()
            return True
        except TimeoutError:
            log.warning(
                "closing Kafka connection from %s: it read none of its responses for %g s",
                self.peer,
                stall,
            )
        except ConnectionError:
            pass
        return False

    def _stop_writing(self) -> None:
        """Close, and unblock a reader waiting for room in the response queue."""
        self.writer_gone = True
        self.writer.close()
        while not self.responses.empty():
            self.responses.get_nowait()


async def _ready(response: bytes) -> bytes:
    return response


def _transactions_served_by(storage: KafkaStorage) -> Callable[[str], bool]:
    """Whether this gateway coordinates a transactional id: all of them alone, in a cluster
    those the view gives it (docs/cluster.md)."""
    cluster = storage.cluster
    if cluster is None:
        return lambda _transactional_id: True
    return lambda transactional_id: cluster.serves(txn_key(transactional_id))
