"""Opening a partition log on the embedded broker: ready once it has caught up, not later."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from harness.partition_backend import partition_backend
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.storage.kafka import partition_log
from pulsar_gateway.storage.kafka.offset_checkpoints import INDEX_PREFIX
from pulsar_gateway.storage.kafka.partition_log import PartitionLog

RECORDS = 2_500  # three checkpoints (0, 1000, 2000) and 500 records after the last


def test_a_reopened_partition_is_ready_once_caught_up_without_waiting_out_a_pause(
    broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tailer numbers what follows the last checkpoint while `open` asks the broker
    whether anything is left (a new reader's first answer takes some 10 ms). What it numbered
    meanwhile must end the catch-up wait at once: each open used to wait out a whole pause
    (0.5 s) for data that never came, which put 1.5 s in front of a consumer's first fetch of
    three partitions after a restart. With pauses of a minute, only an open that waits for
    nothing returns inside the deadline."""

    async def scenario() -> None:
        async with partition_backend(broker_url, "open") as (backend, metadata, topic):
            await backend.send(topic, [OutMessage(b"r%d" % i) for i in range(RECORDS)])
            first = PartitionLog(backend, metadata, topic, index_interval=1000)
            await asyncio.wait_for(first.open(), 60)  # numbers all 2,500 from the start
            assert first.next_offset == RECORDS
            await first.close()
            assert len(metadata.children(f"{INDEX_PREFIX}{topic}/")) == 3

            monkeypatch.setattr(partition_log, "CATCH_UP_FIRST_PAUSE", 60.0)
            monkeypatch.setattr(partition_log, "CATCH_UP_MAX_PAUSE", 60.0)
            for _ in range(3):
                reopened = PartitionLog(backend, metadata, topic, index_interval=1000)
                await asyncio.wait_for(reopened.open(), 20)
                assert reopened.next_offset == RECORDS
                entries = await reopened.read(RECORDS - 1, 1 << 20)
                assert [e.message.payload for e in entries] == [b"r%d" % (RECORDS - 1)]
                await reopened.close()

    asyncio.run(scenario())


class HeldStore(MetadataStore):
    """The real store, whose writes wait until the test lets them go: a checkpoint's save
    is then certainly under way when its partition closes."""

    def __init__(self, backend: PulsarBackend, namespace: str) -> None:
        super().__init__(backend, namespace)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def put(self, key: str, value: Any) -> None:
        self.entered.set()
        await self.release.wait()
        await super().put(key, value)


def test_a_closing_partition_finishes_saving_its_checkpoints(broker_url: str) -> None:
    """The gateway closes its partitions and then its metadata store. A checkpoint save
    still under way when the store closed was lost ("offset checkpoint failed:
    AlreadyClosed"), and the next open counted from the checkpoint before; close now waits
    for it."""

    async def scenario() -> None:
        async with partition_backend(broker_url, "close") as (backend, _, topic):
            namespace = f"public/close-{uuid.uuid4().hex[:8]}"
            held = HeldStore(backend, namespace)
            await held.load()
            await backend.send(topic, [OutMessage(b"r%d" % i) for i in range(10)])
            log = PartitionLog(backend, held, topic, index_interval=1000)
            opening = asyncio.ensure_future(log.open())
            await asyncio.wait_for(held.entered.wait(), 30)  # the checkpoint at offset 0
            closing = asyncio.ensure_future(log.close())
            await asyncio.wait({opening, closing}, timeout=0.2)
            assert not closing.done(), "close did not wait for the checkpoint's save"
            held.release.set()
            await asyncio.wait_for(closing, 30)
            opening.cancel()
            await held.close()

            reread = MetadataStore(backend, namespace)
            await reread.load()
            assert [key for key, _ in reread.children(f"{INDEX_PREFIX}{topic}/")] == [
                f"{INDEX_PREFIX}{topic}/{0:020d}"
            ]
            await reread.close()

    asyncio.run(scenario())
