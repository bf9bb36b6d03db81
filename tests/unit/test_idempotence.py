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
