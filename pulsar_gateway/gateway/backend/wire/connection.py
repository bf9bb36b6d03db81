"""One connection to one broker, on the running asyncio loop (no threads).

It performs the handshake (CONNECT with the authentication method and data, answering
AUTH_CHALLENGE), numbers requests and matches their answers, answers the broker's PING,
sends its own PING when the broker has been silent and closes the connection when even
that gets no answer (a stopped broker keeps its TCP connections open: docs/backend.md, "A
broker that stalls"), and routes the commands of producers and consumers to them by id.

Every byte from the broker goes through `FrameReader`: a frame over the size limit, a bad
checksum or malformed bytes close the connection with a log line naming the broker. When
the connection ends for any reason, every pending request fails with `ConnectionClosed`
and every producer and consumer on it is told, so that they reconnect
(docs/pulsar-protocol.md, "Reconnection").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Protocol

from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.auth import NO_AUTHENTICATION, Authentication
from pulsar_gateway.gateway.backend.wire.errors import (
    ConnectionClosed,
    DecodeError,
    OperationTimeout,
    PulsarError,
    ServerError,
)
from pulsar_gateway.gateway.backend.wire.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_OVERHEAD,
    EntryClaim,
    Frame,
    FrameReader,
    simple_frame,
)
from pulsar_gateway.gateway.backend.wire.messages import MessageMetadata
from pulsar_gateway.gateway.backend.wire.urls import BrokerUrl
from pulsar_gateway.gateway.waiting import result_within

log = logging.getLogger("gateway.pulsar.wire")
_U32_PAIR = struct.Struct(">II")

# v19: CONNECT feature flags and broker entry metadata are understood; v20 would allow the
# broker to send TOPIC_MIGRATED, which this client does not handle.
PROTOCOL_VERSION = 19
CLIENT_VERSION = "pulsar-gateway-wire/1"


@dataclass(frozen=True)
class ConnectionSettings:
    """What every connection of a client shares."""

    authentication: Authentication = NO_AUTHENTICATION
    ssl_context: ssl.SSLContext | None = None
    connect_timeout: float = 10.0
    operation_timeout: float = 30.0
    # silence from the broker for this long: send a PING
    keepalive_interval: float = 10.0
    # no byte at all within this long after that PING: the broker is stalled, close
    keepalive_timeout: float = 10.0
    # ask the broker for the broker-entry metadata prefix on MESSAGE, when it has one
    broker_entry_metadata: bool = True
    verify_checksums: bool = True


class ProducerListener(Protocol):
    def on_receipt(self, receipt: c.SendReceipt) -> None: ...

    def on_send_error(self, error: c.SendError) -> None: ...

    def on_disconnect(self, connection: Connection, reason: str) -> None: ...


class ConsumerListener(Protocol):
    # what stands for an entry's payload, if anything (then not copied: `FrameReader.claim`)
    claim: EntryClaim | None

    def on_message(self, frame: Frame) -> None: ...

    def on_end_of_topic(self) -> None: ...

    def on_disconnect(self, connection: Connection, reason: str) -> None: ...


class Connection(asyncio.Protocol):
    """A connection to `physical` (where the bytes go) for `logical` (the broker a lookup
    named; different when a proxy forwards to it)."""

    def __init__(self, settings: ConnectionSettings, logical: BrokerUrl, physical: BrokerUrl):
        self.settings = settings
        self.logical = logical
        self.physical = physical
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self.protocol_version = 0
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader()
        self._reader.verify_checksums = settings.verify_checksums
        self._reader.claim = self._claim
        self._requests: dict[int, asyncio.Future[Any]] = {}
        self._next_request = 0
        self._producers: dict[int, ProducerListener] = {}
        self._consumers: dict[int, ConsumerListener] = {}
        self._connected: asyncio.Future[None] = self._loop.create_future()
        self._writable: asyncio.Future[None] | None = None
        self._out: list[bytes | memoryview] = []  # frames of this loop turn, not yet written
        self._last_received = self._loop.time()
        self._ping_sent: float | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self.closed = False
        self.close_reason = ""
        self._closed_waiter: asyncio.Future[None] = self._loop.create_future()
        self._tasks: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        via = "" if self.logical == self.physical else f" via {self.physical}"
        return f"<Connection {self.logical}{via}>"

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, settings: ConnectionSettings, logical: BrokerUrl, physical: BrokerUrl
    ) -> Connection:
        """A connection that has completed its handshake; PulsarError otherwise."""
        connection = cls(settings, logical, physical)
        context = settings.ssl_context if physical.tls else None
        if physical.tls and context is None:
            context = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: connection,
                    physical.host,
                    physical.port,
                    ssl=context,
                    server_hostname=physical.host if context else None,
                ),
                settings.connect_timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectionClosed(f"cannot connect to {physical}: {exc or 'timeout'}") from None
        if connection._transport is None:  # uvloop may call connection_made a turn later
            connection.connection_made(transport)
        try:
            await connection._handshake()
        except BaseException:
            connection.close("handshake failed")
            raise
        return connection

    async def _handshake(self) -> None:
        auth = self.settings.authentication
        data = await auth.data()
        connect = c.Connect(
            client_version=CLIENT_VERSION,
            protocol_version=PROTOCOL_VERSION,
            feature_flags=c.FeatureFlags(
                supports_auth_refresh=True,
                supports_broker_entry_metadata=self.settings.broker_entry_metadata,
            ),
        )
        if auth.method != "none":
            connect.auth_method_name = auth.method
            connect.auth_data = data
        if self.logical != self.physical:
            connect.proxy_to_broker_url = self.logical.host_port
        self.send(connect)
        try:
            await result_within(self._connected, self.settings.connect_timeout)
        except TimeoutError:
            raise OperationTimeout(f"{self.physical} did not answer CONNECT") from None

    # ---- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._transport is not None:
            return
        self._transport = transport  # type: ignore[assignment]
        self._last_received = self._loop.time()
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        self._last_received = self._loop.time()
        try:
            frames = self._reader.feed(data)
        except DecodeError as exc:
            log.warning("closing the connection to %s: %s", self.physical, exc)
            self.close(f"bad frame: {exc}", abort=True)
            return
        for frame in frames:
            try:
                self._dispatch(frame)
            except Exception:  # noqa: BLE001 - one command's failure must not end the read
                log.exception("handling %s from %s", type(frame.command).__name__, self.physical)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(self.close_reason or f"connection lost: {exc or 'closed by the broker'}")

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            if not self._writable.done():
                self._writable.set_result(None)
            self._writable = None

    # ---- commands in -----------------------------------------------------------------------

    def _claim(self, command: c.Command | c.UnknownCommand, metadata: MessageMetadata) -> object:
        """What the consumer of a MESSAGE has standing for its payload (`Consumer.claim`)."""
        if type(command) is not c.Message:
            return None
        consumer = self._consumers.get(command.consumer_id)
        claim = None if consumer is None else consumer.claim
        return None if claim is None else claim(metadata)

    def _dispatch(self, frame: Frame) -> None:
        command = frame.command
        kind = type(command)
        if kind is c.Message:
            assert isinstance(command, c.Message)
            consumer = self._consumers.get(command.consumer_id)
            if consumer is not None:
                consumer.on_message(frame)
        elif kind is c.SendReceipt:
            assert isinstance(command, c.SendReceipt)
            producer = self._producers.get(command.producer_id)
            if producer is not None:
                producer.on_receipt(command)
        elif kind is c.Ping:
            self.send(c.Pong())
        elif kind is c.Pong:
            pass  # any byte counts as life: see data_received
        elif kind is c.SendError:
            assert isinstance(command, c.SendError)
            producer = self._producers.get(command.producer_id)
            if producer is not None:
                producer.on_send_error(command)
        elif kind is c.CloseProducer:
            assert isinstance(command, c.CloseProducer)
            producer = self._producers.pop(command.producer_id, None)
            if producer is not None:
                producer.on_disconnect(self, "the broker closed the producer")
        elif kind is c.CloseConsumer:
            assert isinstance(command, c.CloseConsumer)
            consumer = self._consumers.pop(command.consumer_id, None)
            if consumer is not None:
                consumer.on_disconnect(self, "the broker closed the consumer")
        elif kind is c.ReachedEndOfTopic:
            assert isinstance(command, c.ReachedEndOfTopic)
            consumer = self._consumers.get(command.consumer_id)
            if consumer is not None:
                consumer.on_end_of_topic()
        elif kind is c.Connected:
            assert isinstance(command, c.Connected)
            self._on_connected(command)
        elif kind is c.AuthChallenge:
            assert isinstance(command, c.AuthChallenge)
            self._spawn(self._answer_challenge(command))
        elif kind is c.Error:
            assert isinstance(command, c.Error)
            error = ServerError(command.error, command.message)
            if not self._connected.done():
                self._connected.set_exception(error)  # refused at CONNECT (authentication)
            self._resolve(command.request_id, error)
        elif kind is c.ProducerSuccess:
            assert isinstance(command, c.ProducerSuccess)
            if command.producer_ready:  # else: a second answer follows once it is ready
                self._resolve(command.request_id, command)
        elif kind in _ANSWERS:
            self._resolve(command.request_id, command)  # type: ignore[union-attr]
        elif kind is c.ActiveConsumerChange:
            pass  # Failover's active consumer: nothing to do, the broker decides who gets what
        elif kind is c.UnknownCommand:
            log.debug("ignoring command type %s from %s", command.type, self.physical)  # type: ignore[union-attr]
        else:
            log.warning("unexpected %s from %s ignored", kind.__name__, self.physical)

    def _on_connected(self, command: c.Connected) -> None:
        self.server_version = command.server_version
        self.protocol_version = command.protocol_version
        if command.max_message_size is not None and command.max_message_size > 0:
            self.max_message_size = command.max_message_size
        self._reader.max_frame_size = self.max_message_size + FRAME_OVERHEAD
        if not self._connected.done():
            self._connected.set_result(None)

    async def _answer_challenge(self, challenge: c.AuthChallenge) -> None:
        auth = self.settings.authentication
        try:
            data = await auth.data()
        except PulsarError as exc:
            log.warning("cannot answer the authentication challenge of %s: %s", self.physical, exc)
            self.close("authentication refresh failed")
            return
        self.send(
            c.AuthResponse(
                client_version=CLIENT_VERSION,
                response=c.AuthData(auth.method, data),
                protocol_version=PROTOCOL_VERSION,
            )
        )

    def _resolve(self, request_id: int, answer: Any) -> None:
        future = self._requests.pop(request_id, None)
        if future is None or future.done():
            return
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)

    # ---- commands out ----------------------------------------------------------------------

    def new_request_id(self) -> int:
        self._next_request += 1
        return self._next_request

    def send(self, command: c.Command) -> None:
        self._queue_out(simple_frame(command))

    def send_encoded(self, command: bytes) -> None:
        """A command already encoded as a BaseCommand (`commands.encode_ack`...)."""
        self._queue_out(_U32_PAIR.pack(len(command) + 4, len(command)), command)

    def write(self, head: bytes, *section: bytes | memoryview) -> None:
        """A payload frame already encoded (a SEND): its head and its payload section (in
        pieces, `frames.section_parts`)."""
        self._queue_out(head, *section)

    def _queue_out(self, *chunks: bytes | memoryview) -> None:
        """Frames written in one loop turn go to the socket together, at the end of the
        turn: one system call for a pipeline of sends instead of one or two each (a send
        cost 70 µs of system time each on this machine, written one by one)."""
        if self.closed or self._transport is None or self._transport.is_closing():
            raise ConnectionClosed(f"connection to {self.physical} is closed: {self.close_reason}")
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out += chunks

    def _flush(self) -> None:
        out, self._out = self._out, []
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)

    @property
    def writable(self) -> bool:
        return self._writable is None

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        while self._writable is not None and not self.closed:
            await asyncio.wait([self._writable, self._closed_waiter], return_when="FIRST_COMPLETED")

    async def request(self, command: Any, timeout: float | None = None) -> Any:
        """Send a command carrying `request_id` and return its answer; the broker's
        CommandError raises ServerError, no answer in time OperationTimeout."""
        request_id = command.request_id
        future: asyncio.Future[Any] = self._loop.create_future()
        self._requests[request_id] = future
        try:
            self.send(command)
            return await result_within(
                future, self.settings.operation_timeout if timeout is None else timeout
            )
        except TimeoutError:
            raise OperationTimeout(
                f"{type(command).__name__} to {self.physical}: no answer in time"
            ) from None
        finally:
            self._requests.pop(request_id, None)

    # ---- producers and consumers -----------------------------------------------------------

    def add_producer(self, producer_id: int, listener: ProducerListener) -> None:
        self._producers[producer_id] = listener

    def remove_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def add_consumer(self, consumer_id: int, listener: ConsumerListener) -> None:
        self._consumers[consumer_id] = listener

    def remove_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    @property
    def users(self) -> int:
        return len(self._producers) + len(self._consumers)

    # ---- keepalive and the end -------------------------------------------------------------

    def _schedule_keepalive(self) -> None:
        tick = min(self.settings.keepalive_interval, self.settings.keepalive_timeout) / 2
        self._keepalive = self._loop.call_later(tick, self._check_alive)

    def _check_alive(self) -> None:
        if self.closed:
            return
        now = self._loop.time()
        ping = self._ping_sent
        if ping is not None and self._last_received < ping:
            if now - ping >= self.settings.keepalive_timeout:
                log.warning(
                    "closing the connection to %s: no answer to a ping for %.1f s",
                    self.physical,
                    now - ping,
                )
                self.close("the broker stopped answering (keepalive)", abort=True)
                return
        elif now - self._last_received >= self.settings.keepalive_interval:
            self._ping_sent = now
            with contextlib.suppress(ConnectionClosed):
                self.send(c.Ping())
        self._schedule_keepalive()

    def close(self, reason: str = "closed by the client", abort: bool = False) -> None:
        """End the connection; everything on it is failed or told (see `_end`)."""
        if self.closed:
            return
        self.close_reason = reason
        if self._transport is not None:
            if abort:
                self._out.clear()
                self._transport.abort()
            else:
                self._flush()
                self._transport.close()
        self._end(reason)

    def _end(self, reason: str) -> None:
        if self._closed_waiter.done():
            return
        self.closed = True
        self.close_reason = self.close_reason or reason
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._closed_waiter.set_result(None)
        error = ConnectionClosed(f"connection to {self.physical} closed: {self.close_reason}")
        if not self._connected.done():
            self._connected.set_exception(error)
            self._connected.exception()  # retrieved: the opener sees it through result_within
        requests, self._requests = self._requests, {}
        for future in requests.values():
            if not future.done():
                future.set_exception(error)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer.on_disconnect(self, self.close_reason)
        for consumer in consumers.values():
            consumer.on_disconnect(self, self.close_reason)
        self.resume_writing()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_waiter)

    def _spawn(self, coroutine: Any) -> None:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_ANSWERS: frozenset[type[Any]] = frozenset(
    {
        c.Success,
        c.LookupResponse,
        c.PartitionedMetadataResponse,
        c.GetLastMessageIdResponse,
        c.ConsumerStatsResponse,
        c.AckResponse,
    }
)
