"""The transaction coordinator: Kafka's state machine per transactional id.

Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) -> PrepareCommit | PrepareAbort (EndTxn,
or the timeout) -> CompleteCommit | CompleteAbort, and Ongoing again with the next transaction.
Every transition is saved (`TransactionStore`, durable) before it is acted on: a prepared
outcome is saved before the first marker is written, so a gateway killed in between finishes
it at start; an Ongoing transaction whose timeout passed is aborted by the timer, whether the
gateway restarted meanwhile or not. Markers go into each partition the transaction wrote to
(kafka_codec/control_batch.py); the group offsets sent with TxnOffsetCommit are held in the
state and committed to the group only with a commit.

Fencing: InitProducerId with the same transactional id bumps the epoch (aborting what the
previous epoch left open, its markers already at the new epoch), so the older producer's
requests get the fenced error its API version expects (PRODUCER_FENCED, else
INVALID_PRODUCER_EPOCH) and its Produce requests INVALID_PRODUCER_EPOCH.

All state is reached through the store by transactional id, one lock per id: a check that this
gateway owns the id would go in `_locked` alone. docs/transactions.md says more.

Every request is answered within `answer_seconds`, whatever it waits for (the id's lock held by
a completion writing its markers, a storage write of a stalled broker): past that the client
gets COORDINATOR_LOAD_IN_PROGRESS, which every client retries, while the work goes on to its
end, holding the id's lock, so a retry sees its outcome (docs/transactions.md, "Answers in
time").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.kafka.in_time import LateWork
from pulsar_gateway.handlers.kafka.port import (
    CommittedOffset,
    GroupOffsets,
    ProducerIds,
    StorageError,
    TopicStore,
    TransactionState,
    TransactionStore,
)
from pulsar_gateway.kafka_codec.control_batch import marker_message
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol import RequestHeader
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

log = logging.getLogger("gateway.kafka.transactions")

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
MAX_EPOCH = 32766  # an epoch is an int16; past this a new producer id is handed out
# a prepared outcome left this long (its EndTxn failed or the gateway restarted) is finished
# by the timer
STUCK_PREPARED_MS = 5000
# what a request answers when its work is not done within answer_seconds (it goes on)
BUSY = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

T = TypeVar("T")


def answered_within(
    busy: Any,
) -> Callable[[Callable[..., Coroutine[Any, Any, T]]], Callable[..., Coroutine[Any, Any, T]]]:
    """The coordinator method answers `busy` once its work has taken `answer_seconds`; the
    work runs on to its end (module docstring)."""

    def wrap(
        method: Callable[..., Coroutine[Any, Any, T]],
    ) -> Callable[..., Coroutine[Any, Any, T]]:
        @functools.wraps(method)
        async def answered(self: TransactionCoordinator, *args: Any, **kwargs: Any) -> T:
            return await self._within(method(self, *args, **kwargs), busy)

        return answered

    return wrap


# the first version of each API that knows PRODUCER_FENCED (KIP-588)
_FENCED_SINCE: dict[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}


def fenced_code(header: RequestHeader) -> ErrorCode:
    """The error a fenced producer gets from this request's API version."""
    since = _FENCED_SINCE.get(header.api_key, 1 << 15)
    if header.api_version >= since:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.INVALID_PRODUCER_EPOCH


def _now_ms() -> int:
    return int(time.time() * 1000)


class NotServed(Exception):
    """This gateway does not coordinate the transactional id: another cluster member does
    (docs/cluster.md), and the client is answered NOT_COORDINATOR."""


def _serves_every_id(_transactional_id: str) -> bool:
    return True


