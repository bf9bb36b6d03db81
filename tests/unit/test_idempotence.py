"""Kafka's idempotent-producer rules: duplicates get the first base offset, gaps and old
epochs are refused, a failed batch can be retried."""

from __future__ import annotations

import asyncio

from harness.kafka_memory_store import MemoryPartitionLog
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.kafka_codec.errors import ErrorCode


def test_sequence_rules() -> None:
    async def scenario() -> None:
        seqs = ProducerSequences()
        p0 = MemoryPartitionLog("p0")
        assert seqs.must_reach_end(7, p0)
        await seqs.reach_end(p0)
        first = seqs.check(7, 0, p0, 0, 10)
        assert first.accepted is not None
        seqs.settle(7, p0, first.accepted, 100)
        retry = seqs.check(7, 0, p0, 0, 10)
        assert retry.duplicate is not None and await retry.duplicate == 100
        gap = seqs.check(7, 0, p0, 20, 5)
        assert gap.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # the log line says what was expected and from where (a rare, fatal refusal)
        assert gap.detail == "expected sequence 10 (live; kept 0..9)"
        second = seqs.check(7, 0, p0, 10, 5)
        assert second.accepted is not None
        seqs.settle(7, p0, second.accepted, None)  # failed: its retry is accepted
        assert seqs.check(7, 0, p0, 10, 5).accepted is not None
        assert seqs.check(7, 1, p0, 0, 1).accepted is not None  # new epoch starts over
        assert seqs.check(7, 0, p0, 15, 1).code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert seqs.check(8, 0, p0, 500, 1).accepted is not None  # unknown producer

    asyncio.run(scenario())


def test_no_producer_is_restored_from_a_log_not_read_to_its_end() -> None:
    """`check` restores a producer first seen here from the log's view; if ownership moved
    while the caller read the log to its end, that read counts for nothing (another member
    may have appended after the broker answered), and the batch is refused with a retriable
    error rather than checked against a view that may lack acknowledged batches."""

    async def scenario() -> None:
        seqs = ProducerSequences()
        p0 = MemoryPartitionLog("persistent://public/default/t-partition-0")
        refused = seqs.check(7, 0, p0, 40, 1)
        assert refused.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await seqs.reach_end(p0)
        assert not seqs.must_reach_end(7, p0)
        # the partition goes to another member and comes back: its view is stale again
        seqs.forget_unserved(lambda topic: False)
        assert seqs.must_reach_end(7, p0)
        p0.stall = asyncio.Event()  # the broker is slow to say where the log ends
        reading = asyncio.ensure_future(seqs.reach_end(p0))
        while p0.ends_reached < 2:  # the read is under way
            await asyncio.sleep(0)
        seqs.forget_unserved(lambda topic: True)  # a change meanwhile
        p0.stall.set()
        await reading
        p0.stall = None
        assert seqs.must_reach_end(7, p0)
        assert seqs.check(7, 0, p0, 40, 1).code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await seqs.reach_end(p0)
        assert seqs.check(7, 0, p0, 40, 1).accepted is not None
        # a change that leaves the partition here keeps its read: every append since went
        # through this member, so another producer is restored without asking again
        seqs.forget_unserved(lambda topic: True)
        assert not seqs.must_reach_end(7, p0)
        assert not seqs.must_reach_end(8, p0)

    asyncio.run(scenario())
