"""The two Kafka clusters of a migration, their admin side through aiokafka: topics,
partition counts, offsets, groups and where each partition's leader is. The records
themselves travel over the project's own codec (wire.py, source_batches.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.structs import OffsetAndMetadata

from pulsar_gateway.tools.migration.errors import MigrationError
from pulsar_gateway.tools.migration.wire import KafkaWire, partition_leaders


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

    async def leaders(self, topics: list[str]) -> dict[tuple[str, int], tuple[str, int]]:
        """(topic, partition) -> the address of its leader."""
        host, _, port = self.bootstrap.split(",")[0].strip().rpartition(":")
        wire = await KafkaWire.connect(host.strip("[]"), int(port))
        try:
            return await partition_leaders(wire, topics)
        finally:
            await wire.close()

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
