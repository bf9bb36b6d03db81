"""Kafka-style topics over Pulsar: what handlers ask for, in one place.

Create, delete and grow topics, and hand out the open `PartitionLog` of a
partition. Partition logs open on demand and close when idle, so 1,000 topics of
10 partitions cost nothing until they are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from pulsar_gateway.gateway.backend.admin import (
    CLUSTER_CAPABILITIES,
    EMBEDDED_CAPABILITIES,
    AdminError,
    Capabilities,
    PulsarAdmin,
)
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.kafka.port import (
    InvalidPartitions,
    TopicExists,
    TopicRecord,
    UnknownTopic,
)
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.topic_registry import TopicRegistry

log = logging.getLogger("pulsar_gateway.storage.kafka.topics")


class TopicService:
    def __init__(
        self,
        backend: PulsarBackend,
        metadata: MetadataStore,
        admin: PulsarAdmin | None = None,
        index_interval: int = 1000,
        tail_records: int = 20000,
        idle_close_seconds: float = 60.0,
    ) -> None:
        self.backend = backend
        self.metadata = metadata
        self.registry = TopicRegistry(metadata)
        self.admin = admin
        self.capabilities: Capabilities = CLUSTER_CAPABILITIES if admin else EMBEDDED_CAPABILITIES
        self.index_interval = index_interval
        self.tail_records = tail_records
        self.idle_close_seconds = idle_close_seconds
        self._logs: dict[str, PartitionLog] = {}
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

    def list(self) -> list[TopicRecord]:
        return self.registry.all()

    async def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicRecord:
        async with self._lock:
            if self.registry.get(name) is not None:
                raise TopicExists(name)
            if partitions < 1:
                raise InvalidPartitions("partitions must be at least 1")
            previous = self.registry.get_any(name)
            log_start = []
            for index in range(partitions):
                if previous is not None and index < previous.partitions:
                    # embedded: the old data stays in storage; start after it
                    partition = await self.partition_of(previous, index)
                    log_start.append(partition.next_offset)
                else:
                    log_start.append(0)
            if self.admin is not None:
                try:
                    await self.admin.create_partitioned_topic(name, partitions)
                except AdminError as exc:
                    if exc.status != 409:
                        raise
            record = TopicRecord(
                name, partitions, dict(configs or {}), log_start, False, str(uuid.uuid4())
            )
            await self.registry.save(record)
            for index, start in enumerate(log_start):
                opened = self._logs.get(partition_topic(name, index))
                if opened is not None:
                    opened.log_start = start
            log.info("created topic %s with %d partitions", name, partitions)
            return record

    async def delete(self, name: str) -> None:
        async with self._lock:
            record = self.registry.get(name)
            if record is None:
                raise UnknownTopic(name)
            if self.admin is not None:
                await self.admin.delete_partitioned_topic(name)
            record.deleted = True
            await self.registry.save(record)
            for index in range(record.partitions):
                opened = self._logs.pop(partition_topic(name, index), None)
                if opened is not None:
                    await opened.close()
            log.info("deleted topic %s", name)

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
                await self.admin.update_partitions(name, total)
            record.log_start += [0] * (total - len(record.log_start))
            record.partitions = total
            await self.registry.save(record)
            return record

    async def set_configs(self, name: str, configs: dict[str, str]) -> None:
        record = self.registry.get(name)
        if record is None:
            raise UnknownTopic(name)
        record.configs.update(configs)
        await self.registry.save(record)

    # ---- partitions ------------------------------------------------------------------------

    async def partition_of(self, record: TopicRecord, index: int) -> PartitionLog:
        """The open log of one partition, opening it (and catching up) on first use."""
        pulsar_name = partition_topic(record.name, index)
        opened = self._logs.get(pulsar_name)
        if opened is not None:
            opened.last_used = time.monotonic()
            return opened
        pending = self._opening.get(pulsar_name)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[PartitionLog] = asyncio.get_running_loop().create_future()
        self._opening[pulsar_name] = future
        try:
            partition_log = PartitionLog(
                self.backend,
                self.metadata,
                pulsar_name,
                index_interval=self.index_interval,
                tail_records=self.tail_records,
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

    @property
    def open_partitions(self) -> int:
        return len(self._logs)

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(10.0, self.idle_close_seconds / 2))
            now = time.monotonic()
            for name, partition_log in list(self._logs.items()):
                await partition_log.close_idle_cursors(self.idle_close_seconds)
                if now - partition_log.last_used > self.idle_close_seconds:
                    del self._logs[name]
                    with contextlib.suppress(Exception):
                        await partition_log.close()
