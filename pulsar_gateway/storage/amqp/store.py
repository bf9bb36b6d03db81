"""The Pulsar-backed `BrokerStore` of the AMQP handler.

- vhost -> namespace `{tenant}/{escaped vhost}` (`/` -> `default`; the escaping, which
  gives every vhost a namespace of its own, is in vhost_names.py), created on first use
  (pulsar-lite and namespace auto-creation make the first topic do it); a vhost that
  would map into the gateway's own namespace is refused (`vhost_access`);
- queue -> topic `persistent://{tenant}/{ns}/{queue}` with ONE durable Shared
  subscription (`SUBSCRIPTION`) that every AMQP consumer shares; a Pulsar
  client may consume the queue through that subscription too;
- durable exchanges, queues and bindings -> metadata-store records under
  `amqp/{vhost}/...`; transient ones live only in the broker's memory, as in
  RabbitMQ they do not survive a restart;
- a stream queue -> the topic `persistent://{tenant}/{ns}/{queue}-partition-0` with no
  subscription, read by position (`open_stream`): partition 0 of the Kafka topic
  `{tenant}/{ns}/{queue}` (docs/pulsar-mapping.md), so Kafka consumers and Pulsar readers
  read what AMQP publishers append;
- a message -> the AMQP body as the Pulsar payload, plus properties holding
  the exchange, routing key and the content header's property octets (base64),
  so basic.deliver gives every property back byte for byte.

Message counts: pulsar-lite has no admin API (no backlog query), so the broker
counts (stored minus acknowledged) and saves the count here now and then. After
a kill -9 the saved count may lag by the last second of changes; it is
corrected upward as soon as the queue's consumer sees more than it expected.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable
from typing import Any

from pamqp import decode, encode

from pulsar_gateway.gateway.backend.native_queue_consumer import NativeQueueConsumer
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.queue_consumers import AnyQueueConsumer, QueueConsumers
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST, ReaderStream
from pulsar_gateway.gateway.backend.resend_filter import ResendCopies
from pulsar_gateway.gateway.listener_settings import AmqpSection
from pulsar_gateway.gateway.messages import MessageKey, OutMessage
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.reserved_names import ReservedNamespaces
from pulsar_gateway.handlers.amqp.broker_model import (
    AmqpMessage,
    QueueReader,
    StoredDelivery,
    StreamCursor,
    VhostAccess,
)
from pulsar_gateway.handlers.amqp.topology import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Queue,
    Topology,
)
from pulsar_gateway.storage.amqp.grouped_sends import GroupedSends
from pulsar_gateway.storage.amqp.kept_acks import KeptAcks
from pulsar_gateway.storage.amqp.published import PublishedEntries, stored_fields
from pulsar_gateway.storage.amqp.vhost_names import escape, namespace_of

log = logging.getLogger("gateway.amqp.store")

SUBSCRIPTION = "amqp"
PREFIX = "amqp/"
# Property names on the Pulsar message; a Pulsar consumer can read them too.
P_EXCHANGE = "amqp.exchange"
P_ROUTING_KEY = "amqp.routing-key"
P_PROPERTIES = "amqp.properties"
P_TIMESTAMP = "amqp.timestamp"
P_EXPIRATION = "amqp.expiration"
P_PERSISTENT = "amqp.persistent"
P_PRIORITY = "amqp.priority"
STREAM_PARTITION = "-partition-0"  # a stream is partition 0 of a Kafka topic
TOPIC_CACHE_SIZE = 10_000  # (vhost, queue) -> topic names kept; cleared when full
PROPERTIES_CACHE_SIZE = 1024  # distinct property octets kept in base64 both ways...
PROPERTIES_CACHE_ENTRY = 512  # ...when this short (bytes or characters): under 1 MiB in all


def _table(arguments: Any) -> str:
    """AMQP field tables (bytes, decimals, timestamps...) as lossless text."""
    return base64.b64encode(encode.field_table(dict(arguments or {}))).decode()


def _untable(text: str) -> dict[str, Any]:
    if not text:
        return {}
    return decode.field_table(base64.b64decode(text))[1]


class _PulsarQueueReader:
    """`QueueReader` over one queue consumer: Pulsar messages -> stored AMQP messages.
    `kept`: where the messages acknowledged inside batched entries are kept (wire
    consumers), `released` called once it is closed."""

    def __init__(
        self,
        queue: str,
        consumer: AnyQueueConsumer,
        nudger: Callable[[str, str], Awaitable[None]],
        kept: KeptAcks | None = None,
        released: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self.consumer = consumer
        self.nudger = nudger
        self.kept = kept
        self._released = released
        if kept is not None and isinstance(consumer, NativeQueueConsumer):
            kept.flushers.append(consumer.flush_acks)
        self._decoded: dict[str, bytes] = {}  # base64 property text -> octets; bounded
        # pulsar-lite stores a message the client resent after a broker crash twice
        # (docs/backend.md, "Producer resends after a reconnect"): the copy is acked unseen
        self._copies = ResendCopies()

    async def fetch(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        received = await self.consumer.fetch(limit, timeout)
        out: list[StoredDelivery] = []
        append = out.append
        decoded = self._decoded
        is_copy = self._copies.is_copy
        is_stamped_copy = self._copies.is_copy_stamped
        queue = self.queue
        copies = []
        for item in received:
            built = item.built
            if isinstance(built, AmqpMessage):  # kept when published here (published.py)
                if is_stamped_copy(item.producer, item.stamp, item.id):
                    copies.append(item.id)
                else:
                    append(StoredDelivery(queue, item.id, built, item.redelivery_count))
                continue
            properties = item.properties
            if is_copy(item.producer, properties, item.id):
                copies.append(item.id)
                continue
            message = _amqp_message(properties, item.payload, item.publish_time, decoded)
            message = message if P_ROUTING_KEY in properties else _keyed(message, queue)
            append(StoredDelivery(queue, item.id, message, item.redelivery_count))
        if copies:
            self.ack(copies)
            log.info("queue %s: %d resent copies dropped", self.queue, len(copies))
        return out

    def ack(self, message_ids: Iterable[Hashable]) -> None:
        self.consumer.acknowledge(_keys(message_ids))
        if self.kept is not None:
            self.kept.changed()

    async def nudge(self) -> None:
        await self.nudger(self.consumer.topic, self.consumer.subscription)

    async def close(self) -> None:
        try:
            if self.kept is not None:
                await self.kept.flush()  # before the broker sends what it held elsewhere
            await self.consumer.close()
        finally:
            released, self._released = self._released, None
            if released is not None:
                if self.kept is not None and isinstance(self.consumer, NativeQueueConsumer):
                    self.kept.flushers.remove(self.consumer.flush_acks)
                released()


class _PulsarStreamCursor:
    """`StreamCursor` over a Pulsar reader of a stream's topic."""

    def __init__(self, queue: str, reader: ReaderStream) -> None:
        self.queue = queue
        self.reader = reader
        self._decoded: dict[str, bytes] = {}

    async def read(self, limit: int, timeout: float | None) -> list[StoredDelivery]:
        batch = await self.reader.read_batch(limit, timeout)
        out = []
        for item in batch:
            message = _amqp_message(
                item.properties, item.payload or b"", item.publish_time, self._decoded
            )
            if P_ROUTING_KEY not in item.properties:
                message = _keyed(message, self.queue)
            out.append(StoredDelivery(self.queue, item.id, message))
        return out

    async def close(self) -> None:
        await self.reader.close()


