"""The storage the Kafka handler needs, and nothing more: its port.

The API handlers reach topics, partition logs, committed group offsets and producer ids
only through these Protocols. The gateway wires in the Pulsar-backed implementations
(`pulsar_gateway.storage.kafka`); the unit tests wire in an in-memory twin
(`harness/kafka_memory_store.py`), so every Kafka API runs in milliseconds without a
broker, as tansu's broker runs on its memory engine. docs/architecture.md, "Ports", says why.

Every operation that reaches the backend may raise `StorageError`, the one storage error.
Offsets follow docs/offsets.md: dense per partition, stable, and a record batch stored as one
entry takes as many offsets as it holds records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pulsar_gateway.gateway.cluster.view import ClusterView
from pulsar_gateway.gateway.errors import StorageError
from pulsar_gateway.gateway.messages import LogEntry, OutMessage
from pulsar_gateway.gateway.reserved_names import ReservedNamespaces
from pulsar_gateway.gateway.topic_names import incarnation_topic

__all__ = [
    "CommittedOffset",
    "GroupOffsets",
    "GroupStateStore",
    "InvalidPartitions",
    "KafkaStorage",
    "OffsetOutOfRange",
    "PartitionLog",
    "ProducerBatch",
    "ProducerIds",
    "ProducerSnapshot",
    "ProducerStamp",
    "ProducerStateStore",
    "StorageError",
    "TopicDeleted",
    "TopicExists",
    "TopicRecord",
    "TopicStore",
    "TransactionState",
    "TransactionStore",
    "UnknownTopic",
]


class TopicExists(Exception):
    """create() of a topic that exists (and is not deleted)."""


class UnknownTopic(Exception):
    """delete() or add_partitions() of a topic that does not exist."""


class TopicDeleted(StorageError):
    """partition_of() for a topic deleted since the caller looked it up (a StorageError, so
    the client retries, refreshes its metadata and finds the topic gone)."""


class InvalidPartitions(Exception):
    """A partition count that is not allowed (below 1, or not an increase)."""


class OffsetOutOfRange(Exception):
    """A read below the log start or past the end of a partition."""


@dataclass
class TopicRecord:
    """What the gateway knows of a Kafka topic; its name is the full Pulsar name."""

    name: str  # persistent://tenant/namespace/topic
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    log_start: list[int] = field(default_factory=list)  # per partition
    deleted: bool = False
    topic_id: str = ""  # a UUID, as Kafka's topic ids
    # 0 for a name's first topic, +1 each time it is created again after a deletion on a
    # backend that cannot delete (docs/pulsar-mapping.md, 'Deleting topics')
    incarnation: int = 0

    @property
    def stored_name(self) -> str:
        """The Pulsar topic (before `-partition-<i>`) that holds this incarnation's records."""
        return incarnation_topic(self.name, self.incarnation)

    def start_of(self, partition: int) -> int:
        return self.log_start[partition] if partition < len(self.log_start) else 0


@dataclass
class CommittedOffset:
    """A group's committed position in one partition, as OffsetCommit gave it."""

    offset: int
    metadata: str = ""
    commit_time: int = 0  # milliseconds since the epoch
    leader_epoch: int = -1


@dataclass(frozen=True)
class ProducerStamp:
    """Which idempotent producer's batch an append stores: its id, epoch and the sequence
    numbers of its first and last record."""

    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int


@dataclass(frozen=True)
class ProducerBatch:
    """A batch of an idempotent producer that a partition holds whole, and where it starts."""

    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass(frozen=True)
class ProducerSnapshot:
    """What a partition holds of one idempotent producer, as Kafka's producer snapshots
    keep it: the producer's epoch and its last batches (at most five), oldest first."""

    epoch: int
    batches: tuple[ProducerBatch, ...]


