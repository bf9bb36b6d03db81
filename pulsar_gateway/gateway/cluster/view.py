"""What every layer may know of the cluster: its members and who owns what.

Pure (no I/O), so handlers import it. Ownership is rendezvous hashing over the live members:
each key goes to the member whose hash of (key, member id) is highest, so every member that
sees the same live set computes the same owner without talking to the others, and a join or
a leave moves only the keys the joining or leaving member wins or held (docs/cluster.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Member:
    member_id: str  # stable name, unique in the cluster ("host-a/1")
    node_id: int  # this member's Kafka broker id, unique in the cluster
    kafka_host: str  # advertised Kafka address clients connect to
    kafka_port: int
    amqp_host: str  # where OTHER MEMBERS reach this member's AMQP listener (for proxying)
    amqp_port: int
    http_port: int  # /health, /metrics


class ClusterView(Protocol):
    def me(self) -> Member: ...

    def members(self) -> list[Member]:
        """Live members, sorted by node_id."""
        ...

    def owner(self, key: str) -> Member:
        """Deterministic (rendezvous hash) over the live members."""
        ...

    def serves(self, key: str) -> bool:
        """owner(key) is me AND my lease is fresh AND any handover wait for a newly
        acquired key has passed."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Membership changed (or this member stopped or started serving): drop what you
        no longer serve."""
        ...

    def status(self) -> dict[str, Any]:
        """JSON-able: members, lease ages, my epoch, counts of owned keys."""
        ...


def partition_key(topic: str, partition: int) -> str:
    """A Kafka partition, by the topic name Kafka clients use."""
    return f"kafka/partition/{topic}/{partition}"


def group_key(group_id: str) -> str:
    return f"kafka/group/{group_id}"


def txn_key(transactional_id: str) -> str:
    return f"kafka/txn/{transactional_id}"


def vhost_key(vhost: str) -> str:
    return f"amqp/vhost/{vhost}"


def score(key: str, member_id: str) -> int:
    """The rendezvous weight of `member_id` for `key`: a stable 64-bit hash (never Python's
    salted hash(), which differs per process)."""
    digest = hashlib.blake2b(
        member_id.encode(), digest_size=8, key=key.encode()[:64], person=b"gw-owner"
    ).digest()
    return int.from_bytes(digest, "big")


def owner_of(key: str, members: Sequence[Member]) -> Member:
    """The member with the highest weight for `key` (ties, impossible in practice, go to the
    smaller member id). `members` must not be empty."""
    if not members:
        raise ValueError("no members")
    return max(members, key=lambda member: (score(key, member.member_id), _neg(member.member_id)))


def _neg(text: str) -> tuple[int, ...]:
    return tuple(-ord(char) for char in text)


def sorted_members(members: Iterable[Member]) -> list[Member]:
    return sorted(members, key=lambda member: (member.node_id, member.member_id))


class SingleMemberView:
    """One gateway alone (no `[cluster]` section): it is the only member and owns every key.
    A real view, not a stub: the same calls answer as a cluster of one would."""

    def __init__(self, me: Member) -> None:
        self._me = me
        self._callbacks: list[Callable[[], None]] = []

    def advertise(self, me: Member) -> None:
        """The listeners' bound addresses, known once they started (a port of 0)."""
        self._me = me

    def me(self) -> Member:
        return self._me

    def members(self) -> list[Member]:
        return [self._me]

    def owner(self, key: str) -> Member:
        return self._me

    def serves(self, key: str) -> bool:
        return True

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)  # membership of one never changes

    def status(self) -> dict[str, Any]:
        return {
            "enabled": False,
            "me": self._me.member_id,
            "epoch": 0,
            "serving": True,
            "lease_age_seconds": 0.0,
            "members": [
                {**member_fields(self._me), "lease_age_seconds": 0.0, "epoch": 0, "me": True}
            ],
        }


def member_fields(member: Member) -> dict[str, Any]:
    """A member as the cluster status shows it."""
    return {
        "member_id": member.member_id,
        "node_id": member.node_id,
        "kafka": f"{member.kafka_host}:{member.kafka_port}",
        "amqp": f"{member.amqp_host}:{member.amqp_port}",
        "http_port": member.http_port,
    }