class TransactionCoordinator:
    def __init__(
        self,
        store: TransactionStore,
        topics: TopicStore,
        offsets: GroupOffsets,
        producer_ids: ProducerIds,
        max_timeout_ms: int = 900_000,
        check_interval: float = 1.0,
        serves: Callable[[str], bool] = _serves_every_id,
        answer_seconds: float = 5.0,
    ) -> None:
        # in a cluster, whether this member coordinates an id now: asked before every
        # request on it and before its timer touches it, so two members never both do
        self.serves = serves
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.producer_ids = producer_ids
        self.max_timeout_ms = max_timeout_ms
        self.check_interval = check_interval
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None
        self.answer_seconds = answer_seconds
        self._late = LateWork()  # requests answered as busy, still working

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Finish what a previous run prepared, and from then on abort what times out."""
        self._task = asyncio.create_task(self._expire_loop(), name="transaction timeouts")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        await cancel_and_wait(*self._late.tasks)

    async def _expire_loop(self) -> None:
        first = True
        while True:
            try:
                await self.expire(recover=first)
                first = False
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next round retries; the loop must live
                log.exception("transaction timeout check failed")
            await asyncio.sleep(self.check_interval)

    async def expire(self, recover: bool = False, now_ms: int | None = None) -> None:
        """Abort every Ongoing transaction past its timeout; finish every prepared one left
        behind (all of them with `recover`, at start)."""
        now = _now_ms() if now_ms is None else now_ms
        for seen in self.store.all():
            if not self.serves(seen.transactional_id):
                continue
            timed_out = seen.state == ONGOING and now - seen.start_ms > seen.timeout_ms
            stuck = seen.state in (PREPARE_COMMIT, PREPARE_ABORT) and (
                recover or now - seen.updated_ms > STUCK_PREPARED_MS
            )
            if not (timed_out or stuck):
                continue
            with contextlib.suppress(NotServed):  # given to another member meanwhile
                await self._expire_one(seen.transactional_id, now)

    async def _expire_one(self, transactional_id: str, now: int) -> None:
        async with self._locked(transactional_id) as state:
            if state is None:
                return
            try:
                if state.state == ONGOING and now - state.start_ms > state.timeout_ms:
                    log.info(
                        "transaction of %r timed out after %d ms: aborting it",
                        state.transactional_id,
                        state.timeout_ms,
                    )
                    # as Kafka: the epoch is bumped, so the producer is fenced
                    await self._bump_and_abort(state)
                elif state.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    await self._complete(state)
            except StorageError as exc:
                log.warning("finishing %r failed: %s", state.transactional_id, exc)

    @contextlib.asynccontextmanager
    async def _locked(self, transactional_id: str) -> AsyncIterator[TransactionState | None]:
        """The id's state, with no other request on the same id under way; NotServed when
        another cluster member coordinates it (checked again once the lock is held)."""
        if not self.serves(transactional_id):
            raise NotServed(transactional_id)
        lock = self._locks.setdefault(transactional_id, asyncio.Lock())
        async with lock:
            if not self.serves(transactional_id):
                raise NotServed(transactional_id)
            yield self.store.get(transactional_id)

    async def _within(self, work: Awaitable[T], busy: T) -> T:
        return await self._late.within(work, self.answer_seconds, busy, "a transaction request")

    # ---- the APIs --------------------------------------------------------------------------

    @answered_within((BUSY, -1, -1))
    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        epoch: int,
        fenced: ErrorCode,
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a producer (re)starting with this id."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        async with self._locked(transactional_id) as state:
            if state is None:
                state = TransactionState(
                    transactional_id, await self.producer_ids.next_id(), 0, timeout_ms
                )
                await self._save(state)
                return ErrorCode.NONE, state.producer_id, state.epoch
            if producer_id >= 0 and (producer_id, epoch) != (state.producer_id, state.epoch):
                return fenced, -1, -1  # KIP-360: only the current producer may resume
            if state.state in (PREPARE_COMMIT, PREPARE_ABORT):
                await self._complete(state)
            if state.state == ONGOING:
                await self._bump_and_abort(state)
            elif state.epoch >= MAX_EPOCH:
                state.producer_id, state.epoch = await self.producer_ids.next_id(), 0
            else:
                state.epoch += 1
            state.timeout_ms = timeout_ms
            state.state = EMPTY
            await self._save(state)
            return ErrorCode.NONE, state.producer_id, state.epoch

    @answered_within(BUSY)
    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        fenced: ErrorCode,
    ) -> ErrorCode:
        async with self._locked(transactional_id) as state:
            code = _check(state, producer_id, epoch, fenced)
            if state is None or code:
                return code
            code, started = _begin(state)
            if code:
                return code
            added = [p for p in partitions if p not in state.partitions]
            if added or started:
                state.partitions.extend(added)
                await self._save(state)
            return ErrorCode.NONE

    @answered_within(BUSY)
    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str, fenced: ErrorCode
    ) -> ErrorCode:
        async with self._locked(transactional_id) as state:
            code = _check(state, producer_id, epoch, fenced)
            if state is None or code:
                return code
            code, started = _begin(state)
            if code:
                return code
            if group_id not in state.groups or started:
                if group_id not in state.groups:
                    state.groups.append(group_id)
                await self._save(state)
            return ErrorCode.NONE

    @answered_within(BUSY)
    async def commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        entries: dict[str, CommittedOffset],
        fenced: ErrorCode,
    ) -> ErrorCode:
        """TxnOffsetCommit: held until the transaction commits, dropped if it aborts."""
        async with self._locked(transactional_id) as state:
            code = _check(state, producer_id, epoch, fenced)
            if state is None or code:
                return code
            if state.state != ONGOING or group_id not in state.groups:
                return ErrorCode.INVALID_TXN_STATE
            state.offsets.setdefault(group_id, {}).update(entries)
            await self._save(state)
            return ErrorCode.NONE

    @answered_within(BUSY)
    async def end(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        fenced: ErrorCode,
    ) -> ErrorCode:
        async with self._locked(transactional_id) as state:
            code = _check(state, producer_id, epoch, fenced)
            if state is None or code:
                return code
            prepare, complete = (
                (PREPARE_COMMIT, COMPLETE_COMMIT) if commit else (PREPARE_ABORT, COMPLETE_ABORT)
            )
            if state.state == ONGOING:
                state.state = prepare
                await self._save(state)
                await self._complete(state)
                return ErrorCode.NONE
            if state.state == prepare:  # a retry after a failed completion
                await self._complete(state)
                return ErrorCode.NONE
            if state.state in (complete, EMPTY):  # a retry, or nothing was sent
                return ErrorCode.NONE
            return ErrorCode.INVALID_TXN_STATE

    def check_produce(
        self, transactional_id: str, producer_id: int, epoch: int, partition: tuple[str, int]
    ) -> ErrorCode:
        """Whether a transactional batch may be appended: its producer is the id's current
        one and the partition was added to the open transaction."""
        state = self.store.get(transactional_id)
        if not self.serves(transactional_id):
            # another cluster member coordinates the id and this one sees its state only
            # as the followed metadata store brings it, a moment late: as a Kafka partition
            # leader before KIP-890, refuse only a producer already fenced
            known = state is not None and state.producer_id == producer_id
            late = known and state is not None and epoch < state.epoch
            return ErrorCode.INVALID_PRODUCER_EPOCH if late else ErrorCode.NONE
        if state is None or state.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if state.state != ONGOING or partition not in state.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def get(self, transactional_id: str) -> TransactionState | None:
        return self.store.get(transactional_id)

    def all(self) -> list[TransactionState]:
        return self.store.all()

    # ---- completing ------------------------------------------------------------------------

    async def _bump_and_abort(self, state: TransactionState) -> None:
        """Abort the open transaction at a new epoch (fencing its producer)."""
        if state.epoch < MAX_EPOCH:
            state.epoch += 1
        state.state = PREPARE_ABORT
        await self._save(state)
        await self._complete(state)

    async def _complete(self, state: TransactionState) -> None:
        """Write the prepared outcome's markers, apply the offsets of a commit, and save
        the completed state. StorageError leaves it prepared, for a retry."""
        commit = state.state == PREPARE_COMMIT
        now = _now_ms()
        marker = marker_message(state.producer_id, state.epoch, commit, now)
        await asyncio.gather(
            *(self._write_marker(topic, index, marker) for topic, index in state.partitions)
        )
        if commit:
            for group_id, entries in state.offsets.items():
                await self.offsets.commit(group_id, entries)
        state.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        state.partitions = []
        state.groups = []
        state.offsets = {}
        await self._save(state)

    async def _write_marker(self, topic: str, index: int, marker: OutMessage) -> None:
        record = self.topics.get(topic)
        if record is None or record.deleted or index >= record.partitions:
            return  # the topic is gone: nothing of the transaction is left to mark
        log_ = await self.topics.partition_of(record, index)
        await log_.append([marker])

    async def _save(self, state: TransactionState) -> None:
        state.updated_ms = _now_ms()
        await self.store.save(state)


def _check(
    state: TransactionState | None, producer_id: int, epoch: int, fenced: ErrorCode
) -> ErrorCode:
    if state is None or state.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if epoch != state.epoch:
        return fenced
    return ErrorCode.NONE


def _begin(state: TransactionState) -> tuple[ErrorCode, bool]:
    """Start a transaction if none is open (whether one was started, for the caller to
    save); CONCURRENT_TRANSACTIONS while one completes."""
    if state.state in (PREPARE_COMMIT, PREPARE_ABORT):
        return ErrorCode.CONCURRENT_TRANSACTIONS, False
    if state.state == ONGOING:
        return ErrorCode.NONE, False
    state.state = ONGOING
    state.start_ms = _now_ms()
    state.partitions = []
    state.groups = []
    state.offsets = {}
    return ErrorCode.NONE, True
