"""Copy one source partition into the gateway, exactly once across restarts.

Before anything is written, the partition's translation record says where copying
starts (source offset) and where it lands (the target's end). Every write is checked
against it: the base offset the gateway answers must be the next target offset, or
something else is writing to the partition and the copy stops. The record is saved
about once a second; a run killed in between finds the target longer than recorded,
and that difference is exactly the next source records already written (the copy is
the partition's only writer and writes in order), so they are recorded, not rewritten.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.tools.migration.kafka_side import MigrationError, read_partition, write_batch
from pulsar_gateway.tools.migration.translation import PartitionTranslation, partition_key

SAVE_SECONDS = 1.0


@dataclass
class PartitionResult:
    topic: str
    partition: int
    copied: int = 0  # written by this run
    recovered: int = 0  # found written by an earlier, interrupted run
    skipped_by_retention: int = 0  # gone from the source before they were copied
    error: str | None = None


class PartitionCopier:
    def __init__(
        self,
        name: str,
        metadata: MetadataStore,
        source_bootstrap: str,
        producer: AIOKafkaProducer,
        progress: Callable[[int], None],
    ) -> None:
        self.name = name
        self.metadata = metadata
        self.source_bootstrap = source_bootstrap
        self.producer = producer
        self.progress = progress

    def state_of(self, topic: str, partition: int) -> PartitionTranslation | None:
        saved = self.metadata.get(partition_key(self.name, topic, partition))
        return None if saved is None else PartitionTranslation.from_json(saved)

    async def _save(self, topic: str, partition: int, state: PartitionTranslation) -> None:
        await self.metadata.put(partition_key(self.name, topic, partition), state.to_json())

    async def copy(
        self, topic: str, partition: int, source: tuple[int, int], target_end: int
    ) -> PartitionResult:
        result = PartitionResult(topic, partition)
        low, end = source
        state = self.state_of(topic, partition)
        if state is None:
            state = PartitionTranslation(next_source=low, next_target=target_end)
            await self._save(topic, partition, state)
        behind = target_end - state.next_target
        if behind < 0:
            raise MigrationError(
                f"{topic}-{partition}: the target ends at {target_end}, before the "
                f"{state.next_target} this migration already wrote"
            )
        start = state.next_source
        if start < low:
            result.skipped_by_retention = low - start
            start = low
        saved_at = time.monotonic()
        tp = TopicPartition(topic, partition)
        async for chunk in read_partition(self.source_bootstrap, tp, start, end):
            index = 0
            if behind:
                taken = min(behind, len(chunk))
                state.add_range([r.offset for r in chunk[:taken]], state.next_target)
                behind -= taken
                index = taken
                result.recovered += taken
                self.progress(taken)
            while index < len(chunk):
                count, base = await write_batch(self.producer, topic, partition, chunk[index:])
                if base != state.next_target:
                    await self._save(topic, partition, state)
                    raise MigrationError(
                        f"{topic}-{partition}: wrote at offset {base}, expected "
                        f"{state.next_target}: something else writes to this partition"
                    )
                state.add_range([r.offset for r in chunk[index : index + count]], base)
                index += count
                result.copied += count
                self.progress(count)
            if time.monotonic() - saved_at >= SAVE_SECONDS:
                await self._save(topic, partition, state)
                saved_at = time.monotonic()
        if behind:
            raise MigrationError(
                f"{topic}-{partition}: the target holds {behind} more records than the "
                "source has left to copy: it was written by something else"
            )
        await self._save(topic, partition, state)
        return result
