"""The Kafka storage port's engines, each opened the same way, for the contract suite
(tests/integration/test_kafka_storage_contract.py) that holds every engine to one set of
promises: the in-memory twin the unit tests run the handlers on, and the Pulsar-backed
storage the gateway runs on, through pulsar-client and through its own wire client
(`[pulsar] client = "native"`).

An engine is opened as often as a test likes: each opening of a Pulsar engine is a new
backend and metadata store over the same broker and metadata namespace, as a restarted
gateway is, so what a test reads after reopening is what survived a restart. The memory
engine has nothing to restart: reopening it hands back the same storage.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from harness.kafka_memory_store import memory_storage
from pulsar_gateway.gateway.backend.native_writer import NATIVE, PULSAR_CLIENT, ClientChoice
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.handlers.kafka.port import KafkaStorage
from pulsar_gateway.storage.kafka.group_offsets import GroupOffsetStore
from pulsar_gateway.storage.kafka.producer_ids import MetadataProducerIds
from pulsar_gateway.storage.kafka.topics import TopicService
from pulsar_gateway.storage.kafka.transactions import MetadataTransactionStore

MEMORY = "memory"
ENGINES = (MEMORY, PULSAR_CLIENT, NATIVE)


class StorageEngine:
    """One engine, for one test: `open()` as often as the test reopens it."""

    def __init__(self, name: str, broker_url: str | None) -> None:
        self.name = name
        self.broker_url = broker_url
        self.namespace = f"public/contract-{uuid.uuid4().hex[:8]}"  # the metadata's
        self._memory = memory_storage() if name == MEMORY else None

    @property
    def restarts(self) -> bool:
        """Whether reopening is a restart (what the memory engine cannot show)."""
        return self._memory is None

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[KafkaStorage]:
        if self._memory is not None:
            yield self._memory
            return
        assert self.broker_url is not None, "a Pulsar engine needs a broker"
        client: ClientChoice = NATIVE if self.name == NATIVE else PULSAR_CLIENT
        backend = PulsarBackend(self.broker_url, client=client)
        await backend.start()
        topics: TopicService | None = None
        try:
            metadata = MetadataStore(backend, self.namespace)
            await metadata.load()
            # wired as the composition root (app.py) wires the gateway's
            topics = TopicService(backend, metadata, index_interval=10)
            topics.start()
            offsets = GroupOffsetStore(metadata)
            offsets.load()
            metadata.watch(offsets.apply_change)
            topics.forget_partitions = offsets.forget_partitions
            yield KafkaStorage(
                topics,
                offsets,
                MetadataProducerIds(metadata),
                transactions=MetadataTransactionStore(metadata),
            )
        finally:
            if topics is not None:
                await topics.close()
            await backend.close()
