"""Which cluster member serves an AMQP vhost (docs/cluster.md, "AMQP on one port").

A vhost is the unit of ownership: every queue of it, its exchanges and bindings are run by
one member, so RabbitMQ's per-queue semantics hold as in one process. This module only
decides; the listener acts (serves, hands the connection off, or closes it).
"""

from __future__ import annotations

import asyncio
import time

from pulsar_gateway.gateway.cluster.view import ClusterView, Member, vhost_key
from pulsar_gateway.handlers.amqp.broker_model import VhostAccess

# How often a connection waiting for its vhost's owner looks again
_POLL_SECONDS = 0.05


class VhostOwners:
    """The listener's view of vhost ownership."""

    def __init__(self, view: ClusterView, wait_seconds: float) -> None:
        """`wait_seconds`: how long a connection may wait for its vhost to get a serving
        owner (a member that took it over finishing its handover) before it is closed."""
        self.view = view
        self.wait_seconds = wait_seconds

    def serves(self, vhost: str) -> bool:
        return self.view.serves(vhost_key(vhost))

    def route(self, vhost: str, member_to_member: bool) -> VhostAccess | None:
        """None: serve the connection here. ELSEWHERE: hand it to the owner. MOVING: a
        connection handed over by another member (never handed on again, so two members
        that briefly disagree cannot pass it back and forth) for a vhost this member does
        not serve now: 320, and the client reconnects."""
        if self.serves(vhost):
            return None
        return VhostAccess.MOVING if member_to_member else VhostAccess.ELSEWHERE

    async def target(self, vhost: str) -> Member | None:
        """The member to hand a connection for `vhost` to: its owner, once that is another
        member or this one serving it (then through its own member-to-member listener); None
        when neither happened within `wait_seconds` (this member's lease is stale, or it
        is still taking the vhost over)."""
        key = vhost_key(vhost)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            owner = self.view.owner(key)
            me = self.view.me()
            if owner.member_id != me.member_id or self.view.serves(key):
                return owner
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(_POLL_SECONDS)