class ProducerStateStore(Protocol):
    """Idempotent producers' state in one partition, kept with its log so that it outlives
    the gateway: a retry that reaches a restarted gateway is still recognised."""

    @property
    def topic(self) -> str:
        """The partition's own Pulsar topic (`<topic>-partition-<i>`): a stable key."""
        ...

    def producer_ids(self) -> list[int]:
        """Every producer whose state the partition holds."""
        ...

    def producer_state(self, producer_id: int) -> ProducerSnapshot | None:
        """The producer's state as of everything appended (and numbered) so far; None for a
        producer that never wrote here (or was forgotten as the least recently seen)."""
        ...

    async def reach_end(self) -> None:
        """Return once `producer_state` covers everything stored in the partition before
        the call, whoever stored it: the backend is asked where the log ends and the log is
        read up to there (an open log's view may lag it). StorageError when the backend
        does not say, or the log is closed."""
        ...


class PartitionLog(ProducerStateStore, Protocol):
    """One Kafka partition: an append-only log of entries numbered by dense offsets."""

    log_start: int
    next_offset: int  # the high watermark: one past the last numbered record

    def append(
        self,
        messages: Sequence[OutMessage],
        producer: ProducerStamp | None = None,
        encoded: bytes | memoryview | None = None,
    ) -> Awaitable[int]:
        """Store the messages in order, as one Kafka batch; what it returns gives the offset
        of the first once all are numbered, together (a fetch sees all of them or none).
        Their place in the log is fixed by the call itself: appends are stored in the order
        they are called, however long each then waits (docs/offsets.md, "One connection's
        order"). `producer`: they are an idempotent producer's batch, which
        `producer_state` shows once it is stored whole. `encoded`: the Kafka batch they are
        the records of, one each, which the log may serve to fetches in their place."""
        ...

    async def read(
        self, offset: int, max_bytes: int, room: int | None = None, wait: bool = True
    ) -> list[LogEntry]:
        """Entries from the one holding `offset` on (at least one when any, unless it alone
        is over `room` bytes), about `max_bytes` in all, each with the offset of its first
        record. Without `wait`, only entries at hand: none of those still on their way from
        storage, which come for a later read (a Fetch that has its min_bytes answers)."""
        ...

    def data_future(self) -> asyncio.Future[None]:
        """Resolves when the log next grows (a long-polling Fetch waits on it)."""
        ...

    def prepare_read(self, offset: int, max_bytes: int) -> None:
        """A read at `offset` of about `max_bytes` follows soon: whatever it will wait for
        (a reader below the in-memory tail) may start now."""
        ...

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction (next_offset when none is open):
        read_committed consumers read up to it (docs/transactions.md)."""
        ...

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction with a record in
        [start, end)."""
        ...

    def open_transaction_start(self, producer_id: int) -> int | None:
        """The first offset of the producer's open transaction here, if one is open."""
        ...


class TopicStore(Protocol):
    """Kafka topics: what exists, and the open log of each partition."""

    def get(self, name: str) -> TopicRecord | None: ...

    def list(self) -> list[TopicRecord]: ...

    async def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicRecord: ...

    async def delete(self, name: str) -> None:
        """Delete the topic at once for every API, with its groups' committed offsets and
        everything kept for it; UnknownTopic. Where the backend cannot delete stored data
        the old incarnation's Pulsar topics wait for reclamation and a topic created again
        under the name is a new incarnation on fresh ones (docs/pulsar-mapping.md)."""
        ...

    async def add_partitions(self, name: str, total: int) -> TopicRecord: ...

    async def replace_configs(self, name: str, configs: dict[str, str]) -> TopicRecord:
        """The topic's configs become exactly `configs` (checked by the caller)."""
        ...

    async def delete_records(self, name: str, index: int, before: int) -> int:
        """Records of partition `index` below `before` are gone for Kafka clients: the
        log start moves up to it (never down); the new log start."""
        ...

    def total_partitions(self) -> int:
        """Partitions of every existing topic together, cheaply (the gateway's partition
        limit is checked against it on every CreateTopics and CreatePartitions)."""
        ...

    def opened(self, record: TopicRecord, index: int) -> PartitionLog | None:
        """The partition's log if it is open now, else None (then `partition_of`)."""
        ...

    async def partition_of(self, record: TopicRecord, index: int) -> PartitionLog: ...


