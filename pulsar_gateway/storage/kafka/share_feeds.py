"""Share feeds: the gateway's Shared consumer of a share group's Pulsar subscription, per
partition, when the broker dispatches share groups' records (docs/share-groups.md, "The
broker dispatches"; the port's `ShareFeed`).

Each feed is a wire-client consumer (the gateway's own Pulsar client: it names the
partition index when it gives an entry back, which pulsar-lite needs, and grants Shared
permits per message; docs/backend.md) on `<prefix><group>`, the subscription consumer groups
are mirrored on, so a Pulsar application joining it as a Shared consumer splits the
partition with the share group's consumers. A background task takes what the broker hands
over and maps each entry to the Kafka offsets it holds with the partition log (its first
message's offset, and its last message's offset plus that message's records). Its
receiver queue is small, so that the broker keeps most of a backlog for whichever consumer
asks: the gateway asks as its share consumers fetch.

One client of its own, not the backend's: on pulsar-lite a misbehaving subscriber can get
its whole connection closed (docs/backend.md), which must not take the partitions' readers
and producers with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import cast

from pulsar_gateway.gateway.backend.connection_security import PulsarSecurity
from pulsar_gateway.gateway.backend.wire import (
    Client,
    Consumer,
    InitialPosition,
    PulsarError,
    ReceivedEntry,
    SubscriptionType,
)
from pulsar_gateway.gateway.config import Settings
from pulsar_gateway.gateway.errors import StorageError
from pulsar_gateway.gateway.messages import records_in
from pulsar_gateway.handlers.kafka.port import HandedEntry, OffsetOutOfRange
from pulsar_gateway.handlers.kafka.port import PartitionLog as AnyPartitionLog
from pulsar_gateway.storage.kafka.partition_log import PartitionLog

log = logging.getLogger("gateway.kafka.share")

# entries the broker may hand a feed before it is asked again: the share consumers' next
# fetches' worth, not the backlog (an outside consumer of the subscription takes the rest)
RECEIVER_QUEUE = 20
# entries mapped to offsets and waiting for a fetch, at most
MAX_WAITING = 20
# a log that cannot map an entry now is asked again after this long (or once reopened)
RETRY_SECONDS = 1.0


class WireShareFeed:
    """One share group's consumer of one partition (the port's `ShareFeed`)."""

    def __init__(self, consumer: Consumer, log_of_partition: PartitionLog) -> None:
        self.consumer = consumer
        self.log = log_of_partition
        self._waiting: list[HandedEntry] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._room = asyncio.Event()
        self._room.set()
        self._new_log = asyncio.Event()
        self._task = asyncio.create_task(self._pump(), name=f"share feed {consumer.topic}")
        self.closed = False

    async def _pump(self) -> None:
        while True:
            await self._room.wait()
            try:
                entries = await self.consumer.receive_many(64)
            except PulsarError as exc:
                log.warning("share feed on %s stops: %s", self.consumer.topic, exc)
                return
            for entry in entries:
                await self._take(entry)
            if len(self._waiting) >= MAX_WAITING:
                self._room.clear()
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._waiters.clear()

    async def _take(self, entry: ReceivedEntry) -> None:
        """Map the entry and keep it for the next fetch; an entry below the log's start
        (retention, DeleteRecords) is acknowledged: its records are gone."""
        while True:
            try:
                self._waiting.append(await self._map(entry))
                return
            except OffsetOutOfRange:
                with contextlib.suppress(PulsarError):
                    self.consumer.ack([entry])
                return
            except StorageError:  # the log closed (idle) or cannot read: a new one, or again
                self._new_log.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._new_log.wait(), RETRY_SECONDS)

    async def _map(self, entry: ReceivedEntry) -> HandedEntry:
        """The Kafka offsets of the entry's records."""
        ledger, entry_id = entry.id.ledger_id, entry.id.entry_id
        first = await self.log.offset_of((ledger, entry_id, -1))
        last_index = entry.num_messages - 1 if entry.batched else -1
        last_first = first
        if last_index > 0:
            last_first = await self.log.offset_of((ledger, entry_id, last_index))
        holder = await self.log.entry_at(last_first)
        count = holder.offset + records_in(holder.message) - first
        return HandedEntry(first, count, entry.redelivery_count, entry)

    def follow(self, partition_log: AnyPartitionLog) -> None:
        if partition_log is not self.log:
            self.log = cast(PartitionLog, partition_log)  # the storage's own logs
            self._new_log.set()

    def handed(self, limit: int) -> list[HandedEntry]:
        out, self._waiting = self._waiting[:limit], self._waiting[limit:]
        if len(self._waiting) < MAX_WAITING:
            self._room.set()
        return out

    def handed_future(self) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        if self._waiting:
            future.set_result(None)
        else:
            self._waiters.append(future)
        return future

    def settle(self, entry: HandedEntry) -> None:
        with contextlib.suppress(PulsarError):
            self.consumer.ack([entry.handle])

    def give_back(self, entry: HandedEntry) -> None:
        with contextlib.suppress(PulsarError):
            self.consumer.redeliver([entry.handle])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._task.cancel()
        asyncio.get_running_loop().create_task(self._close_consumer())

    async def _close_consumer(self) -> None:
        with contextlib.suppress(PulsarError):
            await self.consumer.close()


class WireShareFeeds:
    """Opens share feeds on one wire client of their own (the port's `ShareFeeds`)."""

    def __init__(
        self,
        service_url: str,
        security: PulsarSecurity,
        subscription_prefix: str,
        operation_timeout: float = 10.0,
    ) -> None:
        self.service_url = service_url
        self.security = security
        self.prefix = subscription_prefix
        self.operation_timeout = operation_timeout
        self._client: Client | None = None

    async def open(self, group_id: str, log: AnyPartitionLog, earliest: bool) -> WireShareFeed:
        if self._client is None:
            self._client = Client.from_security(
                self.service_url, self.security, operation_timeout=self.operation_timeout
            )
        position = InitialPosition.EARLIEST if earliest else InitialPosition.LATEST
        try:
            consumer = await self._client.subscribe(
                log.topic,
                self.prefix + group_id,
                subscription_type=SubscriptionType.SHARED,
                initial_position=position,
                receiver_queue_size=RECEIVER_QUEUE,
                ack_delay=0.0,
            )
        except PulsarError as exc:  # the handler answers the partition's storage error
            raise StorageError(f"cannot subscribe to {log.topic}: {exc}") from exc
        return WireShareFeed(consumer, cast(PartitionLog, log))  # the storage's own logs

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def share_feeds_for(
    settings: Settings, service_url: str, security: PulsarSecurity
) -> WireShareFeeds | None:
    """The share feeds when `kafka.share_dispatch` is `broker`, else None (the gateway
    dispatches). The Kafka listener's share groups close them when it stops."""
    if settings.kafka.share_dispatch != "broker":
        return None
    return WireShareFeeds(
        service_url,
        security,
        settings.kafka.group_subscription_prefix,
        operation_timeout=float(min(10, settings.pulsar.operation_timeout_seconds)),
    )
