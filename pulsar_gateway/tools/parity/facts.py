"""What the parity job must know before Spark starts, gathered on the driver.

Offsets ranges of both sides (ends as a Fetch reports them), the gateway's partition
counts and offset-index checkpoints (where a Pulsar reader must start to number
messages as the gateway does), the migration's translation runs, and each group's
committed offsets on both sides. All of it is small: per partition, never per record.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.storage.kafka.offset_checkpoints import INDEX_PREFIX
from pulsar_gateway.tools.gateway_link import GatewayLink
from pulsar_gateway.tools.migration.kafka_side import KafkaCluster
from pulsar_gateway.tools.migration.translation import PartitionTranslation, partition_key


@dataclass
class GroupDrift:
    group: str
    topic: str
    partition: int
    source: int
    expected: int
    target: int | None

    @property
    def drift(self) -> int | None:
        return None if self.target is None else self.target - self.expected

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "source_committed": self.source,
            "expected_target": self.expected,
            "target_committed": self.target,
            "drift": self.drift,
        }


@dataclass
class Facts:
    topics: list[str]
    source_ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    target_ranges: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    translations: dict[tuple[str, int], PartitionTranslation] = field(default_factory=dict)
    pulsar_specs: list[dict[str, Any]] = field(default_factory=list)
    groups: list[GroupDrift] = field(default_factory=list)

    def only(self, keys: set[tuple[str, int]]) -> Facts:
        """The same facts for these partitions alone (groups left out)."""
        return Facts(
            self.topics,
            {k: v for k, v in self.source_ranges.items() if k in keys},
            {k: v for k, v in self.target_ranges.items() if k in keys},
            {k: v for k, v in self.translations.items() if k in keys},
            [s for s in self.pulsar_specs if (s["topic"], s["partition"]) in keys],
        )

    def runs(self) -> list[tuple[str, int, int, int, int]]:
        return [
            (topic, partition, source, target, length)
            for (topic, partition), state in sorted(self.translations.items())
            for source, target, length in state.runs
        ]

    def aligns(self) -> list[tuple[str, int, int, int]]:
        """Partitions copied without a translation table: the two logs' starts align."""
        return [
            (topic, partition, start, self.target_ranges.get((topic, partition), (0, 0))[0])
            for (topic, partition), (start, _end) in sorted(self.source_ranges.items())
            if (topic, partition) not in self.translations
        ]

    def expected_target(self, topic: str, partition: int, committed: int) -> int:
        state = self.translations.get((topic, partition))
        if state is not None:
            return state.next_target_for(committed)
        source_start = self.source_ranges[(topic, partition)][0]
        target_start = self.target_ranges.get((topic, partition), (0, 0))[0]
        return target_start + committed - source_start


async def gather(
    source_bootstrap: str,
    target_bootstrap: str,
    link: GatewayLink,
    name: str,
    names: list[str],
    topic_pattern: str | None,
    group_pattern: str | None,
) -> Facts:
    source = KafkaCluster(source_bootstrap, "pulsar-gateway-parity")
    target = KafkaCluster(target_bootstrap, "pulsar-gateway-parity")
    backend = PulsarBackend(link.service_url)
    await source.start()
    await target.start()
    await backend.start()
    metadata = MetadataStore(backend, link.metadata_namespace)
    try:
        topics = await source.topics(names, topic_pattern)
        facts = Facts(topics)
        counts = await source.partition_counts(topics)
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        for tp, pair in (await source.offset_range(tps)).items():
            facts.source_ranges[(tp.topic, tp.partition)] = pair
        present = set(await target.admin.list_topics())
        target_counts = await target.partition_counts([t for t in topics if t in present])
        target_tps = [TopicPartition(t, p) for t, n in target_counts.items() for p in range(n)]
        for tp, pair in (await target.offset_range(target_tps)).items():
            facts.target_ranges[(tp.topic, tp.partition)] = pair

        await metadata.load()
        for topic, partition in facts.source_ranges:
            saved = metadata.get(partition_key(name, topic, partition))
            if saved is not None:
                facts.translations[(topic, partition)] = PartitionTranslation.from_json(saved)
        for (topic, partition), (start, end) in sorted(facts.target_ranges.items()):
            facts.pulsar_specs.append(_pulsar_spec(metadata, link, topic, partition, start, end))
        if group_pattern is not None:
            await _group_drift(facts, source, target, group_pattern, tps)
        return facts
    finally:
        await metadata.close()  # a snapshot it started must not outlive the client
        await backend.close()
        await target.close()
        await source.close()


def _pulsar_spec(
    metadata: MetadataStore, link: GatewayLink, topic: str, partition: int, start: int, end: int
) -> dict[str, Any]:
    """Where to start reading a partition topic: the last checkpoint at or before `start`."""
    pulsar_name = partition_topic(link.pulsar_name(topic), partition)
    folder = f"{INDEX_PREFIX}{pulsar_name}/"
    points = sorted((int(key[len(folder) :]), value) for key, value in metadata.children(folder))
    position = bisect.bisect_right([offset for offset, _ in points], start) - 1
    spec: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "pulsar_topic": pulsar_name,
        "start": start,
        "end": end,
        "checkpoint_offset": 0,
        "checkpoint_id": None,
        "resends": {},
    }
    if position >= 0:
        offset, value = points[position]
        spec.update(checkpoint_offset=offset, checkpoint_id=value["id"], resends=value["resends"])
    return spec


async def _group_drift(
    facts: Facts,
    source: KafkaCluster,
    target: KafkaCluster,
    pattern: str,
    tps: list[TopicPartition],
) -> None:
    for group in await source.groups(pattern):
        committed = await source.committed(group, tps)
        if not committed:
            continue
        on_target = await target.committed(group, list(committed))
        for tp, offset in sorted(committed.items()):
            facts.groups.append(
                GroupDrift(
                    group,
                    tp.topic,
                    tp.partition,
                    offset,
                    facts.expected_target(tp.topic, tp.partition, offset),
                    on_target.get(tp),
                )
            )
