"""Producer ids for idempotent producers, from a counter in the metadata store.

The counter is durable, so an id is never handed out twice, across gateway restarts too.
One lock per store serialises the read-increment-write within this process.

In a cluster (docs/cluster.md, "Producer ids") each member counts on its own key,
`kafka-producer-id/node/<node id>`, which only it writes, and hands out
`counter * 1024 + node id`: ids of two members never meet, and no member waits for
another. The counters start above every id the single-gateway counter gave, so a gateway
that joins a cluster never repeats one of its earlier ids.
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


NODE_ID_SPACE = 1024  # node ids of cluster members are below this (config.py checks it)


def node_counter_key(node_id: int) -> str:
    return f"kafka-producer-id/node/{node_id}"


class NodeProducerIds:
    """Producer ids of one cluster member: `counter * NODE_ID_SPACE + node_id`."""

    def __init__(self, metadata: MetadataStore, node_id: int) -> None:
        if not 0 <= node_id < NODE_ID_SPACE:
            raise ValueError(f"a cluster member's node id must be below {NODE_ID_SPACE}")
        self.metadata = metadata
        self.node_id = node_id
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            key = node_counter_key(self.node_id)
            single = int(self.metadata.get(NEXT_ID_KEY, FIRST_ID))  # the one-gateway counter
            floor = -(-single // NODE_ID_SPACE)  # every id it gave is below floor * 1024
            counter = max(int(self.metadata.get(key, 0)), floor)
            await self.metadata.put(key, counter + 1)
            return counter * NODE_ID_SPACE + self.node_id
