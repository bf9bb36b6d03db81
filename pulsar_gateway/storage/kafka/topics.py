"""Kafka-style topics over Pulsar: what handlers ask for, in one place.

Create, delete and grow topics, and hand out the open `PartitionLog` of a
partition. Partition logs open on demand and close when idle, so 1,000 topics of
10 partitions cost nothing until they are used. Their tail caches share one byte
budget (`TailCache`), so memory stays bounded however many are open.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable

from pulsar_gateway.gateway.backend.admin import (
    CLUSTER_CAPABILITIES,
    EMBEDDED_CAPABILITIES,
    AdminError,
    Capabilities,
    PulsarAdmin,
)
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.topic_names import (
    logical_topic,
    partition_topic,
    split_partition_topic,
)
from pulsar_gateway.handlers.kafka.port import (
    InvalidPartitions,
    TopicDeleted,
    TopicExists,
    TopicRecord,
    UnknownTopic,
)
from pulsar_gateway.kafka_codec.entry_format import KAFKA, topic_format
from pulsar_gateway.storage.kafka.offset_checkpoints import ABORTED_PREFIX, INDEX_PREFIX
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.topic_registry import TopicRegistry

log = logging.getLogger("pulsar_gateway.storage.kafka.topics")


class TailCache:
    """The byte budget of all open partitions' tail caches together (`kafka.tail_cache_bytes`).

    Each partition caches up to `kafka.tail_cache_partition_bytes` of its newest messages, so
    that fetches at the tail never reach Pulsar; without a shared cap 1,000 busy partitions
    could hold 64 GiB. Partitions report every change of their tail here; past the limit the
    least recently used partitions drop their oldest messages until the total is 10% under
    it (so eviction runs once in a while, not on every append). A partition that lost its
    cache still serves every offset, from Pulsar.
    """

    def __init__(self, limit: int, partitions: Callable[[], Iterable[PartitionLog]]) -> None:
        self.limit = limit
        self.used = 0
        self._partitions = partitions
        self._evicting = False

    def charge(self, partition: PartitionLog, delta: int) -> None:
        self.used += delta
        if self.used > self.limit and not self._evicting:
            self._evicting = True
            try:
                self._evict(partition)
            finally:
                self._evicting = False

    def _evict(self, growing: PartitionLog) -> None:
        target = self.limit - self.limit // 10
        candidates = {*self._partitions(), growing}
        for partition in sorted(candidates, key=lambda candidate: candidate.last_used):
            if self.used <= target:
                break
            partition.shrink_tail(self.used - target)


class TopicService:
    def __init__(
        self,
        backend: PulsarBackend,
        metadata: MetadataStore,
        admin: PulsarAdmin | None = None,
        index_interval: int = 1000,
        tail_records: int = 1_000_000,
        idle_close_seconds: float = 60.0,
        forget_partitions: Callable[[list[str]], Awaitable[None]] | None = None,
        tail_partition_bytes: int = 64 * 1024 * 1024,
        tail_cache_bytes: int = 256 * 1024 * 1024,
        default_entry_format: str = "pulsar",
    ) -> None:
        self.backend = backend
        # the entry format of a topic that names none (`kafka.entry_format`)
        self.default_entry_format = default_entry_format
        # drops the groups' committed offsets (and their mirror) on a deleted topic's partitions
        self.forget_partitions = forget_partitions
        self.metadata = metadata
        self.registry = TopicRegistry(metadata)
        self.admin = admin
        self.capabilities: Capabilities = CLUSTER_CAPABILITIES if admin else EMBEDDED_CAPABILITIES
        self.index_interval = index_interval
        self.tail_records = tail_records
        self.tail_partition_bytes = tail_partition_bytes
        self.idle_close_seconds = idle_close_seconds
        self._logs: dict[str, PartitionLog] = {}
        self.tail_cache = TailCache(tail_cache_bytes, self._logs.values)
        self._opening: dict[str, asyncio.Future[PartitionLog]] = {}
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_idle())

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for partition_log in list(self._logs.values()):
            await partition_log.close()
        self._logs.clear()

    # ---- topics ----------------------------------------------------------------------------

    def get(self, name: str) -> TopicRecord | None:
        return self.registry.get(name)

    def list(self) -> builtins.list[TopicRecord]:
        return self.registry.all()

    def total_partitions(self) -> int:
        return sum(record.partitions for record in self.registry.all())

    async def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicRecord:
        async with self._lock:
            # in a cluster another member may have just created it (a CreateTopics there, an
            # auto-create here): read the metadata log up to now first, or this create would
            # follow that one in the log and win with its own partition count
            # (docs/cluster.md, "Creating topics")
            await self.metadata.catch_up()
            if self.registry.get(name) is not None:
                raise TopicExists(name)
            if partitions < 1:
                raise InvalidPartitions("partitions must be at least 1")
            legacy = self.registry.get_any(name)
            if legacy is not None:
                # marked deleted by an earlier version, its data still stored: its groups'
                # offsets must not carry over, and its Pulsar topics wait for reclamation
                if self.forget_partitions is not None:
                    await self.forget_partitions(_partitions(legacy))
                await self.registry.retire(legacy)
            last = self.registry.last_incarnation(name)
            # after a deletion the backend could not make, a new incarnation on fresh Pulsar
            # topics: empty, from offset 0 (docs/pulsar-mapping.md, 'Deleting topics')
            incarnation = 0 if last is None else last + 1
            record = TopicRecord(
                name,
                partitions,
                dict(configs or {}),
                [0] * partitions,
                False,
                str(uuid.uuid4()),
                incarnation,
            )
            if self.admin is not None:
                try:
                    await self.admin.create_partitioned_topic(record.stored_name, partitions)
                except AdminError as exc:
                    if exc.status != 409:
                        raise
            # first creation record of the name in the log wins, on every member
            winner = await self.registry.create(record)
            if winner.topic_id != record.topic_id:
                raise TopicExists(name)
            log.info("created topic %s with %d partitions", name, partitions)
            return record

    async def delete(self, name: str) -> None:
        """Delete at once for every API (docs/pulsar-mapping.md, 'Deleting topics').

        First everything that could touch the partitions again is stopped (open logs, the
        group mirror, which would otherwise re-create a deleted topic by subscribing to it)
        and the groups' offsets go. With a cluster's admin API the Pulsar topics are then
        deleted and the record removed, so a topic created again under the name starts empty
        at offset 0. Without one (the embedded broker cannot delete stored messages) the
        record is retired in one metadata write: the topic is gone for Kafka clients on
        every gateway following the store, its Pulsar topics are listed as waiting for
        reclamation, and a topic created again under the name is a new incarnation on fresh
        Pulsar topics. Either way the offset-index checkpoints of the old partitions go."""
        async with self._lock:
            # in a cluster: the latest record and reclamation list, as create() does
            await self.metadata.catch_up()
            record = self.registry.get(name)
            if record is None:
                raise UnknownTopic(name)
            stored = _stored_partitions(record)
            for partition in stored:
                opened = self._logs.pop(partition, None)
                if opened is not None:
                    with contextlib.suppress(Exception):
                        await opened.close()
                await self.backend.close_topic(partition)  # its producers, not in a minute
            if self.forget_partitions is not None:
                await self.forget_partitions(_partitions(record))
            if self.admin is not None and self.capabilities.delete_storage:
                await self.admin.delete_partitioned_topic(record.stored_name)
                await self.registry.remove(name)
            else:
                await self.registry.retire(record)
            checkpoints = [
                key
                for partition in stored
                for prefix in (INDEX_PREFIX, ABORTED_PREFIX)
                for key, _ in self.metadata.children(f"{prefix}{partition}/")
            ]
            await asyncio.gather(*(self.metadata.delete(key) for key in checkpoints))
            log.info(
                "deleted topic %s (incarnation %d) and %d checkpoints",
                name,
                record.incarnation,
                len(checkpoints),
            )

    def waiting_for_reclamation(self) -> builtins.list[dict[str, object]]:
        """Old incarnations whose stored messages the backend could not delete."""
        return self.registry.waiting_for_reclamation()

    def stored_partition(self, partition: str) -> str:
        """The Pulsar topic that stores a Kafka partition (`<topic>-partition-<i>`) now: the
        name itself for a topic's first incarnation, `<topic>=<n>-partition-<i>` after."""
        topic, index = split_partition_topic(partition)
        record = self.registry.get(topic)
        return partition if record is None else partition_topic(record.stored_name, index)

    async def add_partitions(self, name: str, total: int) -> TopicRecord:
        async with self._lock:
            record = self.registry.get(name)
            if record is None:
                raise UnknownTopic(name)
            if total <= record.partitions:
                raise InvalidPartitions(
                    f"topic has {record.partitions} partitions; cannot go to {total}"
                )
            if self.admin is not None:
                await self.admin.update_partitions(record.stored_name, total)
            record.log_start += [0] * (total - len(record.log_start))
            record.partitions = total
            await self.registry.save(record)
            return record

    async def replace_configs(self, name: str, configs: dict[str, str]) -> TopicRecord:
        async with self._lock:
            record = self.registry.get(name)
            if record is None:
                raise UnknownTopic(name)
            record.configs = dict(configs)
            await self.registry.save(record)
            return record

    async def delete_records(self, name: str, index: int, before: int) -> int:
        """Move partition `index`'s log start up to `before` (never down): offsets below it
        are gone for Fetch and ListOffsets; the Pulsar messages stay until retention drops
        them (the embedded broker cannot delete; docs/pulsar-mapping.md)."""
        async with self._lock:
            record = self.registry.get(name)
            if record is None or not 0 <= index < record.partitions:
                raise UnknownTopic(name)
            record.log_start += [0] * (record.partitions - len(record.log_start))
            start = max(record.log_start[index], before)
            if start != record.log_start[index]:
                record.log_start[index] = start
                await self.registry.save(record)
            opened = self._logs.get(partition_topic(record.stored_name, index))
            if opened is not None:
                opened.log_start = start
            return start

    # ---- partitions ------------------------------------------------------------------------

    def opened(self, record: TopicRecord, index: int) -> PartitionLog | None:
        """The partition's log if it is open now (as `partition_of` would return it)."""
        opened = self._logs.get(partition_topic(record.stored_name, index))
        if opened is not None:
            opened.last_used = time.monotonic()
        return opened

    async def partition_of(self, record: TopicRecord, index: int) -> PartitionLog:
        """The open log of one partition of the record's incarnation, opening it (and
        catching up) on first use."""
        opened = self.opened(record, index)
        if opened is not None:
            return opened
        pulsar_name = partition_topic(record.stored_name, index)
        pending = self._opening.get(pulsar_name)
        if pending is not None:
            return await asyncio.shield(pending)
        current = self.registry.get(record.name)
        if current is None or current.incarnation != record.incarnation:
            # deleted while a request that had looked it up was on its way: opening it again
            # would hold a reader on (and, on Apache Pulsar, re-create) a deleted topic
            raise TopicDeleted(f"topic {record.name} was deleted")
        future: asyncio.Future[PartitionLog] = asyncio.get_running_loop().create_future()
        self._opening[pulsar_name] = future
        try:
            partition_log = PartitionLog(
                self.backend,
                self.metadata,
                pulsar_name,
                index_interval=self.index_interval,
                tail_records=self.tail_records,
                tail_bytes=self.tail_partition_bytes,
                tail_budget=self.tail_cache,
                batched=self.entry_format_of(record) != KAFKA.name,
            )
            partition_log.log_start = record.start_of(index)
            await partition_log.open()
            self._logs[pulsar_name] = partition_log
            future.set_result(partition_log)
            return partition_log
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            del self._opening[pulsar_name]

    def entry_format_of(self, record: TopicRecord) -> str:
        """The topic's `pulsar.entry.format`, else the gateway's; fixed at creation."""
        return topic_format(record.configs, self.default_entry_format).name

    @property
    def open_partitions(self) -> int:
        return len(self._logs)

    def open_partition_names(self) -> builtins.list[tuple[str, int]]:
        """(topic, partition index) of every open partition log."""
        return [_kafka_partition(name) for name in self._logs]

    async def release(self, served: Callable[[str, int], bool]) -> None:
        """Close the open partition logs `served(topic, index)` refuses: in a cluster, those
        another member serves now (docs/cluster.md). Opened again later, a log reads the
        partition back to its end first, so it counts what the other member appended."""
        for name, partition_log in list(self._logs.items()):
            topic, index = _kafka_partition(name)
            if not served(topic, index) and self._logs.get(name) is partition_log:
                del self._logs[name]
                with contextlib.suppress(Exception):
                    await partition_log.close()

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(10.0, self.idle_close_seconds / 2))
            now = time.monotonic()
            for name, partition_log in list(self._logs.items()):
                await partition_log.close_idle_cursors(self.idle_close_seconds)
                idle = now - partition_log.last_used > self.idle_close_seconds
                # a deleted topic's logs, left open by a fetch then or on another member
                if (idle or not self._current(name)) and not partition_log.busy:
                    del self._logs[name]
                    with contextlib.suppress(Exception):
                        await partition_log.close()

    def _current(self, stored_partition: str) -> bool:
        """Whether an open log belongs to a partition of a topic that exists now."""
        stored, index = split_partition_topic(stored_partition)
        name, incarnation = logical_topic(stored)
        record = self.registry.get(name)
        return (
            record is not None and record.incarnation == incarnation and index < record.partitions
        )


def _partitions(record: TopicRecord) -> list[str]:
    """A topic's partitions as the gateway names them (`<topic>-partition-<i>`): the keys of
    group offsets, whatever the incarnation."""
    return [partition_topic(record.name, index) for index in range(record.partitions)]


def _stored_partitions(record: TopicRecord) -> list[str]:
    """The Pulsar topics holding this incarnation's partitions."""
    return [partition_topic(record.stored_name, index) for index in range(record.partitions)]


def _kafka_partition(stored_partition: str) -> tuple[str, int]:
    """(topic, index) of an open log, whatever its incarnation."""
    stored, index = split_partition_topic(stored_partition)
    return logical_topic(stored)[0], index