def _amqp_message(
    props: dict[str, str], payload: bytes, publish_time: int, decoded: dict[str, bytes]
) -> AmqpMessage:
    """A stored AMQP message from a Pulsar message's properties (as `publish` writes them;
    a plain Pulsar producer's message reads as published to the default exchange)."""
    text = props.get(P_PROPERTIES)
    if text is None:
        raw = b"\x00\x00"
    else:
        known = decoded.get(text)  # a queue's messages mostly share their properties
        if known is not None:
            raw = known
        else:
            raw = base64.b64decode(text) or b"\x00\x00"
            if len(text) <= PROPERTIES_CACHE_ENTRY:
                if len(decoded) >= PROPERTIES_CACHE_SIZE:
                    decoded.clear()
                decoded[text] = raw
    get = props.get
    expiration = get(P_EXPIRATION)
    timestamp = get(P_TIMESTAMP)
    priority = get(P_PRIORITY)
    return AmqpMessage(
        get(P_EXCHANGE, ""),
        get(P_ROUTING_KEY, ""),
        raw,
        payload,
        get(P_PERSISTENT) == "1",
        int(expiration) if expiration else None,
        int(timestamp) if timestamp else publish_time,
        int(priority) if priority else 0,
    )


def _keyed(message: AmqpMessage, queue: str) -> AmqpMessage:
    """A message without a routing key property: routed by the queue's name (what the
    default exchange would have used)."""
    return dataclasses.replace(message, routing_key=queue)


