"""Producer ids for idempotent producers, from a counter in the metadata store.

The counter is durable, so an id is never handed out twice, across gateway restarts too.
One lock per store serialises the read-increment-write within this process.
"""

from __future__ import annotations

import asyncio

from pulsar_gateway.gateway.metadata_store import MetadataStore

NEXT_ID_KEY = "kafka-producer-id/next"
FIRST_ID = 1000


class MetadataProducerIds:
    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            producer_id = int(self.metadata.get(NEXT_ID_KEY, FIRST_ID))
            await self.metadata.put(NEXT_ID_KEY, producer_id + 1)
            return producer_id
