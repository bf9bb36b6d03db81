"""Leases, by each member's own monotonic clock (pure: time is a value passed in).

A member's own lease is fresh while the last heartbeat it SUCCESSFULLY stored was sent
less than `lease_seconds - margin` ago; the others consider it dead `lease_seconds` after
the last heartbeat of it they read, which is later than when it stopped itself (its send
came before their read, and the margin absorbs clock-rate differences). See
docs/cluster.md, "Leases and fencing".
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pulsar_gateway.gateway.cluster.view import Member, sorted_members

MAX_HEARTBEAT_BYTES = 4096  # a heartbeat is ~250 bytes; anything bigger is not one of ours


@dataclass(frozen=True)
class Heartbeat:
    member: Member
    epoch: int  # grows each time the member (re)joins: after a start or a stale lease
    leaving: bool = False  # a clean stop: drop me now rather than after the lease


def encode_heartbeat(beat: Heartbeat) -> bytes:
    member = beat.member
    return json.dumps(
        {
            "member_id": member.member_id,
            "node_id": member.node_id,
            "kafka_host": member.kafka_host,
            "kafka_port": member.kafka_port,
            "amqp_host": member.amqp_host,
            "amqp_port": member.amqp_port,
            "http_port": member.http_port,
            "epoch": beat.epoch,
            "leaving": beat.leaving,
        },
        separators=(",", ":"),
    ).encode()


def decode_heartbeat(payload: bytes) -> Heartbeat:
    """ValueError for anything that is not a well-formed heartbeat (the topic is the
    gateway's own, but a bad record must never stop the membership reader)."""
    if len(payload) > MAX_HEARTBEAT_BYTES:
        raise ValueError("heartbeat too large")
    try:
        record = json.loads(payload)
    except RecursionError:  # nested deeper than the parser goes
        raise ValueError("heartbeat nested too deeply") from None
    if not isinstance(record, dict):
        raise ValueError("heartbeat is not an object")
    texts = ("member_id", "kafka_host", "amqp_host")
    numbers = ("node_id", "kafka_port", "amqp_port", "http_port", "epoch")
    for name in texts:
        if not isinstance(record.get(name), str):
            raise ValueError(f"heartbeat field {name} is not a string")
    for name in numbers:
        value = record.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"heartbeat field {name} is not a non-negative integer")
    if not record["member_id"]:
        raise ValueError("heartbeat without a member id")
    member = Member(
        record["member_id"],
        record["node_id"],
        record["kafka_host"],
        record["kafka_port"],
        record["amqp_host"],
        record["amqp_port"],
        record["http_port"],
    )
    return Heartbeat(member, record["epoch"], bool(record.get("leaving", False)))


class SelfLease:
    """This member's own lease."""

    def __init__(self, lease_seconds: float, margin_seconds: float) -> None:
        self.valid_for = lease_seconds - margin_seconds
        self._stored_sent_at: float | None = None

    def stored(self, sent_at: float) -> None:
        """A heartbeat sent at `sent_at` (before its send began) is now stored."""
        if self._stored_sent_at is None or sent_at > self._stored_sent_at:
            self._stored_sent_at = sent_at

    def fresh(self, now: float) -> bool:
        sent = self._stored_sent_at
        return sent is not None and now - sent < self.valid_for

    def age(self, now: float) -> float | None:
        sent = self._stored_sent_at
        return None if sent is None else now - sent

    def forget(self) -> None:
        """Stale for good: the next stored heartbeat (of a new epoch) starts a new lease."""
        self._stored_sent_at = None


@dataclass
class _Peer:
    member: Member
    epoch: int
    seen_at: float


class PeerTable:
    """The other members as this member read their heartbeats."""

    def __init__(self, my_id: str, lease_seconds: float) -> None:
        self.my_id = my_id
        self.lease_seconds = lease_seconds
        self._peers: dict[str, _Peer] = {}

    def seen(self, beat: Heartbeat, now: float) -> bool:
        """Apply a heartbeat read now; True when the live set (or a member's address or
        epoch) changed."""
        member_id = beat.member.member_id
        if member_id == self.my_id:
            return False
        known = self._peers.get(member_id)
        if known is not None and beat.epoch < known.epoch:
            return False  # an older life of that member, read late
        if beat.leaving:
            return self._peers.pop(member_id, None) is not None
        self._peers[member_id] = _Peer(beat.member, beat.epoch, now)
        return known is None or known.epoch != beat.epoch or known.member != beat.member

    def expire(self, now: float) -> list[Member]:
        """Drop the members not heard from for a lease; returns them."""
        gone = [p for p in self._peers.values() if now - p.seen_at >= self.lease_seconds]
        for peer in gone:
            del self._peers[peer.member.member_id]
        return [peer.member for peer in gone]

    def refresh_all(self, now: float) -> None:
        """After this member's own pause, its reader is behind: count every known member as
        seen now rather than declare them dead on stale reads."""
        for peer in self._peers.values():
            peer.seen_at = now

    def members(self) -> list[Member]:
        return sorted_members(peer.member for peer in self._peers.values())

    def describe(self, now: float) -> list[tuple[Member, int, float]]:
        """(member, epoch, seconds since its last heartbeat was read) per peer."""
        return [(p.member, p.epoch, now - p.seen_at) for p in self._peers.values()]
