"""Copy one source partition into the gateway, exactly once across restarts.

The records travel as record batches over the project's own Kafka codec (source_batches.py:
passed on as they are where they can be), one Produce of one batch at a time per partition,
while the next Fetch is already on its way (read_ahead.py).

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

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.tools.migration.errors import MigrationError
from pulsar_gateway.tools.migration.pace import Pace
from pulsar_gateway.tools.migration.read_ahead import ReadAhead
from pulsar_gateway.tools.migration.source_batches import Chunk, read_chunks, rest_of
from pulsar_gateway.tools.migration.translation import PartitionTranslation, partition_key
from pulsar_gateway.tools.migration.wire import KafkaWire

PRODUCE = 0
Address = tuple[str, int]

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
        source_leaders: dict[tuple[str, int], Address],
        target_leaders: dict[tuple[str, int], Address],
        progress: Callable[[str, int, int], None],  # (topic, partition, records)
        pace: Pace | None = None,  # the whole copy's bound on records a second
    ) -> None:
        self.name = name
        self.metadata = metadata
        self.source_leaders = source_leaders
        self.target_leaders = target_leaders
        self.progress = progress
        self.pace = pace or Pace(0)

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
        reader = await KafkaWire.connect(*self.source_leaders[(topic, partition)])
        writer = await KafkaWire.connect(*self.target_leaders[(topic, partition)])
        fetched = ReadAhead(read_chunks(reader, topic, partition, start, end))
        try:
            async with fetched:
                async for chunks in fetched:
                    for chunk in chunks:
                        behind = await self._write(writer, chunk, state, result, behind)
                    if time.monotonic() - saved_at >= SAVE_SECONDS:
                        await self._save(topic, partition, state)
                        saved_at = time.monotonic()
        finally:
            await reader.close()
            await writer.close()
        if behind:
            raise MigrationError(
                f"{topic}-{partition}: the target holds {behind} more records than the "
                "source has left to copy: it was written by something else"
            )
        await self._save(topic, partition, state)
        return result

    async def _write(
        self,
        writer: KafkaWire,
        chunk: Chunk,
        state: PartitionTranslation,
        result: PartitionResult,
        behind: int,
    ) -> int:
        """One chunk appended and recorded; its first `behind` records (found written by an
        interrupted run) only recorded. Returns how many are still found written."""
        topic, partition = result.topic, result.partition
        if behind:
            taken = min(behind, len(chunk.offsets))
            state.add_range(list(chunk.offsets[:taken]), state.next_target)
            result.recovered += taken
            self.progress(topic, partition, taken)
            if taken == len(chunk.offsets):
                return behind - taken
            chunk = rest_of(chunk, taken)
            behind -= taken
        await self.pace.take(len(chunk.offsets))
        base = await _append(writer, topic, partition, chunk)
        if base != state.next_target:
            await self._save(topic, partition, state)
            raise MigrationError(
                f"{topic}-{partition}: wrote at offset {base}, expected "
                f"{state.next_target}: something else writes to this partition"
            )
        state.add_run(chunk.offsets, base)
        result.copied += len(chunk.offsets)
        self.progress(topic, partition, len(chunk.offsets))
        return behind


async def _append(target: KafkaWire, topic: str, partition: int, chunk: Chunk) -> int:
    """Produce one batch (acks=all); the base offset the gateway gave it."""
    version = await target.version(PRODUCE, 3, 9)
    answer = await target.call(
        PRODUCE,
        version,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 60_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": chunk.batch}]}
            ],
        },
    )
    (found,) = answer["responses"][0]["partition_responses"]
    if found["error_code"]:
        raise MigrationError(
            f"{topic}-{partition}: the gateway refused a batch of {len(chunk.offsets)} records "
            f"with error {found['error_code']}"
        )
    return int(found["base_offset"])
