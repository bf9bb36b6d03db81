"""Cluster membership through Pulsar: heartbeats in the metadata namespace, leases with
epochs, rendezvous ownership over the live members (docs/cluster.md).

Every member appends a heartbeat to `persistent://<metadata_namespace>/cluster-heartbeats`
every `heartbeat_seconds` and reads everyone's from the position of its own first one on.
No coordination service and no broker feature beyond a plain topic and a reader
(pulsar-lite has neither access modes nor an admin API: docs/backend.md).

Fencing is local. `serves()` checks this member's own lease by its own monotonic clock on
every call: once stale (a pause, a broker it cannot reach) it stops serving everything at
once, tells its listeners (`on_change`), and rejoins under a new epoch. A (re)joining member
serves nothing until about two heartbeats after its first stored one, so that the members
that served its keys meanwhile have read the join and let go; a member that gains keys
from one that left first lets the catch-up hook (the metadata store reading to its end)
run, and until one that began after the latest change is done, serves only the keys it
owned under every member list since the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.cluster.leases import (
    Heartbeat,
    PeerTable,
    SelfLease,
    decode_heartbeat,
    encode_heartbeat,
)
from pulsar_gateway.gateway.cluster.view import Member, member_fields, owner_of, sorted_members
from pulsar_gateway.gateway.messages import MessageKey, OutMessage
from pulsar_gateway.gateway.waiting import cancel_and_wait

log = logging.getLogger("gateway.cluster")

MAX_OWNER_CACHE = 100_000  # keys whose owner is remembered until the membership changes
CATCH_UP_SECONDS = 30.0  # a catch-up that takes longer is retried


def heartbeats_topic(metadata_namespace: str) -> str:
    return f"persistent://{metadata_namespace}/cluster-heartbeats"


class PulsarMembership:
    """A `ClusterView` whose members find each other through a Pulsar topic."""

    def __init__(
        self,
        backend: PulsarBackend,
        metadata_namespace: str,
        me: Member,
        heartbeat_seconds: float,
        lease_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.topic = heartbeats_topic(metadata_namespace)
        self._me = me
        self.heartbeat_seconds = heartbeat_seconds
        self.lease_seconds = lease_seconds
        # a joining member waits this long after its first stored heartbeat
        self.join_wait = 2 * heartbeat_seconds
        self._clock = clock
        self._lease = SelfLease(lease_seconds, margin_seconds=heartbeat_seconds)
        self._peers = PeerTable(me.member_id, lease_seconds)
        self._members: list[Member] = [me]
        self._owners: dict[str, Member] = {}
        # the member lists in effect since the last completed catch-up (empty: none
        # pending): a key is served before the next one only if it was mine in all of them
        self._previous: list[list[Member]] = []
        self._epoch = 0
        self._joined_at: float | None = None  # send time of this epoch's first stored beat
        self._serving = False
        self._rejoin = True
        self._callbacks: list[Callable[[], None]] = []
        self._catch_up: Callable[[], Awaitable[None]] | None = None
        self._key_sources: dict[str, Callable[[], Iterable[str]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._handover: asyncio.Task[None] | None = None
        self._stream: Any = None
        self._serving_event = asyncio.Event()
        self.fenced = 0  # times this member found its lease stale and stopped serving
        self._failures_logged_at = 0.0

    # ---- the view --------------------------------------------------------------------------

    def me(self) -> Member:
        return self._me

    def members(self) -> list[Member]:
        return list(self._members)

    def owner(self, key: str) -> Member:
        found = self._owners.get(key)
        if found is None:
            if len(self._owners) >= MAX_OWNER_CACHE:
                self._owners.clear()
            found = self._owners[key] = owner_of(key, self._members)
        return found

    def serves(self, key: str) -> bool:
        if not self._serving:
            # joining or rejoining: nothing to stop. Fencing here would also void the join's
            # heartbeat in flight (`_beat` renews no lease once fenced), so a joining member
            # asked by its clients during every heartbeat rejoined every second, for 40 s
            # in one kill -9 test run (docs/cluster.md, "Fencing").
            return False
        if not self._lease.fresh(self._clock()):
            self._fence()
            return False
        if self.owner(key).member_id != self._me.member_id:
            return False
        my_id = self._me.member_id
        return all(owner_of(key, members).member_id == my_id for members in self._previous)

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    @property
    def serving(self) -> bool:
        """Joined, lease fresh, caught up: serving its share."""
        return self._serving and self._lease.fresh(self._clock())

    def status(self) -> dict[str, Any]:
        now = self._clock()
        age = self._lease.age(now)
        members = [
            {
                **member_fields(self._me),
                "epoch": self._epoch,
                "lease_age_seconds": None if age is None else round(age, 3),
                "me": True,
            }
        ]
        for member, epoch, seen in self._peers.describe(now):
            members.append(
                {
                    **member_fields(member),
                    "epoch": epoch,
                    "lease_age_seconds": round(seen, 3),
                    "me": False,
                }
            )
        members.sort(key=lambda item: (item["node_id"], item["member_id"]))
        owned = {
            name: sum(1 for key in source() if self.serves(key))
            for name, source in self._key_sources.items()
        }
        return {
            "enabled": True,
            "me": self._me.member_id,
            "epoch": self._epoch,
            "serving": self.serving,
            "lease_age_seconds": None if age is None else round(age, 3),
            "lease_seconds": self.lease_seconds,
            "heartbeat_seconds": self.heartbeat_seconds,
            "fenced": self.fenced,
            "members": members,
            "owned": owned,
        }

    # ---- wiring ----------------------------------------------------------------------------

    def advertise(self, me: Member) -> None:
        """The listeners' bound addresses (a port of 0 is known only once they started);
        before `start`."""
        self._me = me
        self._members = [me]
        self._peers.my_id = me.member_id

    def set_catch_up(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run before serving keys gained from another member (the metadata store reading
        to the end of its log, so the previous owner's last commits are in)."""
        self._catch_up = hook

    def add_key_source(self, name: str, keys: Callable[[], Iterable[str]]) -> None:
        """Keys in use (open partitions, groups), counted per owner in `status()`."""
        self._key_sources[name] = keys

    # ---- running ---------------------------------------------------------------------------

    async def start(self, timeout: float = 60.0) -> None:
        """Join: the first heartbeat, the reader from it on; returns once serving."""
        first = await self._beat()
        if first is None:
            raise RuntimeError(f"cluster: cannot store a heartbeat in {self.topic}")
        self._stream = await self.backend.open_reader(self.topic, first)
        self._tasks = [
            asyncio.ensure_future(self._beat_loop()),
            asyncio.ensure_future(self._read_loop()),
        ]
        try:
            await asyncio.wait_for(self._serving_event.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"cluster: {self._me.member_id} joined but was not serving {timeout:.0f} s later"
            ) from None

    async def stop(self) -> None:
        """Leave: stop serving, tell the others (they take over at once), stop the tasks."""
        self._serving = False
        await cancel_and_wait(*self._tasks, self._handover)
        with contextlib.suppress(Exception):
            leaving = OutMessage(encode_heartbeat(Heartbeat(self._me, self._epoch, leaving=True)))
            await asyncio.wait_for(self.backend.send(self.topic, [leaving], batching=False), 2)
        if self._stream is not None:
            with contextlib.suppress(Exception):
                await self._stream.close()

    async def wait_serving(self, timeout: float) -> None:
        await asyncio.wait_for(self._serving_event.wait(), timeout)

    async def _beat(self) -> MessageKey | None:
        """One heartbeat; on success the lease runs from before its send began."""
        started = self._clock()
        if self._rejoin:
            self._rejoin = False
            self._epoch = max(self._epoch + 1, time.time_ns() // 1_000_000)
            self._joined_at = None
            self._peers.refresh_all(started)
            log.info("cluster: %s joins under epoch %d", self._me.member_id, self._epoch)
        epoch = self._epoch
        beat = OutMessage(encode_heartbeat(Heartbeat(self._me, epoch)))
        try:
            stored, _ = await asyncio.wait_for(
                self.backend.send(self.topic, [beat], batching=False), self.lease_seconds
            )
        except Exception as exc:  # a broker away: the lease runs out and this member fences
            now = self._clock()
            if now - self._failures_logged_at >= 10:
                self._failures_logged_at = now
                log.warning("cluster: heartbeat not stored (%s)", exc or type(exc).__name__)
            return None
        if self._rejoin or epoch != self._epoch:
            return stored  # fenced while it was in flight: it renews no lease
        self._lease.stored(started)
        if self._joined_at is None:
            self._joined_at = started
        return stored

    async def _beat_loop(self) -> None:
        while True:
            started = self._clock()
            if not self._lease.fresh(started):
                self._fence()
            await self._beat()
            now = self._clock()
            gone = self._peers.expire(now)
            if gone:
                log.warning(
                    "cluster: %s no longer heard from: taking over",
                    ", ".join(member.member_id for member in gone),
                )
                self._membership_changed()
            if not self._serving and self._joined_at is not None:
                if now - self._joined_at >= self.join_wait and self._lease.fresh(now):
                    await self._start_serving()
            await asyncio.sleep(max(0.0, self.heartbeat_seconds - (self._clock() - started)))

    async def _start_serving(self) -> None:
        if not await self._caught_up():
            return
        if not self._lease.fresh(self._clock()) or self._rejoin:
            return
        self._serving = True
        self._previous = []
        self._serving_event.set()
        log.info(
            "cluster: %s serving (epoch %d, %d members)",
            self._me.member_id,
            self._epoch,
            len(self._members),
        )
        self._notify()

    async def _caught_up(self) -> bool:
        if self._catch_up is None:
            return True
        try:
            await asyncio.wait_for(self._catch_up(), CATCH_UP_SECONDS)
        except Exception as exc:
            log.warning("cluster: catching up the metadata failed (%s); retrying", exc)
            return False
        return True

    async def _read_loop(self) -> None:
        stream = self._stream
        bad = 0
        while True:
            try:
                batch = await stream.read_batch(1000, timeout=self.heartbeat_seconds)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the backend reconnects; keep reading
                log.warning("cluster: reading heartbeats failed (%s); retrying", exc)
                await asyncio.sleep(self.heartbeat_seconds)
                continue
            now = self._clock()
            changed = False
            for message in batch:
                try:
                    beat = decode_heartbeat(message.payload or b"")
                except ValueError as exc:
                    bad += 1
                    if bad == 1 or bad % 1000 == 0:
                        log.warning("cluster: %d unreadable heartbeat records (%s)", bad, exc)
                    continue
                changed |= self._peers.seen(beat, now)
            if changed:
                self._membership_changed()

    def _membership_changed(self) -> None:
        old = self._members
        new = sorted_members([self._me, *self._peers.members()])
        if new == old:
            return
        self._members = new
        self._owners.clear()
        log.info("cluster: members now %s", ", ".join(m.member_id for m in new))
        if self._serving:
            if old not in self._previous:
                self._previous.append(old)
            if self._handover is not None:
                self._handover.cancel()
            self._handover = asyncio.ensure_future(self._hand_over())
        self._notify()

    async def _hand_over(self) -> None:
        """Serve keys gained from departed members once the metadata has caught up.

        Only the current hand-over ends the wait: one superseded by a newer change (or by
        fencing) is cancelled, but on Python 3.11 `asyncio.wait_for` can swallow that cancel
        and return, and its catch-up began before the newer change."""
        while not await self._caught_up():
            await asyncio.sleep(self.heartbeat_seconds)
        if self._handover is asyncio.current_task():
            self._previous = []  # this catch-up began after the latest change

    def _fence(self) -> None:
        """Lease stale: stop serving everything now, and rejoin under a new epoch."""
        if not self._serving and self._rejoin:
            return
        was_serving = self._serving
        self._serving = False
        self._previous = []
        if self._handover is not None:
            self._handover.cancel()  # the rejoin catches up anew
            self._handover = None
        self._rejoin = True
        self._lease.forget()
        self._serving_event.clear()
        if was_serving:
            self.fenced += 1
            log.warning(
                "cluster: %s lease stale (no heartbeat stored for %.1f s): stopped serving",
                self._me.member_id,
                self._lease.valid_for,
            )
            self._notify()

    def _notify(self) -> None:
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception:
                log.exception("cluster: a membership callback failed")
