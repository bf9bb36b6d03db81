"""Group configs (Kafka's GROUP config resource) in the metadata store: one key per group
that sets any, `kafka-group-config/<group>` (percent-quoted) -> {name: value}."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from pulsar_gateway.gateway.metadata_store import MetadataStore

PREFIX = "kafka-group-config/"


class MetadataGroupConfigs:
    """The Pulsar implementation of the port's GroupConfigStore."""

    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata

    def get(self, group_id: str) -> Mapping[str, str]:
        found = self.metadata.get(PREFIX + quote(group_id, safe=""))
        if not isinstance(found, dict):
            return {}
        return {str(key): str(value) for key, value in found.items()}

    async def replace(self, group_id: str, configs: Mapping[str, str]) -> None:
        key = PREFIX + quote(group_id, safe="")
        if configs:
            await self.metadata.put(key, dict(configs))
        elif self.metadata.get(key) is not None:
            await self.metadata.delete(key)
