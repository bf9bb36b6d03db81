"""Client quotas in the metadata store: one key per entity that has any quota set.

`kafka-quota/<quoted JSON of the entity>` -> {"entity": [[type, name or null], ...],
"values": {key: value}}. An entity whose last quota is removed loses its key. Every
cluster member follows the store, so a quota set on one applies on all (each measures its
own traffic against it: docs/quotas.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import QuotaEntity

FOLDER = "kafka-quota/"


def _key(entity: QuotaEntity) -> str:
    return FOLDER + quote(json.dumps([list(part) for part in entity]), safe="")


def _entity(value: dict[str, Any]) -> QuotaEntity:
    return tuple((kind, name) for kind, name in value["entity"])


class MetadataClientQuotas:
    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata

    @property
    def empty(self) -> bool:
        return not self.metadata.children(FOLDER)

    def lookup(self, entity: QuotaEntity) -> Mapping[str, float] | None:
        value = self.metadata.get(_key(entity))
        return value["values"] if isinstance(value, dict) else None

    def entries(self) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
        return [
            (_entity(value), value["values"])
            for _, value in self.metadata.children(FOLDER)
            if isinstance(value, dict)
        ]

    async def alter(self, entity: QuotaEntity, values: Mapping[str, float | None]) -> None:
        now = dict(self.lookup(entity) or {})
        for key, value in values.items():
            if value is None:
                now.pop(key, None)
            else:
                now[key] = value
        if now:
            await self.metadata.put(
                _key(entity), {"entity": [list(part) for part in entity], "values": now}
            )
        elif self.lookup(entity) is not None:
            await self.metadata.delete(_key(entity))
