"""The Kafka storage port's in-memory twin: what the unit tests run the Kafka handlers on.

It keeps the port's promises (dense offsets counted by records, a batch entry taking as many
offsets as it holds, reads from the entry that holds an offset, long-poll wake-ups, durable-
looking commits) with plain lists and dicts. `broken = True` on any part makes its backend
operations raise StorageError, to drive the handlers' error paths.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from pulsar_gateway.gateway.messages import LogEntry, OutMessage, StoredMessage, records_in
from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.kafka.idempotence import KEEP_BATCHES
from pulsar_gateway.handlers.kafka.port import (
    CommittedOffset,
    InvalidPartitions,
    KafkaStorage,
    OffsetOutOfRange,
    ProducerBatch,
    ProducerSnapshot,
    ProducerStamp,
    QuotaEntity,
    ShareState,
    StorageError,
    TopicExists,
    TopicRecord,
    TransactionState,
    UnknownTopic,
)
from pulsar_gateway.storage.kafka.transaction_index import TransactionIndex


class _Breakable:
    broken = False

    def _check(self) -> None:
        if self.broken:
            raise StorageError("storage is down (memory store told so)")


class MemoryPartitionLog(_Breakable):
    def __init__(self, topic: str, log_start: int = 0) -> None:
        self._topic = topic
        self.log_start = log_start
        self.next_offset = log_start
        self.entries: list[LogEntry] = []
        self._waiters: list[asyncio.Future[None]] = []
        self.producers: dict[int, ProducerSnapshot] = {}
        # when set, an append waits until it is (a stalled backend, for timeout paths)
        self.stall: asyncio.Event | None = None
        self._last_append: asyncio.Future[int] | None = None  # the latest queued behind a stall
        self.transactions = TransactionIndex()
        # a view that lags the log, as a tailer behind (or another member's appends) makes
        # it: with `view_lags` set, a stored batch reaches `producer_state` only at the next
        # `reach_end`
        self.view_lags = False
        self._unseen: list[tuple[ProducerStamp, int]] = []
        self.ends_reached = 0  # how often `reach_end` was called
        # when set and not yet fired, reads wait for it: entries on their way from storage,
        # which a read without `wait` leaves for a later read
        self.arriving: asyncio.Event | None = None

    @property
    def topic(self) -> str:
        return self._topic

    def producer_ids(self) -> list[int]:
        return list(self.producers)

    def producer_state(self, producer_id: int) -> ProducerSnapshot | None:
        return self.producers.get(producer_id)

    async def reach_end(self) -> None:
        """With `stall` set, the broker's answer waits until it is."""
        self._check()
        self.ends_reached += 1
        if self.stall is not None:
            await self.stall.wait()
        unseen, self._unseen = self._unseen, []
        for producer, base in unseen:
            self._remember(producer, base)

    def append(
        self,
        messages: Sequence[OutMessage],
        producer: ProducerStamp | None = None,
        encoded: bytes | memoryview | None = None,
    ) -> asyncio.Future[int]:
        """Stored in the order of the calls, as the port promises; with `stall` set, the
        appends wait (in that order) until it is."""
        self._check()
        previous = self._last_append
        if self.stall is None and (previous is None or previous.done()):
            done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            done.set_result(self._store(messages, producer))
            return done
        later = asyncio.ensure_future(self._store_later(previous, messages, producer))
        self._last_append = later
        return later

    async def _store_later(
        self,
        previous: asyncio.Future[int] | None,
        messages: Sequence[OutMessage],
        producer: ProducerStamp | None,
    ) -> int:
        if previous is not None and not previous.done():
            await asyncio.wait((previous,))
        if self.stall is not None:
            await self.stall.wait()
        return self._store(messages, producer)

    def _store(self, messages: Sequence[OutMessage], producer: ProducerStamp | None) -> int:
        base = self.next_offset
        now = int(time.time() * 1000)
        for message in messages:
            stored = StoredMessage(
                (1, len(self.entries), -1),
                message.payload,
                message.key or "",
                dict(message.properties or {}),
                message.event_time,
                now,
            )
            self.entries.append(LogEntry(self.next_offset, stored))
            self.transactions.observe(stored, self.next_offset)
            self.next_offset += records_in(stored)
        if producer is not None and self.view_lags:
            self._unseen.append((producer, base))
        elif producer is not None:
            self._remember(producer, base)
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)
        return base

    def _remember(self, producer: ProducerStamp, base: int) -> None:
        """The producer's last five batches, kept as durably as the log (a new epoch starts
        them afresh)."""
        known = self.producers.get(producer.producer_id)
        kept = known.batches if known is not None and known.epoch == producer.epoch else ()
        batch = ProducerBatch(producer.first_sequence, producer.last_sequence, base)
        self.producers[producer.producer_id] = ProducerSnapshot(
            producer.epoch, (*kept, batch)[-KEEP_BATCHES:]
        )

    async def read(
        self, offset: int, max_bytes: int, room: int | None = None, wait: bool = True
    ) -> list[LogEntry]:
        self._check()
        if self.arriving is not None and not self.arriving.is_set():
            if not wait:
                return []
            await self.arriving.wait()
        if offset < self.log_start or offset > self.next_offset:
            raise OffsetOutOfRange(offset)
        if offset == self.next_offset:
            return []
        starts = [entry.offset for entry in self.entries]
        index = max(bisect.bisect_right(starts, offset) - 1, 0)
        out: list[LogEntry] = []
        size = 0
        for entry in self.entries[index:]:
            size += entry.message.size
            if (out and size > max_bytes) or (not out and room is not None and size > room):
                break
            out.append(entry)
        return out

    def prepare_read(self, offset: int, max_bytes: int) -> None:
        """Nothing to prepare: every record is in memory."""

    def data_future(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    @property
    def last_stable_offset(self) -> int:
        return self.transactions.last_stable_offset(self.next_offset)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        aborted = self.transactions.aborted_between(start, end)
        return [(a.producer_id, a.first_offset) for a in aborted]

    def open_transaction_start(self, producer_id: int) -> int | None:
        return self.transactions.open_start(producer_id)


class MemoryTopicStore(_Breakable):
    def __init__(self) -> None:
        self.records: dict[str, TopicRecord] = {}
        self.logs: dict[str, MemoryPartitionLog] = {}
        # seconds each topic creation and partition open waits, as a backend's answer does
        # (None: no wait); the ordering tests draw them at random
        self.delay: Callable[[], float] | None = None
        # drops the groups' committed offsets and the share groups' state on a deleted
        # topic's partitions, as the Pulsar-backed TopicService's does (`memory_storage`)
        self.forget_partitions: Callable[[list[str]], Awaitable[None]] | None = None

    async def _wait(self) -> None:
        if self.delay is not None:
            await asyncio.sleep(self.delay())

    def get(self, name: str) -> TopicRecord | None:
        return self.records.get(name)

    def list(self) -> list[TopicRecord]:
        return sorted(self.records.values(), key=lambda record: record.name)

    async def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicRecord:
        self._check()
        await self._wait()
        if name in self.records:
            raise TopicExists(name)
        if partitions < 1:
            raise InvalidPartitions("partitions must be at least 1")
        record = TopicRecord(
            name, partitions, dict(configs or {}), [0] * partitions, False, str(uuid.uuid4())
        )
        self.records[name] = record
        return record

    async def delete(self, name: str) -> None:
        self._check()
        record = self.records.pop(name, None)
        if record is None:
            raise UnknownTopic(name)
        partitions = [partition_topic(name, index) for index in range(record.partitions)]
        for partition in partitions:
            self.logs.pop(partition, None)
        if self.forget_partitions is not None:
            await self.forget_partitions(partitions)

    async def add_partitions(self, name: str, total: int) -> TopicRecord:
        self._check()
        record = self.records.get(name)
        if record is None:
            raise UnknownTopic(name)
        if total <= record.partitions:
            raise InvalidPartitions(f"topic has {record.partitions} partitions; not {total}")
        record.log_start += [0] * (total - record.partitions)
        record.partitions = total
        return record

    async def replace_configs(self, name: str, configs: dict[str, str]) -> TopicRecord:
        self._check()
        record = self.records.get(name)
        if record is None:
            raise UnknownTopic(name)
        record.configs = dict(configs)
        return record

    async def delete_records(self, name: str, index: int, before: int) -> int:
        self._check()
        record = self.records.get(name)
        if record is None or not 0 <= index < record.partitions:
            raise UnknownTopic(name)
        start = record.log_start[index] = max(record.log_start[index], before)
        log = self.logs.get(partition_topic(name, index))
        if log is not None:
            log.log_start = start
        return start

    def total_partitions(self) -> int:
        return sum(record.partitions for record in self.records.values())

    def opened(self, record: TopicRecord, index: int) -> MemoryPartitionLog | None:
        """None: every Fetch goes through `partition_of`, which a test may break or delay."""
        return None

    async def partition_of(self, record: TopicRecord, index: int) -> MemoryPartitionLog:
        self._check()
        await self._wait()
        name = partition_topic(record.name, index)
        log = self.logs.get(name)
        if log is None:
            log = self.logs[name] = MemoryPartitionLog(name, record.start_of(index))
        return log


class MemoryGroupOffsets(_Breakable):
    def __init__(self) -> None:
        self.committed: dict[str, dict[str, CommittedOffset]] = {}
        self.states: dict[str, tuple[int, str]] = {}
        self.delay: Callable[[], float] | None = None  # as MemoryTopicStore's, for commits

    def get(self, group_id: str, topic: str) -> CommittedOffset | None:
        return self.committed.get(group_id, {}).get(topic)

    def offsets(self, group_id: str) -> dict[str, CommittedOffset]:
        return dict(self.committed.get(group_id, {}))

    async def commit(self, group_id: str, entries: dict[str, CommittedOffset]) -> None:
        self._check()
        if self.delay is not None:
            await asyncio.sleep(self.delay())
        self.committed.setdefault(group_id, {}).update(entries)

    async def delete(self, group_id: str, topics: list[str]) -> None:
        self._check()
        stored = self.committed.get(group_id, {})
        for topic in topics:
            stored.pop(topic, None)
        if not stored:
            self.committed.pop(group_id, None)

    def group_state(self, group_id: str) -> tuple[int, str]:
        return self.states.get(group_id, (0, ""))

    async def save_group_state(self, group_id: str, generation: int, protocol_type: str) -> None:
        self._check()
        self.states[group_id] = (generation, protocol_type)

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.committed.get(group_id))

    def groups_with_offsets(self) -> list[str]:
        return [group for group, offsets in self.committed.items() if offsets]

    async def delete_group(self, group_id: str) -> None:
        await self.delete(group_id, list(self.committed.get(group_id, {})))

    async def forget_partitions(self, topics: list[str]) -> None:
        """Every group's offsets on these partitions go: their topic is deleted."""
        for group_id in list(self.committed):
            await self.delete(group_id, topics)


