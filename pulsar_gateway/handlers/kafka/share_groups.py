"""Share groups (KIP-932): members, their share sessions and the groups' share partitions.

Membership is KIP-848's shape without its reconciliation: a member joins with epoch 0 and
its subscribed topic names, every change of the group bumps the group epoch, and a
heartbeat answers the member's epoch and assignment. The assignment gives every member
every partition of the topics it subscribes to: records, not partitions, are what share
consumers split, so two members of one partition take turns on its records.

A share session (ShareFetch's epoch 0 opens one, -1 closes it) is the set of partitions
a member fetches from; this gateway keeps it in memory, and a client whose session is gone
(a restart) opens a new one on SHARE_SESSION_NOT_FOUND. The delivery state of each share
partition (share_partition.py) is stored through the port after every change, before the
answer goes out, so what a consumer was told is acknowledged stays so across a crash
(docs/share-groups.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.kafka.port import (
    PartitionLog,
    ShareFeeds,
    ShareState,
    ShareStateStore,
)
from pulsar_gateway.handlers.kafka.share_broker import BrokerHold
from pulsar_gateway.handlers.kafka.share_partition import SharePartition
from pulsar_gateway.kafka_codec.errors import ErrorCode

log = logging.getLogger("gateway.kafka.share")

SWEEP_SECONDS = 1.0
LEAVE_EPOCH = -1
ASSIGNOR = "simple"


@dataclass(frozen=True)
class ShareSettings:
    """Kafka's broker settings for share groups, under the gateway's names."""

    record_lock_ms: int = 30000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_in_flight: int = 2000  # group.share.partition.max.record.locks
    auto_offset_reset: str = "latest"  # share.auto.offset.reset
    session_timeout_ms: int = 45000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size
    max_sessions: int = 2000  # group.share.max.share.sessions


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    subscribed: list[str]
    rack_id: str | None
    client_id: str
    client_host: str
    last_seen: float


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass
class ShareSession:
    epoch: int
    # (topic id, index), as the member's requests name them
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)


@dataclass(frozen=True)
class HeartbeatResult:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str = ""
    epoch: int = -1
    topics: tuple[str, ...] = ()


class ShareGroups:
    """The share groups this gateway coordinates, and the share partitions it serves."""

    def __init__(
        self,
        store: ShareStateStore | None,
        settings: ShareSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        feeds: ShareFeeds | None = None,
    ) -> None:
        self.store = store
        # the broker dispatches (docs/share-groups.md): each share partition's feed
        self.feeds = feeds
        self.holds: dict[tuple[str, str, int], BrokerHold] = {}
        self.settings = settings or ShareSettings()
        self.clock = clock
        self.groups: dict[str, ShareGroup] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        # one lock per share partition: a fetch reads the log between choosing and acquiring
        self.locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        # whether this gateway coordinates a group, and serves a partition (its Pulsar
        # topic, index) (docs/cluster.md); alone: every one
        self.serves: Callable[[str], bool] = lambda _group_id: True
        self.serves_partition: Callable[[str, int], bool] = lambda _topic, _index: True
        # each group's own configs (the GROUP config resource): they win over `settings`
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}

    def lock_ms(self, group_id: str) -> int:
        own = self.group_configs(group_id).get("share.record.lock.duration.ms")
        return int(own) if own else self.settings.record_lock_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        own = self.group_configs(group_id).get("share.heartbeat.interval.ms")
        return int(own) if own else self.settings.heartbeat_interval_ms

    def _session_timeout(self, group_id: str) -> float:
        own = self.group_configs(group_id).get("share.session.timeout.ms")
        return (int(own) if own else self.settings.session_timeout_ms) / 1000

    def read_committed(self, group_id: str) -> bool:
        """`share.isolation.level` (a group config; Kafka's default read_uncommitted)."""
        return self.group_configs(group_id).get("share.isolation.level") == "read_committed"

    def _auto_offset_reset(self, group_id: str) -> str:
        own = self.group_configs(group_id).get("share.auto.offset.reset")
        return own or self.settings.auto_offset_reset

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="share group sweeper")

    async def close(self) -> None:
        await self.close_feeds()
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the sweeper must live
                log.exception("share group sweep failed")

    async def sweep(self) -> None:
        """Members silent past the session timeout leave; lapsed locks are released."""
        now = self.clock()
        for group in list(self.groups.values()):
            timeout = self._session_timeout(group.group_id)
            for member in list(group.members.values()):
                if now - member.last_seen > timeout:
                    log.info("share member %s of %s timed out", member.member_id, group.group_id)
                    await self.leave(group.group_id, member.member_id)
        for key, partition in list(self.partitions.items()):
            if partition.expire(now):
                await self.save(key)
        # what no one uses any more is read again from the store when it is
        active = {group_id for group_id, _member in self.sessions}
        for group_id in [g for g, group in self.groups.items() if not group.members]:
            del self.groups[group_id]
        for key, partition in list(self.partitions.items()):
            idle = key[0] not in active and key[0] not in self.groups and not partition.held()
            hold = self.holds.get(key)
            if hold is not None and hold.partly_settled(partition):
                idle = False  # its consumer closing would hand the settled records out again
            moved = not self.serves_partition(key[1], key[2])  # one drop_unserved had to leave
            if (idle or moved) and not self._in_use(key):
                self._drop(key)

    def drop_unserved(self) -> None:
        """Groups and share partitions another cluster member serves now: forgotten, so
        that when one comes back here it is read again from the store, as its last
        server left it."""
        for group_id in [gid for gid in self.groups if not self.serves(gid)]:
            del self.groups[group_id]
        for key in [k for k in self.partitions if not self.serves_partition(k[1], k[2])]:
            if not self._in_use(key):  # a request under way ends first; the next is refused
                self._drop(key)

    def _drop(self, key: tuple[str, str, int]) -> None:
        """Forget a share partition; its feed closes, so what it held goes to others."""
        self.partitions.pop(key, None)
        self.locks.pop(key, None)
        hold = self.holds.pop(key, None)
        if hold is not None:
            hold.close()

    async def close_feeds(self) -> None:
        for key in list(self.holds):
            self.holds.pop(key).close()
        if self.feeds is not None:
            await self.feeds.close()

    def _in_use(self, key: tuple[str, str, int]) -> bool:
        lock = self.locks.get(key)
        return lock is not None and lock.locked()

    # ---- membership --------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        subscribed: list[str] | None,
        rack_id: str | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        group = self.groups.get(group_id) or ShareGroup(group_id)
        now = self.clock()
        member = group.members.get(member_id) if member_id else None
        if epoch == 0:
            if member is None:
                if len(group.members) >= self.settings.max_size:
                    return HeartbeatResult(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"The share group has reached its maximum capacity of "
                        f"{self.settings.max_size} members.",
                    )
                if not subscribed:
                    return HeartbeatResult(
                        ErrorCode.INVALID_REQUEST,
                        "SubscribedTopicNames must be set in first request.",
                    )
                member = ShareMember(
                    member_id or uuid.uuid4().hex,
                    0,
                    sorted(set(subscribed)),
                    rack_id,
                    client_id,
                    client_host,
                    now,
                )
                group.members[member.member_id] = member
                group.epoch += 1
                self.groups[group_id] = group
        elif member is None:
            return HeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in share group {group_id}."
            )
        elif epoch != member.epoch:
            return HeartbeatResult(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has epoch {epoch}, the group knows {member.epoch}.",
            )
        if subscribed is not None and sorted(set(subscribed)) != member.subscribed:
            member.subscribed = sorted(set(subscribed))
            group.epoch += 1
        member.last_seen = now
        member.epoch = group.epoch
        return HeartbeatResult(
            member_id=member.member_id, epoch=member.epoch, topics=tuple(member.subscribed)
        )

    async def leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        """The member leaves: its sessions end and what it holds is released."""
        group = self.groups.get(group_id)
        if group is None or group.members.pop(member_id, None) is None:
            return HeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in share group {group_id}."
            )
        group.epoch += 1
        await self.close_session(group_id, member_id)
        return HeartbeatResult(member_id=member_id, epoch=LEAVE_EPOCH)

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def group_ids(self) -> list[str]:
        """Share groups with members here or with stored state."""
        stored = self.store.groups() if self.store is not None else []
        return sorted(set(self.groups) | set(stored))

    def state_of(self, group_id: str) -> str:
        group = self.groups.get(group_id)
        return group.state if group is not None else "Empty"

    def knows(self, group_id: str) -> bool:
        return group_id in self.group_ids()

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups: only an empty share group; its delivery state goes."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.NON_EMPTY_GROUP
        self.groups.pop(group_id, None)
        for key in [key for key in self.partitions if key[0] == group_id]:
            self._drop(key)
        if self.store is not None:
            await self.store.delete_group(group_id)
        return ErrorCode.NONE

    # ---- share sessions ------------------------------------------------------------------

    async def open_session(self, group_id: str, member_id: str) -> ShareSession:
        """A new session (replacing the member's last); at `max_sessions` the least
        recently used one is evicted (its member opens a new one on SHARE_SESSION_NOT_FOUND)."""
        self.sessions.pop((group_id, member_id), None)
        while len(self.sessions) >= self.settings.max_sessions:
            old_group, old_member = next(iter(self.sessions))
            await self.close_session(old_group, old_member)
        session = ShareSession(epoch=1)
        self.sessions[(group_id, member_id)] = session
        return session

    def session(self, group_id: str, member_id: str, epoch: int) -> ShareSession | int:
        """The member's session at `epoch` (then the next epoch is expected), or an error."""
        session = self.sessions.pop((group_id, member_id), None)
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        self.sessions[(group_id, member_id)] = session  # the most recently used, last
        if session.epoch != epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        return session

    async def close_session(self, group_id: str, member_id: str) -> None:
        """Release what the member holds in every partition of its session."""
        self.sessions.pop((group_id, member_id), None)
        for key, partition in list(self.partitions.items()):
            if key[0] == group_id and partition.release_member(member_id):
                await self.save(key)

    async def release(self, member_id: str, key: tuple[str, str, int]) -> None:
        """The member forgot one partition of its session: what it holds there is released."""
        partition = self.partitions.get(key)
        if partition is not None:
            async with self.lock(key):
                if partition.release_member(member_id):
                    await self.save(key)

    # ---- share partitions ----------------------------------------------------------------

    def lock(self, key: tuple[str, str, int]) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())

    def partition(
        self, key: tuple[str, str, int], log_start: int, log_end: int, topic_id: str = ""
    ) -> SharePartition:
        """The share partition of (group, Pulsar topic, index): in memory, else as stored,
        else new at the log's start or end (`share.auto.offset.reset`). A copy in memory
        read for another topic id is of a deleted topic whose successor has the same Pulsar
        topics (a backend that deletes): it goes, and so did its stored state."""
        found = self.partitions.get(key)
        if found is not None and found.topic_id != topic_id:
            found = None
        lock_seconds = self.lock_ms(key[0]) / 1000
        if found is None:
            limits = (
                lock_seconds,
                self.settings.delivery_count_limit,
                self.settings.max_in_flight,
            )
            stored = None
            if self.store is not None:
                stored = self.store.load(key[0], _partition_topic(key))
            if stored is not None:
                found = SharePartition.restore(stored, *limits, disowned=self.feeds is not None)
            else:
                earliest = self._auto_offset_reset(key[0]) == "earliest"
                first = log_start if earliest else log_end
                found = SharePartition(first, first, *limits)
            found.topic_id = topic_id
            if self.feeds is not None:
                found.disown()  # the broker hands the gateway what is its
                old = self.holds.pop(key, None)
                if old is not None:
                    old.close()
            self.partitions[key] = found
        found.lock_seconds = lock_seconds  # a group config changed lately applies at once
        found.skip_to(log_start)
        return found

    async def hold(self, key: tuple[str, str, int], log: PartitionLog) -> BrokerHold | None:
        """The share partition's hold on the broker's entries (opened on first use), when
        the broker dispatches; None when the gateway does."""
        if self.feeds is None:
            return None
        found = self.holds.get(key)
        if found is None:
            earliest = self._auto_offset_reset(key[0]) == "earliest"
            found = BrokerHold(await self.feeds.open(key[0], log, earliest))
            self.holds[key] = found
        found.feed.follow(log)
        return found

    async def save(self, key: tuple[str, str, int]) -> None:
        """Store the share partition's state; then (the broker dispatching) settle and give
        back its entries as it says: an acknowledgement lost to a crash between the two
        brings a settled entry again (at least once), never loses one."""
        partition = self.partitions.get(key)
        if partition is not None and self.store is not None:
            await self.store.save(key[0], _partition_topic(key), partition.state())
        hold = self.holds.get(key)
        if partition is not None and hold is not None:
            hold.reconcile(partition)

    # ---- share group offsets (DescribeShareGroupOffsets and its kin) -----------------------

    def state_of_partition(
        self, key: tuple[str, str, int], topic_id: str = ""
    ) -> ShareState | None:
        """The share partition's state: this gateway's copy (read for the topic id), else
        the stored one; None when the group never read the partition."""
        found = self.partitions.get(key)
        if found is not None and found.topic_id == topic_id:
            return found.state()
        return self.store.load(key[0], _partition_topic(key)) if self.store is not None else None

    async def reset(self, key: tuple[str, str, int], start: int) -> None:
        """AlterShareGroupOffsets: the share partition starts afresh at `start`, nothing in
        flight and no delivery counted; stored before this returns. The copy in memory
        goes, so the next use reads what was stored."""
        if self.store is None:
            return
        async with self.lock(key):
            # the broker dispatching, entries it hands below the new start are settled
            state = ShareState(start, start, floor=start if self.feeds is not None else 0)
            await self.store.save(key[0], _partition_topic(key), state)
            self._drop(key)

    async def forget(self, key: tuple[str, str, int]) -> None:
        """DeleteShareGroupOffsets: the group's state of the partition goes; it starts
        there again as `share.auto.offset.reset` says."""
        if self.store is None:
            return
        async with self.lock(key):
            await self.store.delete(key[0], _partition_topic(key))
            self._drop(key)


def _partition_topic(key: tuple[str, str, int]) -> str:
    """The Pulsar topic that stores the partition, as the store keys it."""
    return partition_topic(key[1], key[2])
