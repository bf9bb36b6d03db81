"""A producer's offset comes as soon as the reader holds its message, not after the pause.

The tailer's reader pauses before draining (COALESCE_SECONDS) so that a steady stream costs
one wake-up per group instead of one per message. An append waits for the tailer to number
what it stored; the pause used to stand between the two on every append, about 1 ms of an
acks=all produce's 2-3 ms. `ReaderStream.hurry` ends it. With pauses of a minute, only
appends and reads that skip the pause finish inside the deadlines below.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from harness.partition_backend import partition_backend
from harness.waiting import async_wait_until
from pulsar_gateway.gateway.backend import reader_stream
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.storage.kafka.partition_log import PartitionLog

LONG_PAUSE = 60.0
DEADLINE = 20.0


def test_appends_are_numbered_without_waiting_out_the_readers_pause(
    broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_stream, "COALESCE_SECONDS", LONG_PAUSE)

    async def scenario() -> None:
        async with partition_backend(broker_url, "prompt") as (backend, metadata, topic):
            log = PartitionLog(backend, metadata, topic)
            try:
                await asyncio.wait_for(log.open(), DEADLINE)
                offsets = []
                for i in range(10):
                    records = [OutMessage(b"batch %d record %d" % (i, r)) for r in range(3)]
                    offsets.append(await asyncio.wait_for(log.append(records), DEADLINE))
                assert offsets == list(range(0, 30, 3))
                assert log.next_offset == 30
            finally:
                await log.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("when", ["before-arrival", "during-pause"])
def test_hurry_passes_a_message_on_without_the_pause(
    broker_url: str, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Asked before the message reaches the reader, `hurry` skips the next pause (a send
    receipt often comes before the reader's copy); asked during the pause, it ends it."""

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        topic = f"persistent://public/default/hurry-{uuid.uuid4().hex[:8]}"
        await backend.send(topic, [OutMessage(b"created")])
        stream = await backend.open_reader(topic, reader_stream.EARLIEST)
        try:
            assert [m.payload for m in await stream.read_batch(10, timeout=DEADLINE)] == [
                b"created"
            ]
            monkeypatch.setattr(reader_stream, "COALESCE_SECONDS", LONG_PAUSE)
            read = asyncio.ensure_future(stream.read_batch(10, timeout=DEADLINE))
            await asyncio.sleep(0)  # the read drained nothing and waits for the next message
            if when == "before-arrival":
                stream.hurry()
            await backend.send(topic, [OutMessage(b"second")])
            if when == "during-pause":
                # the private state is the point here: the read holds the message, pausing
                await async_wait_until(lambda: stream._pause is not None, DEADLINE)
                stream.hurry()
            batch = await asyncio.wait_for(read, DEADLINE)
            assert [m.payload for m in batch] == [b"second"]
            if when == "during-pause":
                # the pause was cut short for a message that had not reached the reader yet
                # (its receipt came first): it comes without waiting out the next pause
                read = asyncio.ensure_future(stream.read_batch(10, timeout=DEADLINE))
                await asyncio.sleep(0)  # drained nothing: waits for the message
                await backend.send(topic, [OutMessage(b"third")])
                batch = await asyncio.wait_for(read, DEADLINE)
                assert [m.payload for m in batch] == [b"third"]
        finally:
            await stream.close()
            await backend.close()

    asyncio.run(scenario())