class MemoryProducerIds(_Breakable):
    def __init__(self, first: int = 1000) -> None:
        self.next = first

    async def next_id(self) -> int:
        self._check()
        self.next += 1
        return self.next - 1


class MemoryCredentials(_Breakable):
    """The users store's SCRAM keys, by user and mechanism."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return self.users.get(name)

    def names(self) -> list[str]:
        return sorted(self.users)

    async def set_credential(self, name: str, mechanism: str, keys: dict[str, Any]) -> None:
        self._check()
        self.users.setdefault(name, {})[mechanism] = keys

    async def remove_credential(self, name: str, mechanism: str) -> bool:
        self._check()
        record = self.users.get(name, {})
        if record.pop(mechanism, None) is None:
            return False
        if not record:
            del self.users[name]
        return True


class MemoryTransactionStore(_Breakable):
    """Transactional ids' coordinator state; `save` stores a copy, as a durable store would
    (a later change to the caller's object is not stored until saved)."""

    def __init__(self) -> None:
        self.states: dict[str, TransactionState] = {}

    def get(self, transactional_id: str) -> TransactionState | None:
        state = self.states.get(transactional_id)
        return copy.deepcopy(state) if state is not None else None

    def all(self) -> list[TransactionState]:
        return [copy.deepcopy(state) for state in self.states.values()]

    async def save(self, state: TransactionState) -> None:
        self._check()
        self.states[state.transactional_id] = copy.deepcopy(state)


class MemoryClientQuotas(_Breakable):
    """Client quotas by entity (the metadata store's model: an entity without quotas has
    no entry)."""

    def __init__(self) -> None:
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}

    @property
    def empty(self) -> bool:
        return not self.quotas

    def lookup(self, entity: QuotaEntity) -> Mapping[str, float] | None:
        return self.quotas.get(entity)

    def entries(self) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
        return list(self.quotas.items())

    async def alter(self, entity: QuotaEntity, values: Mapping[str, float | None]) -> None:
        self._check()
        now = dict(self.quotas.get(entity, {}))
        for key, value in values.items():
            if value is None:
                now.pop(key, None)
            else:
                now[key] = value
        if now:
            self.quotas[entity] = now
        else:
            self.quotas.pop(entity, None)


