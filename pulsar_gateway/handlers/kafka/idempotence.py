"""Idempotent producers: per (producer id, partition) sequence checks, as Kafka does them.

pulsar-lite has no deduplication, so the gateway drops retried batches itself. A
batch whose sequence range was already accepted gets the first attempt's base
offset back (awaiting it if that attempt is still in flight); a gap gets
OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch gets INVALID_PRODUCER_EPOCH.

The live state is in memory. A producer this gateway has not seen in a partition starts
from what the partition's log holds of it (`ProducerStateStore.producer_state`: its epoch and
last five batches, stored with the batches themselves), so a batch retried across a gateway
restart is still recognised; a producer the log does not know either may start at any
sequence, as Kafka allows an unknown producer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pulsar_gateway.handlers.kafka.port import ProducerSnapshot, ProducerStamp, ProducerStateStore
from pulsar_gateway.kafka_codec.errors import ErrorCode

KEEP_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection ceiling for idempotence
SEQUENCE_WRAP = 1 << 31


@dataclass
class _Batch:
    first: int
    last: int
    base_offset: asyncio.Future[int]


@dataclass
class _ProducerState:
    epoch: int
    next_sequence: int | None = None
    batches: deque[_Batch] = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))


class SequenceCheck:
    """What to do with one idempotent batch: append it (with `stamp`, so that the log knows
    it), return a duplicate, or refuse."""

    def __init__(
        self,
        code: ErrorCode = ErrorCode.NONE,
        duplicate: asyncio.Future[int] | None = None,
        accepted: _Batch | None = None,
        stamp: ProducerStamp | None = None,
        detail: str = "",
    ) -> None:
        self.code = code
        self.duplicate = duplicate
        self.accepted = accepted
        self.stamp = stamp
        self.detail = detail  # why a batch was refused, for the log


class ProducerSequences:
    def __init__(self) -> None:
        self._states: dict[tuple[int, str], _ProducerState] = {}

    def check(
        self, producer_id: int, epoch: int, partition: ProducerStateStore, first: int, count: int
    ) -> SequenceCheck:
        key = (producer_id, partition.topic)
        state = self._states.get(key)
        origin = "live"
        if state is None:
            state = self._restore(key, partition.producer_state(producer_id))
            origin = "restored from the log"
        if state is None or epoch > state.epoch:
            state = self._states[key] = _ProducerState(epoch)
        elif epoch < state.epoch:
            return SequenceCheck(ErrorCode.INVALID_PRODUCER_EPOCH)
        last = (first + count - 1) % SEQUENCE_WRAP
        for batch in state.batches:
            if batch.first == first and batch.last == last:
                return SequenceCheck(duplicate=batch.base_offset)
        if state.next_sequence is not None and first != state.next_sequence:
            kept = ", ".join(f"{b.first}..{b.last}" for b in state.batches)
            return SequenceCheck(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                detail=f"expected sequence {state.next_sequence} ({origin}; kept {kept})",
            )
        batch = _Batch(first, last, asyncio.get_running_loop().create_future())
        state.batches.append(batch)
        state.next_sequence = (last + 1) % SEQUENCE_WRAP
        return SequenceCheck(accepted=batch, stamp=ProducerStamp(producer_id, epoch, first, last))

    def forget_unserved(self, served: Callable[[str], bool]) -> None:
        """Drop the live state of partitions (Pulsar partition topics) `served` refuses:
        another cluster member appends to them now (docs/cluster.md), so this state is
        stale; should they come back, it is restored from the log, which has the other
        member's batches too."""
        for key in [key for key in self._states if not served(key[1])]:
            del self._states[key]

    def _restore(
        self, key: tuple[int, str], stored: ProducerSnapshot | None
    ) -> _ProducerState | None:
        """The live state of a producer first seen here, from what the log holds of it."""
        if stored is None:
            return None
        state = self._states[key] = _ProducerState(stored.epoch)
        loop = asyncio.get_running_loop()
        for kept in stored.batches:
            batch = _Batch(kept.first_sequence, kept.last_sequence, loop.create_future())
            batch.base_offset.set_result(kept.base_offset)
            state.batches.append(batch)
        if stored.batches:
            state.next_sequence = (stored.batches[-1].last_sequence + 1) % SEQUENCE_WRAP
        return state

    def settle(
        self,
        producer_id: int,
        partition: ProducerStateStore,
        batch: _Batch,
        base_offset: int | None,
    ) -> None:
        """Record the outcome. A failed batch is forgotten with every batch after it (a
        Pulsar send failure fails everything queued behind it), so that the client's
        retries, which start again at the failed batch, are accepted in order."""
        if base_offset is not None:
            if not batch.base_offset.done():
                batch.base_offset.set_result(base_offset)
            return
        state = self._states.get((producer_id, partition.topic))
        if state is None or batch not in state.batches:
            return
        kept: deque[_Batch] = deque(maxlen=KEEP_BATCHES)
        for item in state.batches:
            if item is batch:
                break
            kept.append(item)
        for item in list(state.batches)[len(kept) :]:
            if not item.base_offset.done():
                item.base_offset.cancel()
        state.batches = kept
        state.next_sequence = batch.first
