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

That restore is only as good as the log's view. An open log's view may lag what is stored
(its tailer is behind, or another cluster member appended before this one took the
partition over), and a state restored from it lacks acknowledged batches: the next batch is
refused as out of order, a retry of a missing one is stored twice. So a partition's view is
read to the log's true end (`reach_end`) once after this member starts serving it, before
any producer is restored from it; from then on every append goes through this member, and
the producers it has seen are live (docs/cluster.md, "Idempotent producers after a
takeover").
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
        # partitions (Pulsar partition topics) whose log was read to its end since this
        # member last began serving them: their views hold every batch stored before
        self._at_end: set[str] = set()
        self._changes = 0  # ownership changes seen (`forget_unserved`)

    def must_reach_end(self, producer_id: int, partition: ProducerStateStore) -> bool:
        """Whether `check` would restore this producer from a view of the log that is not
        known to hold everything stored: `reach_end` first. False on the hot path (a
        producer already live here, or a partition read to its end since it is served)."""
        topic = partition.topic
        return topic not in self._at_end and (producer_id, topic) not in self._states

    async def reach_end(self, partition: ProducerStateStore) -> None:
        """Read the partition's log to its true end; it counts only if ownership did not
        change meanwhile (the partition may have been another member's for a moment, and
        the broker answered before that member's last appends). StorageError."""
        changes = self._changes
        await partition.reach_end()
        if changes == self._changes:
            self._at_end.add(partition.topic)

    def check(
        self, producer_id: int, epoch: int, partition: ProducerStateStore, first: int, count: int
    ) -> SequenceCheck:
        key = (producer_id, partition.topic)
        state = self._states.get(key)
        origin = "live"
        if state is None:
            if partition.topic not in self._at_end:
                # the caller's `reach_end` was voided by an ownership change: try again
                return SequenceCheck(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    detail="(the partition's log is not read to its end since it is served)",
                )
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
        member's batches too, once the log is read to its end again (`reach_end`)."""
        self._changes += 1
        self._at_end = {topic for topic in self._at_end if served(topic)}
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
