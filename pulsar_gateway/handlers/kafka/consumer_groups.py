"""KIP-848 consumer groups: the coordinator assigns, members reconcile by heartbeat.

The classic protocol (group_coordinator.py) lets one member compute the assignment in a
JoinGroup/SyncGroup round that stops the whole group. In the `consumer` protocol
(ConsumerGroupHeartbeat) each member only heartbeats its subscription and what it owns; the
coordinator computes a target assignment and moves each member toward it on its own:

- The **group epoch** counts changes to what the assignment depends on (a member joined or
  left, a subscription changed, a subscribed topic gained partitions or appeared). The
  **assignment epoch** is the group epoch the current target was computed at.
- Each member has a **member epoch**. A member that holds partitions its target no longer
  gives it is first sent its assignment without them, at its old epoch; once it reports (in
  a heartbeat's owned partitions) that it let them go, it moves to the assignment epoch and
  gets the partitions of its target that no other member holds or is still giving up. So a
  partition is never owned by two members at once, and nobody stops for anybody else.
- A request at another epoch than the member's is fenced (FENCED_MEMBER_EPOCH; the client
  rejoins at epoch 0), one from an unknown member gets UNKNOWN_MEMBER_ID. A member that is
  silent for the session timeout, or keeps partitions past its rebalance timeout, is
  removed. OffsetCommit is checked against the member epoch (STALE_MEMBER_EPOCH).

The server assignor is chosen by the members, as in Kafka: each may name one
(`server_assignor`, the client's `group.remote.assignor`), the group uses the one most of
its members name (ties: the first in SERVER_ASSIGNORS), and `uniform`, Kafka's default,
when none names one. `uniform` deals every partition of the subscribed topics, in order,
round-robin to the members subscribed to its topic; `range` gives each member subscribed
to a topic one contiguous range of its partitions (the first members one more when they do
not divide evenly). Members are sorted by id either way, so the result depends only on the
members and their subscriptions. Membership lives in this coordinator's memory; committed
offsets are durable as for classic groups. A coordinator that restarts (or a group that
moves to another cluster member) answers the old members UNKNOWN_MEMBER_ID and they join
again. docs/compatibility.md
and docs/cluster.md say what clients see.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.kafka_codec.errors import ErrorCode

log = logging.getLogger("gateway.kafka.consumer_groups")

ASSIGNOR = "uniform"  # the default
RANGE = "range"
SERVER_ASSIGNORS = (ASSIGNOR, RANGE)
JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
SWEEP_SECONDS = 0.5
MAX_REGEX_LENGTH = 1000

# a topic name -> its partition indexes
Assignment = dict[str, set[int]]


class TopicCatalog(Protocol):
    """What the coordinator needs to know of the topics (the handler gives it the store's
    view, in Kafka names)."""

    def partitions(self, name: str) -> int | None:
        """How many partitions `name` has; None when there is no such topic."""
        ...

    def names(self) -> Iterable[str]:
        """Every topic a regex subscription may match."""
        ...


@dataclass
class ConsumerMember:
    member_id: str
    epoch: int = 0
    previous_epoch: int = -1
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    subscribed: list[str] = field(default_factory=list)
    regex: str | None = None
    server_assignor: str | None = None  # the one it asked for, if any
    assigned: Assignment = field(default_factory=dict)  # what it may consume now
    revoking: Assignment = field(default_factory=dict)  # taken away, not yet let go of
    revoke_deadline: float = 0.0
    owned: Assignment | None = None  # what it last said it owns
    last_heartbeat: float = 0.0
    send_assignment: bool = True  # its next answer carries its assignment
    # the topics its user may describe (as of its last heartbeat): it is assigned nothing
    # of the others, named or matched, so an assignment never names another tenant's topic
    may_describe: Callable[[str], bool] = field(default=lambda name: True, repr=False)


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topics_seen: dict[str, int] = field(default_factory=dict)  # what the target was built on
    subscriptions_seen: dict[str, list[str]] = field(default_factory=dict)  # and this
    assignor: str = ASSIGNOR  # what the target was computed with

    @property
    def state(self) -> str:
        """Kafka's consumer group states."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        for member in self.members.values():
            if member.epoch != self.assignment_epoch or member.revoking:
                return "Reconciling"
        return "Stable"


@dataclass
class HeartbeatResult:
    error: int
    member_id: str | None = None
    epoch: int = -1
    assignment: Assignment | None = None
    message: str | None = None


def uniform_assignment(
    members: dict[str, ConsumerMember], subscriptions: dict[str, list[str]], topics: dict[str, int]
) -> dict[str, Assignment]:
    """Every partition of each subscribed topic dealt round-robin over the members that
    subscribe to it, sorted by member id, continuing the deal across topics so members get
    an even share in total."""
    target: dict[str, Assignment] = {member_id: {} for member_id in members}
    turn = 0
    for topic in sorted(topics):
        takers = sorted(m for m, names in subscriptions.items() if topic in names)
        if not takers:
            continue
        for partition in range(topics[topic]):
            member_id = takers[turn % len(takers)]
            target[member_id].setdefault(topic, set()).add(partition)
            turn += 1
    return target


