"""Opening a partition log on the embedded broker: ready once it has caught up, not later."""

from __future__ import annotations

import asyncio

import pytest

from harness.partition_backend import partition_backend
from pulsar_gateway.gateway.messages import OutMessage
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
