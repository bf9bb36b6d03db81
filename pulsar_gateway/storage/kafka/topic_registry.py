"""Kafka topics the gateway knows: partition counts, configs and log start offsets.

pulsar-lite has no list-topics call and no partitioned-topic metadata (docs/backend.md,
"No admin API"),
so the registry in the metadata store is the source of truth for what exists.
A topic deleted through a cluster's admin API loses its record (`remove`). A record
with `deleted: true` is left by earlier versions, which "deleted" on the embedded
broker without deleting the data: a topic re-created under its name starts after
that old data instead of showing it again.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import TopicRecord

PREFIX = "kafka-topic/"


def _to_json(record: TopicRecord) -> dict[str, Any]:
    return {
        "partitions": record.partitions,
        "configs": record.configs,
        "log_start": record.log_start,
        "deleted": record.deleted,
        "topic_id": record.topic_id,
    }


class TopicRegistry:
    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata

    def get(self, name: str) -> TopicRecord | None:
        value = self.metadata.get(PREFIX + name)
        if value is None or value.get("deleted"):
            return None
        return self._record(name, value)

    def get_any(self, name: str) -> TopicRecord | None:
        value = self.metadata.get(PREFIX + name)
        return None if value is None else self._record(name, value)

    @staticmethod
    def _record(name: str, value: dict[str, Any]) -> TopicRecord:
        return TopicRecord(
            name=name,
            partitions=value["partitions"],
            configs=dict(value.get("configs", {})),
            log_start=list(value.get("log_start", [])),
            deleted=bool(value.get("deleted")),
            topic_id=value.get("topic_id", ""),
        )

    def all(self) -> list[TopicRecord]:
        records = []
        for key, value in self.metadata.items(PREFIX):
            if not value.get("deleted"):
                records.append(self._record(key[len(PREFIX) :], value))
        return sorted(records, key=lambda record: record.name)

    async def save(self, record: TopicRecord) -> None:
        await self.metadata.put(PREFIX + record.name, _to_json(record))

    async def create(self, record: TopicRecord) -> TopicRecord:
        """Store a new topic's record unless one is there; returns the record that stands
        (another member's, when it created the name first: docs/cluster.md, "Creating
        topics")."""
        value = await self.metadata.create_if_absent(PREFIX + record.name, _to_json(record))
        return self._record(record.name, value)

    async def remove(self, name: str) -> None:
        """Forget the topic entirely: only after its storage was really deleted, so that a
        topic re-created under the name starts at offset 0 on empty partitions."""
        await self.metadata.delete(PREFIX + name)