def range_assignment(
    members: dict[str, ConsumerMember], subscriptions: dict[str, list[str]], topics: dict[str, int]
) -> dict[str, Assignment]:
    """Each topic's partitions cut into contiguous ranges, one per member subscribed to it
    (sorted by id); the first `partitions % members` get one partition more."""
    target: dict[str, Assignment] = {member_id: {} for member_id in members}
    for topic in sorted(topics):
        takers = sorted(m for m, names in subscriptions.items() if topic in names)
        if not takers:
            continue
        share, extra = divmod(topics[topic], len(takers))
        start = 0
        for position, member_id in enumerate(takers):
            size = share + (1 if position < extra else 0)
            if size:
                target[member_id][topic] = set(range(start, start + size))
            start += size
    return target


ASSIGNMENTS = {ASSIGNOR: uniform_assignment, RANGE: range_assignment}


def preferred_assignor(members: Iterable[ConsumerMember]) -> str:
    """The assignor most members asked for; `uniform` when none asked (module docstring)."""
    asked = Counter(member.server_assignor for member in members if member.server_assignor)
    if not asked:
        return ASSIGNOR
    most = max(asked.values())
    return next(name for name in SERVER_ASSIGNORS if asked.get(name) == most)


def _copy(assignment: Assignment) -> Assignment:
    return {topic: set(parts) for topic, parts in assignment.items() if parts}


def _subset(small: Assignment, big: Assignment) -> bool:
    return all(parts <= big.get(topic, set()) for topic, parts in small.items())


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return _copy({topic: parts - b.get(topic, set()) for topic, parts in a.items()})


def _meet(a: Assignment, b: Assignment) -> Assignment:
    return _copy({topic: parts & b.get(topic, set()) for topic, parts in a.items()})