def _keys(ids: Iterable[Hashable]) -> list[MessageKey]:
    return [key for key in ids if isinstance(key, tuple)]


class PulsarAmqpStore:
    """Implements `handlers.amqp.broker_model.BrokerStore` on Pulsar."""

    def __init__(
        self,
        backend: PulsarBackend,
        metadata: MetadataStore,
        tenant: str = "public",
        receiver_queue_size: int = 1000,
        reserved: ReservedNamespaces | None = None,
        register_stream: Callable[[str], Awaitable[None]] | None = None,
        batched_entries: bool = False,
        published_bytes: int = 0,
    ) -> None:
        """`register_stream(topic)` makes a stream's topic (without its partition suffix)
        a Kafka topic of one partition, so Kafka clients find it (the composition root
        hands in the Kafka topic service's create). `batched_entries`
        (`amqp.batched_queue_entries`): queues written as batched entries and read through
        the gateway's own Pulsar client, when it has one (docs/backend.md, "AMQP queue
        messages in batched entries"). `published_bytes` (`amqp.published_cache_bytes`):
        what the published messages kept for the queue readers may take (published.py)."""
        self.backend = backend
        self.register_stream = register_stream
        self.metadata = metadata
        self.tenant = tenant
        self.reserved = reserved or ReservedNamespaces()
        self.consumers = QueueConsumers(backend, receiver_queue_size, wire=batched_entries)
        # kept for the queue reader, which takes them through wire consumers of batched
        # entries only (the backend has its wire client once started)
        self.published = (
            PublishedEntries(published_bytes, published_bytes // 4)
            if batched_entries and published_bytes > 0
            else None
        )
        self.sends = GroupedSends(backend, batched_entries, self.published)
        self._topics: dict[tuple[str, str], str] = {}
        self._streams: set[tuple[str, str]] = set()  # (vhost, queue) of stream queues
        self._encoded: dict[bytes, str] = {}  # property octets -> base64 text; bounded
        self._kept: dict[str, KeptAcks] = {}  # topic -> its record, while a reader is open

    @classmethod
    def configured(
        cls,
        backend: PulsarBackend,
        metadata: MetadataStore,
        settings: AmqpSection,
        reserved: ReservedNamespaces,
        register_stream: Callable[[str], Awaitable[None]],
    ) -> PulsarAmqpStore:
        """The store as the `amqp` settings have it."""
        return cls(
            backend,
            metadata,
            settings.tenant,
            reserved=reserved,
            register_stream=register_stream,
            batched_entries=settings.batched_queue_entries,
            published_bytes=settings.published_cache_bytes,
        )

    # --- names ------------------------------------------------------------------------

    def namespace(self, vhost: str) -> str:
        return f"{self.tenant}/{namespace_of(vhost)}"

    def topic(self, vhost: str, queue: str) -> str:
        """Every publish asks: the escaped names are kept (a bounded cache)."""
        key = (vhost, queue)
        topic = self._topics.get(key)
        if topic is None:
            if len(self._topics) >= TOPIC_CACHE_SIZE:
                self._topics.clear()
            topic = f"persistent://{self.namespace(vhost)}/{escape(queue)}"
            if key in self._streams:
                topic += STREAM_PARTITION
            self._topics[key] = topic
        return topic

    @staticmethod
    def _key(vhost: str, kind: str, name: str = "") -> str:
        return f"{PREFIX}{escape(vhost)}/{kind}/{escape(name) if name else ''}"

    # --- topology ---------------------------------------------------------------------

    def vhost_access(self, username: str, vhost: str) -> VhostAccess:
        """The listener's vhost policy: any user may open (and so create) any vhost, except
        one whose queues would land among the gateway's own topics (vhost `__gateway` is
        `public/__gateway`, where the metadata log lives)."""
        if self.reserved.holds(self.namespace(vhost)):
            return VhostAccess.RESERVED
        return VhostAccess.CREATE

    async def create_vhost(self, vhost: str) -> None:
        key = f"{PREFIX}vhosts/{escape(vhost)}"
        namespace = self.namespace(vhost)
        known = self.metadata.get(key)
        if known is not None and known.get("namespace") == namespace:
            return
        if known is not None:
            await self._moved(vhost, known.get("namespace", ""), namespace)
        await self.metadata.put(key, {"name": vhost, "namespace": namespace})

    async def _moved(self, vhost: str, old: str, new: str) -> None:
        """A vhost recorded by an earlier version under another namespace (vhost `default`
        shared `default` with `/`): its queues now start empty in the new namespace, so
        the saved counts, which counted messages in the old one, go."""
        log.warning(
            "vhost '%s' now maps to namespace %s, not %s: messages left there stay there "
            "(docs/pulsar-mapping.md, 'Vhosts and namespaces')",
            vhost,
            new,
            old,
        )
        old_keys = [
            key
            for kind in ("counts", "acked")
            for key, _ in self.metadata.children(self._key(vhost, kind))
        ]
        await asyncio.gather(*(self.metadata.delete(key) for key in old_keys))

    def vhosts(self) -> list[str]:
        return [value["name"] for _, value in self.metadata.children(f"{PREFIX}vhosts/")]

    async def load_topology(self, vhost: str) -> Topology:
        exchanges = [
            Exchange(
                v["name"],
                ExchangeType(v["type"]),
                True,
                v["auto_delete"],
                v["internal"],
                _untable(v["arguments"]),
            )
            for _, v in self.metadata.children(self._key(vhost, "exchanges"))
        ]
        queues = [
            Queue(v["name"], True, None, v["auto_delete"], _untable(v["arguments"]))
            for _, v in self.metadata.children(self._key(vhost, "queues"))
        ]
        for queue in queues:
            if queue.is_stream:
                self._stream(vhost, queue.name)
        bindings = [
            Binding(
                v["source"],
                v["destination"],
                DestinationKind(v["kind"]),
                v["routing_key"],
                _untable(v["arguments"]),
            )
            for _, v in self.metadata.children(self._key(vhost, "bindings"))
        ]
        return Topology(vhost, exchanges, queues, bindings)

    async def save_exchange(self, vhost: str, exchange: Exchange) -> None:
        if not exchange.durable:
            return
        await self.metadata.put(
            self._key(vhost, "exchanges", exchange.name),
            {
                "name": exchange.name,
                "type": str(exchange.type),
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
                "arguments": _table(exchange.arguments),
            },
        )

    async def remove_exchange(self, vhost: str, name: str) -> None:
        key = self._key(vhost, "exchanges", name)
        if self.metadata.get(key) is not None:
            await self.metadata.delete(key)

    def _stream(self, vhost: str, name: str) -> None:
        self._streams.add((vhost, name))
        self._topics.pop((vhost, name), None)

    async def save_queue(self, vhost: str, queue: Queue) -> None:
        if queue.is_stream:
            self._stream(vhost, queue.name)  # a log read by position: no subscription
            if self.register_stream is not None:
                topic = self.topic(vhost, queue.name).removesuffix(STREAM_PARTITION)
                try:
                    await self.register_stream(topic)
                except Exception as exc:  # AMQP works without it; Kafka clients would not
                    log.warning("stream %s: not made a Kafka topic: %s", topic, exc)
        else:
            await self._forget_acked(vhost, queue.name)
            await self.consumers.create_fresh(self.topic(vhost, queue.name), SUBSCRIPTION)
            if self.published is not None:
                self.published.forget(self.topic(vhost, queue.name))
        if queue.durable:
            await self.metadata.put(
                self._key(vhost, "queues", queue.name),
                {
                    "name": queue.name,
                    "auto_delete": queue.auto_delete,
                    "arguments": _table(queue.arguments),
                    "topic": self.topic(vhost, queue.name),
                    "subscription": "" if queue.is_stream else SUBSCRIPTION,
                },
            )

    async def remove_queue(self, vhost: str, name: str) -> None:
        for key in (self._key(vhost, "queues", name), self._key(vhost, "counts", name)):
            if self.metadata.get(key) is not None:
                await self.metadata.delete(key)
        if (vhost, name) in self._streams:
            self._streams.discard((vhost, name))  # its log stays: pulsar-lite deletes nothing
            self._topics.pop((vhost, name), None)
            return
        await self._forget_acked(vhost, name)
        await self.consumers.delete(self.topic(vhost, name), SUBSCRIPTION)
        if self.published is not None:
            self.published.forget(self.topic(vhost, name))

    def _binding_key(self, vhost: str, binding: Binding) -> str:
        digest = hashlib.sha256(repr(binding.key).encode()).hexdigest()[:32]
        return self._key(vhost, "bindings", digest)

    async def save_binding(self, vhost: str, binding: Binding) -> None:
        await self.metadata.put(
            self._binding_key(vhost, binding),
            {
                "source": binding.source,
                "destination": binding.destination,
                "kind": str(binding.destination_kind),
                "routing_key": binding.routing_key,
                "arguments": _table(binding.arguments),
            },
        )

    async def remove_binding(self, vhost: str, binding: Binding) -> None:
        key = self._binding_key(vhost, binding)
        if self.metadata.get(key) is not None:
            await self.metadata.delete(key)

    # --- messages ---------------------------------------------------------------------

    def publish(
        self, vhost: str, queues: Collection[str], message: AmqpMessage
    ) -> asyncio.Future[Any]:
        """A future, not a coroutine: the vhost waits on it without a task per publish."""
        # the acceptance time first: after the gateway's own stamp, the only field that
        # changes from message to message, so what follows is decoded once for many
        # (wire/batch.split_batch's tails)
        timestamp = message.timestamp_ms or int(time.time() * 1000)
        properties = {
            P_TIMESTAMP: str(timestamp),
            P_EXCHANGE: message.exchange,
            P_ROUTING_KEY: message.routing_key,
            P_PROPERTIES: self._encoded_properties(message.properties_raw),
        }
        if message.persistent:
            properties[P_PERSISTENT] = "1"
        if message.expiration_ms is not None:
            properties[P_EXPIRATION] = str(message.expiration_ms)
        if message.priority:
            properties[P_PRIORITY] = str(message.priority)
        out = OutMessage(message.body, properties=properties)
        stored = None if self.published is None else stored_fields(message, timestamp)
        submit = self.sends.submit
        if len(queues) == 1:
            for queue in queues:
                return submit(self.topic(vhost, queue), out, stored)
        return asyncio.gather(*(submit(self.topic(vhost, q), out, stored) for q in queues))

    def _encoded_properties(self, raw: bytes) -> str:
        """The property octets as base64 text; publishers mostly repeat theirs (a bounded
        cache)."""
        text = self._encoded.get(raw)
        if text is None:
            text = base64.b64encode(raw).decode()
            if len(raw) <= PROPERTIES_CACHE_ENTRY:
                if len(self._encoded) >= PROPERTIES_CACHE_SIZE:
                    self._encoded.clear()
                self._encoded[raw] = text
        return text

    async def open_queue(self, vhost: str, queue: str) -> QueueReader:
        """A reader of the queue; through wire consumers, with the messages acknowledged
        inside batched entries loaded first (kept_acks.py)."""
        topic = self.topic(vhost, queue)
        if not self.consumers.native:
            consumer = await self.consumers.open(topic, SUBSCRIPTION)
            return _PulsarQueueReader(queue, consumer, self.consumers.nudge)
        kept = self._kept.get(topic)
        if kept is None:
            acks = self.consumers.partial.of(topic, SUBSCRIPTION)
            kept = KeptAcks(self.metadata, self._key(vhost, "acked", queue), acks)
            kept.load()
            self._kept[topic] = kept
        kept.users += 1
        released = functools.partial(self._release_kept, topic, kept)
        try:
            consumer = await self.consumers.open(topic, SUBSCRIPTION)
        except BaseException:
            released()
            raise
        if self.published is not None and isinstance(consumer, NativeQueueConsumer):
            consumer.known = functools.partial(self.published.take, topic)
        return _PulsarQueueReader(queue, consumer, self.consumers.nudge, kept, released)

    def _release_kept(self, topic: str, kept: KeptAcks) -> None:
        """A reader of the queue closed: with none left, its record stays in the store
        only (the next reader, here or on another member, loads it)."""
        kept.users -= 1
        if kept.users > 0:
            kept.resume()
            return
        kept.close()
        if self._kept.get(topic) is kept:
            del self._kept[topic]
            self.consumers.partial.forget(topic, SUBSCRIPTION)

    async def _forget_acked(self, vhost: str, queue: str) -> None:
        """A queue created afresh or deleted: nothing of an earlier one's record stays."""
        key = self._key(vhost, "acked", queue)
        if self.metadata.get(key) is not None:
            await self.metadata.delete(key)

    async def open_stream(self, vhost: str, queue: str, start: Hashable | None) -> StreamCursor:
        position = start if isinstance(start, tuple) else EARLIEST
        reader = await self.backend.open_reader(self.topic(vhost, queue), position)
        return _PulsarStreamCursor(queue, reader)

    def load_count(self, vhost: str, queue: str) -> int:
        return int(self.metadata.get(self._key(vhost, "counts", queue), 0) or 0)

    async def save_count(self, vhost: str, queue: str, count: int) -> None:
        await self.metadata.put(self._key(vhost, "counts", queue), count)
