"""The wire client: a pool of broker connections, topic lookups, and the factory of
producers and consumers (docs/pulsar-protocol.md).

A topic is served by one broker. `lookup` asks the service URL's broker which one, follows
redirects (at most `max_lookup_redirects`, carrying the `authoritative` flag the last
answer gave), and honours `proxy_through_service_url`: the bytes then keep going to the
service URL, and CONNECT names the broker the proxy should forward to. Connections are
shared by every producer and consumer on the same broker; one that ends is dropped from
the pool and the next user opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from typing import Any

from pulsar_gateway.gateway.backend.wire import commands as c
from pulsar_gateway.gateway.backend.wire.auth import (
    NO_AUTHENTICATION,
    Authentication,
    authentication_for,
    ssl_context_for,
)
from pulsar_gateway.gateway.backend.wire.connection import Connection, ConnectionSettings
from pulsar_gateway.gateway.backend.wire.consumer import Consumer
from pulsar_gateway.gateway.backend.wire.errors import (
    ConnectionClosed,
    PulsarError,
    ServerError,
    TopicLookupError,
)
from pulsar_gateway.gateway.backend.wire.ids import EARLIEST, MessageId
from pulsar_gateway.gateway.backend.wire.producer import Producer
from pulsar_gateway.gateway.backend.wire.urls import BrokerUrl, parse_broker_url, parse_service_url

log = logging.getLogger("gateway.pulsar.wire")

MAX_LOOKUP_REDIRECTS = 8


class Client:
    def __init__(
        self,
        service_url: str,
        *,
        authentication: Authentication = NO_AUTHENTICATION,
        ssl_context: ssl.SSLContext | None = None,
        operation_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        keepalive_interval: float = 10.0,
        keepalive_timeout: float = 10.0,
        max_lookup_redirects: int = MAX_LOOKUP_REDIRECTS,
        broker_entry_metadata: bool = True,
    ) -> None:
        self.service_url = service_url
        self.brokers = parse_service_url(service_url)
        self.settings = ConnectionSettings(
            authentication=authentication,
            ssl_context=ssl_context,
            connect_timeout=connect_timeout,
            operation_timeout=operation_timeout,
            keepalive_interval=keepalive_interval,
            keepalive_timeout=keepalive_timeout,
            broker_entry_metadata=broker_entry_metadata,
        )
        self.max_lookup_redirects = max_lookup_redirects
        self._pool: dict[tuple[BrokerUrl, BrokerUrl], asyncio.Future[Connection]] = {}
        # producer and consumer ids: unique in this process and, from a random start,
        # unlikely to meet another process's on the same broker (pulsar-lite does not answer
        # a subscribe whose consumer id another connection holds: docs/backend.md)
        self._next_id = random.randrange(1 << 20, 1 << 30)
        self._users: set[Any] = set()
        self.closed = False

    @classmethod
    def from_security(cls, service_url: str, security: Any, **options: Any) -> Client:
        """A client with the gateway's `[pulsar]` TLS and authentication settings (a checked
        `connection_security.PulsarSecurity`)."""
        tls = service_url.strip().startswith("pulsar+ssl://")
        return cls(
            service_url,
            authentication=authentication_for(security),
            ssl_context=ssl_context_for(security, tls),
            **options,
        )

    @property
    def operation_timeout(self) -> float:
        return self.settings.operation_timeout

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # ---- connections -----------------------------------------------------------------------

    async def connection(self, logical: BrokerUrl, physical: BrokerUrl | None = None) -> Connection:
        """The pooled connection to `logical` (through `physical`), opened if needed."""
        if self.closed:
            raise ConnectionClosed("the client is closed")
        key = (logical, physical or logical)
        pending = self._pool.get(key)
        if pending is not None:
            if not pending.done():
                return await asyncio.shield(pending)
            if pending.exception() is None and not pending.result().closed:
                return pending.result()
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._pool[key] = future
        try:
            connection = await Connection.open(self.settings, key[0], key[1])
        except BaseException as exc:
            if self._pool.get(key) is future:
                del self._pool[key]
            future.set_exception(
                exc if isinstance(exc, Exception) else ConnectionClosed("cancelled")
            )
            future.exception()  # retrieved: later callers open their own
            raise
        future.set_result(connection)
        return connection

    async def service_connection(self) -> Connection:
        """A connection to one of the service URL's brokers, tried in order."""
        last: Exception | None = None
        for broker in self.brokers:
            try:
                return await self.connection(broker)
            except ConnectionClosed as exc:
                last = exc
        assert last is not None
        raise last

    # ---- lookups ---------------------------------------------------------------------------

    async def lookup(self, topic: str) -> tuple[BrokerUrl, BrokerUrl]:
        """The broker that serves `topic` and where to send its bytes."""
        connection = await self.service_connection()
        service = connection.physical  # a proxy is reached through the service URL
        authoritative = False
        for _ in range(self.max_lookup_redirects + 1):
            answer: c.LookupResponse = await connection.request(
                c.Lookup(topic, connection.new_request_id(), authoritative)
            )
            if answer.response == c.LookupType.FAILED or answer.error is not None:
                raise ServerError(answer.error or 0, answer.message or "", f"lookup of {topic}")
            url = self._pick_url(answer)
            try:
                logical = parse_broker_url(url)
            except ValueError as exc:
                raise TopicLookupError(f"lookup of {topic}: {exc}") from None
            physical = service if answer.proxy_through_service_url else logical
            if answer.response == c.LookupType.CONNECT:
                return logical, physical
            authoritative = answer.authoritative
            connection = await self.connection(logical, physical)
        raise TopicLookupError(
            f"lookup of {topic}: more than {self.max_lookup_redirects} redirects"
        )

    def _pick_url(self, answer: c.LookupResponse) -> str:
        tls = self.brokers[0].tls
        url = answer.broker_service_url_tls if tls else answer.broker_service_url
        if not url:
            raise TopicLookupError(f"lookup answer without a {'TLS ' if tls else ''}broker URL")
        return url

    async def connection_for(self, topic: str) -> Connection:
        logical, physical = await self.lookup(topic)
        return await self.connection(logical, physical)

    async def partitions(self, topic: str) -> int:
        """The partition count of `topic` (0: not partitioned)."""
        connection = await self.service_connection()
        answer: c.PartitionedMetadataResponse = await connection.request(
            c.PartitionedMetadata(topic, connection.new_request_id())
        )
        if answer.response == 1 or answer.error is not None:
            raise ServerError(
                answer.error or 0, answer.message or "", f"partitioned metadata of {topic}"
            )
        return answer.partitions or 0

    # ---- producers and consumers -----------------------------------------------------------

    async def create_producer(self, topic: str, **options: Any) -> Producer:
        """A started `Producer` (producer.py) on `topic`."""
        producer = Producer(self, topic, **options)
        await producer.start()
        return producer

    async def subscribe(self, topic: str, subscription: str, **options: Any) -> Consumer:
        """A started `Consumer` (consumer.py) on a subscription of `topic`."""
        consumer = Consumer(self, topic, subscription, **options)
        await consumer.start()
        return consumer

    async def create_reader(
        self, topic: str, start: MessageId = EARLIEST, **options: Any
    ) -> Consumer:
        """A started reader (a `Consumer` on a non-durable subscription) at `start`."""
        consumer = Consumer.reader(self, topic, start, **options)
        await consumer.start()
        return consumer

    def register(self, user: Any) -> None:
        self._users.add(user)

    def unregister(self, user: Any) -> None:
        self._users.discard(user)

    async def close(self, timeout: float = 5.0) -> None:
        """Close every producer (waiting up to `timeout` for its pending sends) and
        consumer, then every connection."""
        self.closed = True
        for user in list(self._users):
            with contextlib.suppress(PulsarError):
                if hasattr(user, "flush"):
                    await user.close(timeout=timeout)
                else:
                    await user.close()
        pool, self._pool = self._pool, {}
        for future in pool.values():
            if future.done() and future.exception() is None:
                future.result().close()
