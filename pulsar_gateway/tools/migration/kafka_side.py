"""The two Kafka clusters of a migration, through aiokafka.

The source is read with a consumer per partition (read_committed, so aborted
transactions are not copied); the target is the gateway, written with one batch per
Produce request so that a batch's records get consecutive offsets from its base.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.structs import OffsetAndMetadata

MAX_BATCH_BYTES = 1024 * 1024
MAX_REQUEST_BYTES = 16 * 1024 * 1024


class MigrationError(Exception):
    """A migration cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class SourceRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


class KafkaCluster:
    """Admin, metadata and offsets of one cluster (source or target)."""

    def __init__(self, bootstrap: str, client_id: str = "pulsar-gateway-migrate") -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
        self._offsets = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False
        )

    async def start(self) -> None:
        try:
            await self.admin.start()
            await self._offsets.start()
        except KafkaError as exc:
            raise MigrationError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc

    async def close(self) -> None:
        await self._offsets.stop()
        await self.admin.close()

    async def topics(self, names: Iterable[str], pattern: str | None) -> list[str]:
        """The named topics plus those matching `pattern`; internal `__` topics never."""
        present = set(await self.admin.list_topics())
        wanted = set(names)
        missing = sorted(wanted - present)
        if missing:
            raise MigrationError(f"not on {self.bootstrap}: {', '.join(missing)}")
        if pattern:
            regex = re.compile(pattern)
            wanted |= {name for name in present if regex.fullmatch(name)}
        return sorted(name for name in wanted if not name.startswith("__"))

    async def partition_counts(self, topics: list[str]) -> dict[str, int]:
        if not topics:
            return {}
        described = await self.admin.describe_topics(topics)
        counts = {}
        for item in described:
            if item.get("error_code"):
                raise MigrationError(f"describing {item['topic']}: error {item['error_code']}")
            counts[item["topic"]] = len(item["partitions"])
        return counts

    async def offset_range(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, end) per partition."""
        if not tps:
            return {}
        starts = await self._offsets.beginning_offsets(tps)
        ends = await self._high_watermarks(tps)
        return {tp: (starts[tp], ends[tp]) for tp in tps}

    async def _high_watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Ends as a Fetch reports them: some brokers (tansu) answer ListOffsets(latest)
        with the last batch's base offset, a Fetch's high watermark is right."""
        listed = await self._offsets.end_offsets(tps)
        consumer = self._offsets
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, max(0, listed[tp] - 1))
        deadline = asyncio.get_running_loop().time() + 30
        while any(consumer.highwater(tp) is None for tp in tps):
            if asyncio.get_running_loop().time() > deadline:
                raise MigrationError(f"no fetch answer from {self.bootstrap} for 30 s")
            await consumer.getmany(timeout_ms=200, max_records=1)
        found = {tp: max(listed[tp], consumer.highwater(tp) or 0) for tp in tps}
        consumer.unsubscribe()
        return found

    async def create_topics(
        self, counts: dict[str, int], configs: dict[str, str] | None = None
    ) -> list[str]:
        """Create what is missing with the given partition counts; an existing topic must
        have the same count. Returns the names created."""
        present = set(await self.admin.list_topics())
        existing = [name for name in counts if name in present]
        if existing:
            have = await self.partition_counts(existing)
            wrong = [
                f"{n} ({have[n]} partitions, source has {counts[n]})"
                for n in existing
                if have[n] != counts[n]
            ]
            if wrong:
                raise MigrationError("target topics differ from the source: " + ", ".join(wrong))
        new = [
            NewTopic(name, count, 1, topic_configs=dict(configs or {}))
            for name, count in counts.items()
            if name not in present
        ]
        if new:
            try:
                await self.admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass
        return [topic.name for topic in new]

    async def groups(self, pattern: str | None) -> list[str]:
        listed = await self.admin.list_consumer_groups()
        names = sorted(group for group, _protocol in listed)
        if pattern:
            regex = re.compile(pattern)
            names = [name for name in names if regex.fullmatch(name)]
        return names

    async def _group_client(self, group: str) -> AIOKafkaConsumer:
        """A consumer that only reads or writes the group's commits: it never joins."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id=self.client_id,
            group_id=group,
            enable_auto_commit=False,
        )
        await consumer.start()
        return consumer

    async def committed(self, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (next record to read) on these partitions."""
        consumer = await self._group_client(group)
        try:
            found = {}
            for tp in tps:
                offset = await consumer.committed(tp)
                if offset is not None and offset >= 0:
                    found[tp] = offset
            return found
        finally:
            await consumer.stop()

    async def commit(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit as a group with no members (Kafka's 'simple' commit, generation -1)."""
        consumer = await self._group_client(group)
        try:
            consumer.assign(list(offsets))
            await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
        finally:
            await consumer.stop()


async def read_partition(
    bootstrap: str, tp: TopicPartition, start: int, end: int, chunk: int = 5000
) -> AsyncIterator[list[SourceRecord]]:
    """Records of one partition from `start` up to (not including) `end`, in order."""
    if start >= end:
        return
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="pulsar-gateway-migrate",
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        while position < end:
            got = await consumer.getmany(tp, timeout_ms=5000, max_records=chunk)
            records = got.get(tp, [])
            if not records:
                # transaction markers and compacted gaps have no records: trust the position
                position = await consumer.position(tp)
                if position >= end:
                    return
                continue
            out = []
            for record in records:
                if record.offset >= end:
                    break
                out.append(
                    SourceRecord(
                        record.offset,
                        record.key,
                        record.value,
                        tuple(record.headers),
                        record.timestamp,
                    )
                )
            if out:
                yield out
            position = records[-1].offset + 1
    finally:
        await consumer.stop()


def new_producer(bootstrap: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="pulsar-gateway-migrate",
        acks="all",
        max_batch_size=MAX_BATCH_BYTES,
        max_request_size=MAX_REQUEST_BYTES,
        linger_ms=0,
        request_timeout_ms=60000,
    )


async def write_batch(
    producer: AIOKafkaProducer, topic: str, partition: int, records: list[SourceRecord]
) -> tuple[int, int]:
    """Append as many of `records` as fit one Produce request, in order.

    Returns (how many were written, the base offset they got)."""
    batch = producer.create_batch()
    taken = 0
    for record in records:
        added: Any = batch.append(
            key=record.key,
            value=record.value,
            timestamp=record.timestamp,
            headers=list(record.headers),
        )
        if added is None:
            break
        taken += 1
    if taken == 0:
        raise MigrationError(f"a record of {topic}-{partition} at {records[0].offset} is too big")
    batch.close()
    future = await producer.send_batch(batch, topic, partition=partition)
    metadata = await future
    return taken, metadata.offset
