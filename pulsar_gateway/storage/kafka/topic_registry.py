"""Kafka topics the gateway knows: partition counts, configs and log start offsets.

pulsar-lite has no list-topics call and no partitioned-topic metadata (docs/backend.md,
"No admin API"), so the registry in the metadata store is the source of truth for what
exists. A deleted topic loses its record at once, on every gateway that follows the store.
Where the backend cannot delete (the embedded broker) two more things are kept
(docs/pulsar-mapping.md, 'Deleting topics'):

- `kafka-topic-incarnation/<name>`: the name's last incarnation, so that a topic created
  again under the name is stored on fresh Pulsar topics (`<name>=<n>`) and starts empty;
- `kafka-topic-reclaim/<topic>`: the name's old incarnations, whose Pulsar topics hold
  stored messages that wait for a backend that can delete them (`pulsar-gateway topics
  pending-deletion` lists them). They are kept as runs `[first, last, partitions,
  deleted_ms]` of consecutive incarnations with one partition count, so a topic deleted
  and created again in a loop costs the metadata store one key of constant size.

A record with `deleted: true` is left by earlier versions, which "deleted" on the embedded
broker without deleting the data; it counts as absent, and as incarnation 0 waiting for
reclamation when the name is created again.
"""

from __future__ import annotations

import time
from typing import Any

from pulsar_gateway.gateway.metadata_records import GONE
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.gateway.topic_names import incarnation_topic
from pulsar_gateway.handlers.kafka.port import TopicRecord

PREFIX = "kafka-topic/"
INCARNATION_PREFIX = "kafka-topic-incarnation/"
RECLAIM_PREFIX = "kafka-topic-reclaim/"


def _to_json(record: TopicRecord) -> dict[str, Any]:
    value = {
        "partitions": record.partitions,
        "configs": record.configs,
        "log_start": record.log_start,
        "deleted": record.deleted,
        "topic_id": record.topic_id,
    }
    if record.incarnation:
        value["incarnation"] = record.incarnation
    return value


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
            incarnation=int(value.get("incarnation", 0)),
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

    # ---- incarnations (backends that cannot delete) ------------------------------------------

    def last_incarnation(self, name: str) -> int | None:
        """The incarnation the name's last deleted topic had; None if none was deleted."""
        value = self.metadata.get(INCARNATION_PREFIX + name)
        return None if value is None else int(value["incarnation"])

    async def retire(self, record: TopicRecord) -> None:
        """The topic is gone for Kafka clients; its Pulsar topics wait for reclamation. One
        group commit: no member ever sees the record gone without the incarnation kept.
        Also for a record an earlier version left marked deleted (its data is incarnation 0).
        The caller has caught the store up, so the runs read here are the latest."""
        key = RECLAIM_PREFIX + record.name
        runs = [list(run) for run in (self.metadata.get(key) or {}).get("runs", [])]
        now = int(time.time() * 1000)
        last = runs[-1] if runs else None
        if last is not None and last[1] + 1 == record.incarnation and last[2] == record.partitions:
            last[1], last[3] = record.incarnation, now
        elif last is None or last[1] < record.incarnation:
            runs.append([record.incarnation, record.incarnation, record.partitions, now])
        await self.metadata.put_many(
            {
                INCARNATION_PREFIX + record.name: {"incarnation": record.incarnation},
                key: {"runs": runs},
                PREFIX + record.name: GONE,
            }
        )

    def waiting_for_reclamation(self) -> list[dict[str, Any]]:
        """The old incarnations whose stored messages the backend could not delete: one row
        per run of consecutive incarnations with the same partition count."""
        rows = []
        for key, value in self.metadata.items(RECLAIM_PREFIX):
            name = key[len(RECLAIM_PREFIX) :]
            for first, last, partitions, deleted_ms in value.get("runs", []):
                rows.append(
                    {
                        "topic": name,
                        "incarnations": [first, last],
                        "partitions": partitions,
                        "pulsar_topics": [
                            incarnation_topic(name, first),
                            incarnation_topic(name, last),
                        ],
                        "deleted_ms": deleted_ms,
                    }
                )
        return rows
