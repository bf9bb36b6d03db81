"""A started backend and metadata store on a test broker, with a fresh topic name: what a
partition log needs, for tests that drive one directly."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.metadata_store import MetadataStore


@contextlib.asynccontextmanager
async def partition_backend(
    broker_url: str, label: str
) -> AsyncIterator[tuple[PulsarBackend, MetadataStore, str]]:
    """(backend, loaded metadata store, Pulsar topic name), each name unique to this use;
    the backend is closed on the way out."""
    backend = PulsarBackend(broker_url)
    await backend.start()
    try:
        metadata = MetadataStore(backend, f"public/{label}-{uuid.uuid4().hex[:8]}")
        await metadata.load()
        yield backend, metadata, f"persistent://public/default/{label}-{uuid.uuid4().hex[:8]}"
    finally:
        await backend.close()
