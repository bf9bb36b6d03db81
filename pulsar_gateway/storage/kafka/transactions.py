"""The transaction coordinator's state in the metadata store: one key per transactional id.

`kafka-txn/<quoted transactional id>` -> the id's producer id, epoch, timeout, state, start
time, partitions and pending offsets. Every transition is written before it is acted on (a
PrepareCommit before the first marker), so a restarted gateway reads back where each
transaction stood and finishes it (docs/transactions.md, "Restarts").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import CommittedOffset, TransactionState
from pulsar_gateway.storage.kafka.group_offsets import offset_record

PREFIX = "kafka-txn/"


def _encode(state: TransactionState) -> dict[str, Any]:
    return {
        "id": state.transactional_id,
        "producer_id": state.producer_id,
        "epoch": state.epoch,
        "timeout_ms": state.timeout_ms,
        "state": state.state,
        "start_ms": state.start_ms,
        "partitions": [list(p) for p in state.partitions],
        "groups": list(state.groups),
        "offsets": {
            group: {topic: offset_record(entry) for topic, entry in entries.items()}
            for group, entries in state.offsets.items()
        },
        "updated_ms": state.updated_ms,
    }


def _decode(value: dict[str, Any]) -> TransactionState:
    return TransactionState(
        value["id"],
        value["producer_id"],
        value["epoch"],
        value["timeout_ms"],
        value["state"],
        value["start_ms"],
        [(topic, index) for topic, index in value["partitions"]],
        list(value["groups"]),
        {
            group: {topic: CommittedOffset(**entry) for topic, entry in entries.items()}
            for group, entries in value["offsets"].items()
        },
        value.get("updated_ms", 0),
    )


class MetadataTransactionStore:
    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata

    @staticmethod
    def _key(transactional_id: str) -> str:
        return f"{PREFIX}{quote(transactional_id, safe='')}"

    def get(self, transactional_id: str) -> TransactionState | None:
        value = self.metadata.get(self._key(transactional_id))
        return _decode(value) if isinstance(value, dict) else None

    def all(self) -> list[TransactionState]:
        return [
            _decode(value) for _, value in self.metadata.items(PREFIX) if isinstance(value, dict)
        ]

    async def save(self, state: TransactionState) -> None:
        await self.metadata.put(self._key(state.transactional_id), _encode(state))