class MemoryShareStates(_Breakable):
    """Share groups' per-partition state by (group, partition topic); frozen values, so
    what is stored cannot change behind the store's back."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, str], ShareState] = {}
        self.listed: set[str] = set()  # groups that ever stored state, until deleted

    def load(self, group_id: str, partition_topic: str) -> ShareState | None:
        return self.states.get((group_id, partition_topic))

    async def save(self, group_id: str, partition_topic: str, state: ShareState) -> None:
        self._check()
        self.states[(group_id, partition_topic)] = state
        self.listed.add(group_id)

    def groups(self) -> list[str]:
        return sorted(self.listed)

    async def delete_group(self, group_id: str) -> None:
        self._check()
        for key in [key for key in self.states if key[0] == group_id]:
            del self.states[key]
        self.listed.discard(group_id)

    async def delete(self, group_id: str, partition_topic: str) -> None:
        self._check()
        self.states.pop((group_id, partition_topic), None)

    async def forget_partitions(self, partition_topics: list[str]) -> None:
        self._check()
        gone = set(partition_topics)
        for key in [key for key in self.states if key[1] in gone]:
            del self.states[key]


class MemoryGroupConfigs(_Breakable):
    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}

    def get(self, group_id: str) -> Mapping[str, str]:
        return self.configs.get(group_id, {})

    async def replace(self, group_id: str, configs: Mapping[str, str]) -> None:
        self._check()
        if configs:
            self.configs[group_id] = dict(configs)
        else:
            self.configs.pop(group_id, None)


def memory_storage() -> KafkaStorage:
    topics, offsets, shares = MemoryTopicStore(), MemoryGroupOffsets(), MemoryShareStates()

    async def forget_partitions(partitions: list[str]) -> None:
        # the memory store's partition names are the stored ones (app.py maps them)
        await offsets.forget_partitions(partitions)
        await shares.forget_partitions(partitions)

    topics.forget_partitions = forget_partitions
    return KafkaStorage(
        topics,
        offsets,
        MemoryProducerIds(),
        transactions=MemoryTransactionStore(),
        quotas=MemoryClientQuotas(),
        shares=shares,
        group_configs=MemoryGroupConfigs(),
    )
