"""Issue 31: the partition log a new owner restores an idempotent producer from must reach
the log's true end on the broker, not stop where its tailer happens to be.

A worker killed with -9 left a partition whose new owner answered the producer's next batch
OUT_OF_ORDER_SEQUENCE_NUMBER ("expected sequence 40, restored from the log"): its view of the
log lacked the batch the old owner had acknowledged last, and librdkafka's resend put a
record in the log twice. Here the new owner's log is open (as a log opened earlier stays
open) while its reader gets nothing, as a pulsar-lite reader does when the broker stops
dispatching to it; another log, the old owner, appends and acknowledges five batches.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from harness.partition_backend import partition_backend
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.handlers.kafka.port import ProducerStamp
from pulsar_gateway.storage.kafka.partition_log import PartitionLog

PRODUCER = 1025


class StalledReader:
    """The log's reader passes nothing on (each read waits out its timeout) until the tailer
    reopens it: pulsar-lite's dispatch stall (docs/backend.md, "Readers skip or stall")."""

    def __init__(self, log: PartitionLog) -> None:
        stream: Any = log._stream
        self.cured = asyncio.Event()
        self._read, self._reopen = stream.read_batch, stream.reopen
        stream.read_batch, stream.reopen = self.read_batch, self.reopen

    async def read_batch(self, *args: Any, timeout: float, **kwargs: Any) -> list[Any]:
        if not self.cured.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cured.wait(), timeout)
            return []
        return await self._read(*args, timeout=timeout, **kwargs)

    async def reopen(self) -> None:
        self.cured.set()
        await self._reopen()


def _stamp(sequence: int) -> ProducerStamp:
    return ProducerStamp(PRODUCER, 0, sequence, sequence)


def test_a_new_owner_reads_the_log_to_its_end_before_restoring_a_producer(
    broker_url: str,
) -> None:
    async def scenario() -> None:
        async with partition_backend(broker_url, "takeover") as (backend, metadata, topic):
            new_owner = PartitionLog(backend, metadata, topic)
            await new_owner.open()
            StalledReader(new_owner)  # from its next read on
            old_owner = PartitionLog(backend, metadata, topic)
            await old_owner.open()
            assert await old_owner.append([OutMessage(b"0")], _stamp(0)) == 0
            # the read under way when the stall began brings batch 0, and no more
            await asyncio.wait_for(new_owner.wait_for_data(0, 30), 30)
            assert new_owner.next_offset == 1
            for sequence in range(1, 5):  # acknowledged: each answer waits for its offset
                stored = await old_owner.append([OutMessage(b"%d" % sequence)], _stamp(sequence))
                assert stored == sequence
            await old_owner.close()
            seen = new_owner.producer_state(PRODUCER)
            assert seen is not None and seen.batches[-1].last_sequence == 0  # the lag

            sequences = ProducerSequences()
            assert sequences.must_reach_end(PRODUCER, new_owner)
            await asyncio.wait_for(sequences.reach_end(new_owner), 30)
            # the old owner's answer to batch 4 was lost: its retry is a duplicate
            retry = sequences.check(PRODUCER, 0, new_owner, 4, 1)
            assert retry.code == 0 and retry.duplicate is not None
            assert await retry.duplicate == 4
            # the next batch is in order, and stored once
            following = sequences.check(PRODUCER, 0, new_owner, 5, 1)
            assert following.code == 0 and following.accepted is not None, following.detail
            assert await new_owner.append([OutMessage(b"5")], following.stamp) == 5
            # the log's own guard sees batch 4 too: a retry reaching it stores nothing
            assert await new_owner.append([OutMessage(b"4")], _stamp(4)) == 4
            entries = await new_owner.read(0, 1 << 20)
            assert [e.message.payload for e in entries] == [b"%d" % n for n in range(6)]
            assert new_owner.next_offset == 6
            await new_owner.close()

    asyncio.run(scenario())
