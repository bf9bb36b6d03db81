"""The classic Kafka group protocol's state: a group's members, their protocols and join and
sync results, the states a group moves through, and the vote on a protocol. The coordinator
(group_coordinator.py) moves groups between states; this module holds what it moves.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

from pulsar_gateway.kafka_codec.errors import ErrorCode

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


Protocols = list[tuple[str, bytes]]


@dataclass
class JoinResult:
    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class JoinRequest:
    """What a JoinGroup says about the member, apart from its ids: kept together because
    every join path (new, known, static replacement) builds or updates a member from it."""

    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: Protocols


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_seconds: float
    rebalance_seconds: float
    protocol_type: str
    protocols: Protocols
    last_heartbeat: float
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    is_new: bool = True
    joined_at: float = 0.0

    def metadata_for(self, name: str | None) -> bytes:
        for protocol, metadata in self.protocols:
            if protocol == name:
                return metadata
        return b""

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class Group:
    group_id: str
    generation: int = 0
    state: str = EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(
        default_factory=dict
    )  # ErrorCode.MEMBER_ID_REQUIRED ids -> deadline
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_deadline: float = 0.0
    initial_until: float = 0.0

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names)
        for member in members[1:]:
            common &= set(member.protocol_names)
        return common

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str | None:
        """Kafka's vote: each member votes for its first supported candidate; most votes win."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        order: list[str] = []
        for member in self.members.values():
            choice = next(name for name in member.protocol_names if name in candidates)
            if choice not in votes:
                order.append(choice)
            votes[choice] = votes.get(choice, 0) + 1
        return max(order, key=lambda name: votes[name])

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        if not instance_id:
            return False
        current = self.static.get(instance_id)
        return current is not None and current != member_id

    def join_result(self, member: Member, with_members: bool) -> JoinResult:
        """A successful JoinGroup answer for `member` in the current generation; the leader
        (when asked `with_members`) gets every member's metadata to compute the assignment."""
        members = []
        if with_members and member.member_id == self.leader:
            members = [
                (m.member_id, m.instance_id, m.metadata_for(self.protocol_name))
                for m in self.members.values()
            ]
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader or "",
            members,
        )

    def sync_result(self, member: Member) -> SyncResult:
        """A successful SyncGroup answer: the member's assignment from the leader."""
        return SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, member.assignment)

    def subscribed_topics(self) -> set[str] | None:
        """Topics of the consumer protocol subscriptions (None: not a consumer group)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            topics.update(parse_subscription(member.metadata_for(self.protocol_name)))
        return topics


def parse_subscription(metadata: bytes) -> list[str]:
    """Topic names of a ConsumerProtocolSubscription (version, [topic], ...); [] if malformed."""
    try:
        count = struct.unpack_from(">i", metadata, 2)[0]
        position = 6
        topics = []
        for _ in range(max(count, 0)):
            size = struct.unpack_from(">h", metadata, position)[0]
            position += 2
            topics.append(bytes(metadata[position : position + size]).decode())
            position += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return []