class GroupStateStore(Protocol):
    """What the group coordinator persists: the last generation and protocol type of a
    group (generations never go backwards after a restart), and whether it has offsets."""

    def group_state(self, group_id: str) -> tuple[int, str]: ...

    async def save_group_state(
        self, group_id: str, generation: int, protocol_type: str
    ) -> None: ...

    def has_offsets(self, group_id: str) -> bool: ...

    def groups_with_offsets(self) -> list[str]: ...

    async def delete_group(self, group_id: str) -> None: ...


class GroupOffsets(GroupStateStore, Protocol):
    """Committed offsets of consumer groups, keyed by the partition's Pulsar topic."""

    def get(self, group_id: str, topic: str) -> CommittedOffset | None: ...

    def offsets(self, group_id: str) -> dict[str, CommittedOffset]: ...

    async def commit(self, group_id: str, entries: dict[str, CommittedOffset]) -> None:
        """Durable once this returns."""
        ...

    async def delete(self, group_id: str, topics: list[str]) -> None: ...


class ProducerIds(Protocol):
    """Producer ids for idempotent producers, never handed out twice, across restarts."""

    async def next_id(self) -> int: ...


@dataclass
class TransactionState:
    """One transactional id's coordinator state, as Kafka's transaction log keeps it.

    `partitions` are (Pulsar topic name, partition index) pairs the open transaction wrote to;
    `offsets` the offsets TxnOffsetCommit sent inside it, per group and partition topic, held
    until the commit. `start_ms` is wall-clock (the timeout must outlive a restart)."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = "Empty"
    start_ms: int = -1
    partitions: list[tuple[str, int]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    offsets: dict[str, dict[str, CommittedOffset]] = field(default_factory=dict)
    updated_ms: int = 0


class TransactionStore(Protocol):
    """The transaction coordinator's state, keyed by transactional id, durable: a restarted
    gateway finishes what was prepared and aborts what timed out."""

    def get(self, transactional_id: str) -> TransactionState | None: ...

    def all(self) -> list[TransactionState]: ...

    async def save(self, state: TransactionState) -> None:
        """Durable once this returns."""
        ...


class ScramCredentials(Protocol):
    """The users store as Kafka's SCRAM credential APIs see it (docs/security.md): users'
    stored keys per mechanism, never a password."""

    def lookup(self, name: str) -> Mapping[str, Any] | None: ...

    def names(self) -> list[str]: ...

    async def set_credential(self, name: str, mechanism: str, keys: dict[str, Any]) -> None: ...

    async def remove_credential(self, name: str, mechanism: str) -> bool: ...


# a client quota's entity: (type, name) pairs, "user" before "client-id"; a None name is
# the type's default (docs/quotas.md)
QuotaEntity = tuple[tuple[str, str | None], ...]


class ClientQuotaStore(Protocol):
    """The client quotas set with AlterClientQuotas, durable, the same on every member."""

    @property
    def empty(self) -> bool:
        """No quota is set at all (the common case: nothing to measure)."""
        ...

    def lookup(self, entity: QuotaEntity) -> Mapping[str, float] | None: ...

    def entries(self) -> list[tuple[QuotaEntity, Mapping[str, float]]]: ...

    async def alter(self, entity: QuotaEntity, values: Mapping[str, float | None]) -> None:
        """Set each key to its value, removing those whose value is None."""
        ...


@dataclass(frozen=True)
class ShareRun:
    """Consecutive offsets of a share partition in one state with one delivery count."""

    first: int
    last: int
    state: int  # share_partition.py's record states
    delivery_count: int
    # the broker dispatching: how many of the broker's redeliveries of the entry were the
    # gateway's own giving back (share_partition.py, `take_handed`); 0 otherwise
    returns: int = 0


@dataclass(frozen=True)
class ShareState:
    """A share group's durable state of one partition (docs/share-groups.md): every offset
    below `start` is done, none at or past `end` was ever delivered, and `runs` hold the
    state and delivery count of those in between. Acquisition locks are not kept: after a
    restart an acquired record is available again, with the delivery it had counted."""

    start: int
    end: int
    runs: tuple[ShareRun, ...] = ()
    # when the broker dispatches: below it the offsets admin settled every record, so an
    # entry the broker hands there is acknowledged, not delivered (docs/share-groups.md)
    floor: int = 0


class ShareStateStore(Protocol):
    """Share groups' (KIP-932) per-partition delivery state, durable and the same on every
    member; `partition_topic` is the Pulsar topic of the partition."""

    def load(self, group_id: str, partition_topic: str) -> ShareState | None: ...

    async def save(self, group_id: str, partition_topic: str, state: ShareState) -> None:
        """Durable once this returns."""
        ...

    def groups(self) -> list[str]:
        """The share groups that hold state for some partition."""
        ...

    async def delete_group(self, group_id: str) -> None: ...

    async def delete(self, group_id: str, partition_topic: str) -> None:
        """The group's state of one partition goes (DeleteShareGroupOffsets); the group
        stays listed."""
        ...

    async def forget_partitions(self, partition_topics: list[str]) -> None:
        """Every group's state of these partitions goes: their topic was deleted."""
        ...