class ConsumerGroups:
    """The `consumer` protocol groups this gateway coordinates."""

    def __init__(
        self,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 5000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session_timeout = session_timeout_ms / 1000
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.clock = clock
        self.groups: dict[str, ConsumerGroup] = {}
        # whether this gateway coordinates a group (docs/cluster.md); alone: every group
        self.serves: Callable[[str], bool] = lambda _group_id: True
        self._sweeper: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="consumer group sweeper")

    async def close(self) -> None:
        await cancel_and_wait(self._sweeper)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the sweeper must live
                log.exception("consumer group sweep failed")

    def sweep(self) -> None:
        """Remove members silent past the session timeout, or holding partitions they were
        told to give up past their rebalance timeout (Kafka fences them the same way)."""
        now = self.clock()
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if now - member.last_heartbeat > self.session_timeout:
                    self._remove(group, member, "its session timed out")
                elif member.revoking and now > member.revoke_deadline:
                    self._remove(group, member, "it kept partitions past its rebalance timeout")

    def drop_unserved(self) -> None:
        """Groups another cluster member coordinates now: forgotten; their members get
        NOT_COORDINATOR, find the new coordinator and join there."""
        for group_id in [gid for gid in self.groups if not self.serves(gid)]:
            del self.groups[group_id]
            log.info("consumer group %s: no longer coordinated here", group_id)

    # ---- queries ---------------------------------------------------------------------------

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def describe(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(gid for gid, group in self.groups.items() if group.members)

    def validate_commit(self, group_id: str, member_id: str, epoch: int, stale_code: int) -> int:
        """OffsetCommit from a member of a consumer group: its member id and epoch must be
        current (an admin commit, epoch -1 and no member, is refused while it has members,
        as Kafka refuses it)."""
        group = self.groups.get(group_id)
        assert group is not None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch > member.epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if epoch < member.epoch and epoch != member.previous_epoch:
            return stale_code
        return ErrorCode.NONE

    # ---- the heartbeat ---------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        *,
        catalog: TopicCatalog,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        subscribed: list[str] | None = None,
        regex: str | None = None,
        owned: Assignment | None = None,
        client_id: str = "",
        client_host: str = "",
        may_describe: Callable[[str], bool] | None = None,
        server_assignor: str | None = None,
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, message="GroupId can't be empty.")
        if regex is not None:
            problem = _regex_problem(regex)
            if problem:
                return HeartbeatResult(ErrorCode.INVALID_REQUEST, message=problem)
        group = self.groups.get(group_id)
        if epoch == JOIN:
            if subscribed is None and regex is None:
                return HeartbeatResult(
                    ErrorCode.INVALID_REQUEST,
                    message="SubscribedTopicNames or SubscribedTopicRegex must be set in the"
                    " first request.",
                )
            if group is None:
                group = self.groups[group_id] = ConsumerGroup(group_id)
            member_id = member_id or uuid.uuid4().hex
            member = group.members.get(member_id)
            if member is None or member.epoch != 0:
                # a new member, or a known one that starts over: whatever it held is free
                if member is not None:
                    self._remove(group, member, "it joined again")
                member = group.members[member_id] = ConsumerMember(member_id)
                group.epoch += 1
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, message=f"Member {member_id} is not in the group."
                )
            if epoch in (LEAVE, STATIC_LEAVE):
                self._remove(group, member, "it left")
                return HeartbeatResult(ErrorCode.NONE, member_id, epoch)
            if epoch != member.epoch and not (
                epoch == member.previous_epoch
                and owned is not None
                and _subset(owned, member.assigned)
            ):
                return HeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    message=f"The member epoch {epoch} is not the current one ({member.epoch}).",
                )
        member.last_heartbeat = self.clock()
        if epoch == JOIN:
            member.send_assignment = True
        if instance_id is not None:
            member.instance_id = instance_id
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        if may_describe is not None:
            member.may_describe = may_describe
        if subscribed is not None and sorted(subscribed) != sorted(member.subscribed):
            member.subscribed = sorted(set(subscribed))
            group.epoch += 1
        if regex is not None and (regex or None) != member.regex:
            member.regex = regex or None
            group.epoch += 1
        if server_assignor is not None and (server_assignor or None) != member.server_assignor:
            member.server_assignor = server_assignor or None
            group.epoch += 1
        if owned is not None:
            member.owned = _copy(owned)
        self._refresh_target(group, catalog)
        self._reconcile(group, member)
        answer = HeartbeatResult(ErrorCode.NONE, member_id, member.epoch)
        if member.send_assignment:
            answer.assignment = _copy(member.assigned)
            member.send_assignment = False
        return answer

    def _refresh_target(self, group: ConsumerGroup, catalog: TopicCatalog) -> None:
        """Recompute the target when the group epoch moved on, or when a subscribed topic
        appeared or grew (which moves the group epoch on)."""
        subscriptions = {
            member_id: self._topics_of(member, catalog)
            for member_id, member in group.members.items()
        }
        topics: dict[str, int] = {}
        for names in subscriptions.values():
            for name in names:
                count = catalog.partitions(name)
                if count:
                    topics[name] = count
        if topics != group.topics_seen or subscriptions != group.subscriptions_seen:
            # a topic appeared or grew, or a member's rights changed what it may be given
            group.topics_seen, group.subscriptions_seen = topics, subscriptions
            group.epoch += 1
        if group.assignment_epoch == group.epoch:
            return
        group.assignor = preferred_assignor(group.members.values())
        group.target = ASSIGNMENTS[group.assignor](group.members, subscriptions, topics)
        group.assignment_epoch = group.epoch
        log.info(
            "consumer group %s: %s target assignment at epoch %d for %d members",
            group.group_id,
            group.assignor,
            group.epoch,
            len(group.members),
        )

    @staticmethod
    def _topics_of(member: ConsumerMember, catalog: TopicCatalog) -> list[str]:
        """The topics the member subscribes to, named or matched, that its user may
        describe (the others are as if they did not exist)."""
        names = set(member.subscribed)
        if member.regex:
            pattern = re.compile(member.regex)
            names.update(name for name in catalog.names() if pattern.fullmatch(name))
        return sorted(name for name in names if member.may_describe(name))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Move `member` one step toward its target (module docstring)."""
        target = group.target.get(member.member_id, {})
        taken = _minus(member.assigned, target)
        if taken:
            # first it lets go of what it no longer gets, at its current epoch
            member.assigned = _meet(member.assigned, target)
            for topic, parts in taken.items():
                member.revoking.setdefault(topic, set()).update(parts)
            member.revoke_deadline = self.clock() + member.rebalance_timeout_ms / 1000
            member.send_assignment = True
            return
        if member.revoking:
            if member.owned is None or not _subset(member.owned, member.assigned):
                return  # still holding what it was told to give up
            member.revoking = {}
        free = _minus(target, member.assigned)
        for other in group.members.values():
            if other is not member:
                free = _minus(_minus(free, other.assigned), other.revoking)
        if free:
            for topic, parts in free.items():
                member.assigned.setdefault(topic, set()).update(parts)
            member.send_assignment = True
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
            member.send_assignment = True

    def _remove(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.epoch += 1
        log.info(
            "consumer group %s: member %s removed: %s", group.group_id, member.member_id, reason
        )
        if not group.members:
            group.target = {}
            group.topics_seen = {}
            group.subscriptions_seen = {}


def _regex_problem(regex: str) -> str | None:
    """Why a subscription regex is refused (Kafka: INVALID_REQUEST for a bad one)."""
    if len(regex) > MAX_REGEX_LENGTH:
        return f"SubscribedTopicRegex is longer than {MAX_REGEX_LENGTH} characters."
    try:
        re.compile(regex)
    except re.error as exc:
        return f"SubscribedTopicRegex {regex!r} is not a valid regular expression: {exc}"
    return None