@dataclass(frozen=True)
class HandedEntry:
    """One Pulsar entry the broker handed the gateway's consumer of a share group's Shared
    subscription: the Kafka offsets it holds (`first` on, `count` of them), how often the
    broker delivered it before, and the handle that settles it or gives it back."""

    first: int
    count: int
    redelivery_count: int
    handle: Any = field(compare=False, repr=False)


class ShareFeed(Protocol):
    """The gateway's Shared consumer of one share group's subscription on one partition
    (docs/share-groups.md, "The broker dispatches"): what the broker hands it is what the
    group's share consumers may acquire; an outside consumer of the subscription gets the
    rest."""

    def follow(self, log: PartitionLog) -> None:
        """The partition's log as opened now (one closed when idle is opened again)."""
        ...

    def handed(self, limit: int) -> list[HandedEntry]:
        """Up to `limit` entries handed since the last call (never waits)."""
        ...

    def handed_future(self) -> asyncio.Future[None]:
        """Resolves when an entry is handed (a ShareFetch waits on it)."""
        ...

    def settle(self, entry: HandedEntry) -> None:
        """Acknowledge the entry on the subscription: it is never handed out again."""
        ...

    def give_back(self, entry: HandedEntry) -> None:
        """Give the entry back to the broker, which hands it to any consumer again."""
        ...

    def close(self) -> None:
        """Stop consuming; what is held and not settled goes back to the broker."""
        ...


class ShareFeeds(Protocol):
    """Opens share feeds: one per share group and partition served here."""

    async def open(self, group_id: str, log: PartitionLog, earliest: bool) -> ShareFeed:
        """The group's feed on the partition (`log`); a subscription made now starts at the
        partition's first record (`earliest`) or its end."""
        ...

    async def close(self) -> None:
        """Every feed closes (the listener stops)."""
        ...


class GroupConfigStore(Protocol):
    """Group configs (Kafka's GROUP config resource, IncrementalAlterConfigs): the keys a
    group sets, durable and the same on every member."""

    def get(self, group_id: str) -> Mapping[str, str]: ...

    async def replace(self, group_id: str, configs: Mapping[str, str]) -> None:
        """The group's configs become exactly `configs` (none: its entry is removed)."""
        ...


@dataclass(frozen=True)
class KafkaStorage:
    """Everything the Kafka handler stores, as the composition root hands it over."""

    topics: TopicStore
    offsets: GroupOffsets
    producer_ids: ProducerIds
    # where the gateway keeps its own state: no Kafka topic may map there
    reserved: ReservedNamespaces = ReservedNamespaces()
    # the users store, for DescribeUserScramCredentials and AlterUserScramCredentials
    credentials: ScramCredentials | None = None
    # the transaction coordinator's state; None: transactional ids are refused
    transactions: TransactionStore | None = None
    # who serves which partition, group and transactional id (docs/cluster.md); None: this
    # gateway alone serves everything
    cluster: ClusterView | None = None
    # client quotas (docs/quotas.md); None: none can be set
    quotas: ClientQuotaStore | None = None
    # share groups' delivery state (docs/share-groups.md); None: share groups are refused
    shares: ShareStateStore | None = None
    # group configs (docs/share-groups.md, "Group configs"); None: refused
    group_configs: GroupConfigStore | None = None
    # share groups dispatched by the broker (docs/share-groups.md, "The broker
    # dispatches"); None: the gateway hands out records itself
    share_feeds: ShareFeeds | None = None
