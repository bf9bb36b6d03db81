"""The classic Kafka group protocol coordinator: one per gateway, all groups in memory.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
PreparingRebalance whenever a member joins, leaves, changes its protocols or stops
heart-beating, and to Dead when it is deleted. Generations count up and never go
backwards across restarts (the last one is persisted through `GroupStateStore`).
Protocol metadata and assignments are relayed unchanged: assignors (eager or
cooperative-sticky) run in the clients. Errors and their order follow Apache Kafka's
GroupCoordinator. Membership itself is not persisted: Kafka clients rejoin.
The groups, their members and the protocol vote are data in group_model.py; this module
moves them between states.

Time goes through `clock` and `sweep(now)` (session and rebalance timeouts), so the
state machine is testable without sleeping; `start()` runs the sweep every 0.25 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway.waiting import cancel_and_wait
from pulsar_gateway.handlers.kafka.group_model import (
    COMPLETING,
    DEAD,
    EMPTY,
    PREPARING,
    STABLE,
    Group,
    JoinRequest,
    JoinResult,
    Member,
    Protocols,
    SyncResult,
)
from pulsar_gateway.handlers.kafka.port import GroupStateStore
from pulsar_gateway.kafka_codec.errors import ErrorCode

log = logging.getLogger("gateway.kafka.groups")

NEW_MEMBER_JOIN_TIMEOUT = 300.0  # Kafka's: a new member waiting in a join is kept this long
SWEEP_SECONDS = 0.25


class GroupCoordinator:
    def __init__(
        self,
        store: GroupStateStore | None = None,
        min_session_ms: int = 6000,
        max_session_ms: int = 1800000,
        initial_rebalance_delay_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.initial_delay = initial_rebalance_delay_ms / 1000
        self.clock = clock
        self.groups: dict[str, Group] = {}
        # whether this gateway coordinates a group (docs/cluster.md); alone: every group
        self.serves: Callable[[str], bool] = _every_group
        self._sweeper: asyncio.Task[None] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="group sweeper")

    async def close(self) -> None:
        await cancel_and_wait(self._sweeper)
        for group in self.groups.values():
            for member in group.members.values():
                _finish(member.join_future, JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
                _finish(member.sync_future, SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                self.sweep(self.clock())
            except Exception:  # noqa: BLE001 - the sweeper must live
                log.exception("group sweep failed")

    def _group(self, group_id: str, create: bool = False) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            generation, protocol_type = (0, "")
            if self.store is not None:
                generation, protocol_type = self.store.group_state(group_id)
            group = Group(group_id, generation=generation, protocol_type=protocol_type or None)
            self.groups[group_id] = group
        return group

    def drop_unserved(self) -> None:
        """Another cluster member coordinates these groups now (or this one stopped serving):
        forget their members at once, and answer whoever waits with NOT_COORDINATOR, so the
        clients find the new coordinator; it loads the group's generation and commits from
        the metadata store."""
        for group_id in [gid for gid in self.groups if not self.serves(gid)]:
            group = self.groups.pop(group_id)
            for member in group.members.values():
                _finish(member.join_future, JoinResult(ErrorCode.NOT_COORDINATOR))
                _finish(member.sync_future, SyncResult(ErrorCode.NOT_COORDINATOR))
            log.info("group %s: no longer coordinated here", group_id)

    def _forget_if_unused(self, group: Group) -> None:
        if group.state == EMPTY and not group.members and not group.pending:
            if self.store is None or not self.store.has_offsets(group.group_id):
                if group.generation == 0:
                    self.groups.pop(group.group_id, None)

    # ---- JoinGroup -------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: Protocols,
        require_known_member: bool,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id)
        if not self.serves(group_id):
            return JoinResult(ErrorCode.NOT_COORDINATOR, member_id)
        if not self.min_session_ms <= session_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        group = self._group(group_id)
        if group is None and member_id:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        group = self._group(group_id, create=True)
        assert group is not None
        if group.state == DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        names = [name for name, _ in protocols]
        if not group.supports(protocol_type, names):
            self._forget_if_unused(group)
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        request = JoinRequest(
            client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols
        )
        if not member_id:
            new_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id:
                if instance_id in group.static:
                    return await self._replace_static(group, instance_id, new_id, request)
                return await self._add_and_rebalance(group, new_id, instance_id, request)
            if require_known_member:
                group.pending[new_id] = self.clock() + session_ms / 1000
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
            return await self._add_and_rebalance(group, new_id, None, request)
        return await self._join_known(group, member_id, instance_id, request)

    def _new_member(
        self, member_id: str, instance_id: str | None, request: JoinRequest, **kept: Any
    ) -> Member:
        return Member(
            member_id,
            instance_id,
            request.client_id,
            request.client_host,
            request.session_ms / 1000,
            request.rebalance_ms / 1000,
            request.protocol_type,
            request.protocols,
            self.clock(),
            **kept,
        )

    async def _join_known(
        self, group: Group, member_id: str, instance_id: str | None, request: JoinRequest
    ) -> JoinResult:
        if group.is_fenced(member_id, instance_id):
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id)
        if member_id in group.pending:
            del group.pending[member_id]
            return await self._add_and_rebalance(group, member_id, instance_id, request)
        member = group.members.get(member_id)
        if member is None or group.state in (EMPTY, DEAD):
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        member.last_heartbeat = self.clock()
        unchanged = member.protocols == request.protocols
        if group.state == COMPLETING and unchanged:
            return group.join_result(member, with_members=True)
        if group.state == STABLE and unchanged and member_id != group.leader:
            return group.join_result(member, with_members=False)
        future = self._await_join(member)
        member.protocols = request.protocols
        member.session_seconds = request.session_ms / 1000
        member.rebalance_seconds = request.rebalance_ms / 1000
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} rejoined")
        return await future

    def _await_join(self, member: Member) -> asyncio.Future[JoinResult]:
        # a repeated join (a client retry) replaces the earlier one, which is told to retry
        _finish(member.join_future, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        member.joined_at = self.clock()
        return future

    async def _add_and_rebalance(
        self, group: Group, member_id: str, instance_id: str | None, request: JoinRequest
    ) -> JoinResult:
        member = self._new_member(member_id, instance_id, request)
        future = self._await_join(member)
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        if instance_id:
            group.static[instance_id] = member_id
        if group.leader is None:
            group.leader = member_id
        if group.state == PREPARING:
            if group.initial_until > self.clock():
                # Kafka's initial delay: each new member extends it, up to the rebalance timeout
                group.initial_until = min(
                    self.clock() + self.initial_delay, group.rebalance_deadline
                )
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
        return await future

    async def _replace_static(
        self, group: Group, instance_id: str, new_id: str, request: JoinRequest
    ) -> JoinResult:
        """A known group.instance.id rejoined without its member id: the new id replaces the
        old one, keeping its assignment; no rebalance when the selected protocol stays."""
        old_id = group.static[instance_id]
        old = group.members.pop(old_id)
        _finish(old.join_future, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        _finish(old.sync_future, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member = self._new_member(
            new_id, instance_id, request, assignment=old.assignment, is_new=False
        )
        group.members[new_id] = member
        group.static[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        log.info("group %s: static member %s is now %s", group.group_id, instance_id, new_id)
        if group.state == STABLE and group.select_protocol() == group.protocol_name:
            return JoinResult(
                ErrorCode.NONE,
                new_id,
                group.generation,
                group.protocol_type,
                group.protocol_name,
                group.leader or "",
                [],
            )
        future = self._await_join(member)
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        return await future

    # ---- rebalancing -----------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        now = self.clock()
        if group.state == COMPLETING:
            for member in group.members.values():
                member.assignment = b""
                _finish(member.sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                member.sync_future = None
        timeout = max((m.rebalance_seconds for m in group.members.values()), default=0.0)
        group.initial_until = now + self.initial_delay if group.state == EMPTY else 0.0
        group.rebalance_deadline = now + timeout
        group.state = PREPARING
        log.info(
            "group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason
        )
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == PREPARING and group.all_joined():
            if self.clock() >= group.initial_until:
                self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in list(group.members.values()):
            if member.join_future is None:
                self._remove(group, member)
        group.generation += 1
        if not group.members:
            group.state = EMPTY
            group.protocol_name = None
            group.leader = None
            self._persist(group, [])
            return
        group.protocol_name = group.select_protocol()
        group.state = COMPLETING
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        now = self.clock()
        deliveries: list[tuple[asyncio.Future[JoinResult], JoinResult]] = []
        everyone = [
            (m.member_id, m.instance_id, m.metadata_for(group.protocol_name))
            for m in group.members.values()
        ]
        for member in group.members.values():
            future = member.join_future
            assert future is not None
            member.join_future = None
            member.is_new = False
            member.last_heartbeat = now
            result = JoinResult(
                ErrorCode.NONE,
                member.member_id,
                group.generation,
                group.protocol_type,
                group.protocol_name,
                group.leader or "",
                everyone if member.member_id == group.leader else [],
            )
            deliveries.append((future, result))
        log.info(
            "group %s generation %d: %d members, protocol %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
        )
        self._persist(group, deliveries)

    def _persist(
        self, group: Group, deliveries: list[tuple[asyncio.Future[JoinResult], JoinResult]]
    ) -> None:
        """Answer the joins once the new generation is durable (so it never goes backwards)."""
        if self.store is None:
            for future, result in deliveries:
                _finish(future, result)
            return
        store = self.store

        async def deliver() -> None:
            try:
                await store.save_group_state(
                    group.group_id, group.generation, group.protocol_type or ""
                )
            except Exception as exc:  # noqa: BLE001 - answered anyway, logged
                log.error("group %s: generation not persisted: %s", group.group_id, exc)
            for future, result in deliveries:
                _finish(future, result)

        task = asyncio.ensure_future(deliver())
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)

    def _remove(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        _finish(member.join_future, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        _finish(member.sync_future, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        member.join_future = member.sync_future = None
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _remove_and_update(self, group: Group, member: Member, reason: str) -> None:
        self._remove(group, member)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, reason)
        elif group.state == PREPARING:
            self._maybe_complete_join(group)

    def sweep(self, now: float) -> None:
        """Expire silent members and overdue rebalances."""
        for group in list(self.groups.values()):
            for pending_id, deadline in list(group.pending.items()):
                if now > deadline:
                    del group.pending[pending_id]
                    self._maybe_complete_join(group)
            for member in list(group.members.values()):
                if member.join_future is not None:
                    alive = not member.is_new or now - member.joined_at < NEW_MEMBER_JOIN_TIMEOUT
                elif member.sync_future is not None:
                    alive = True
                else:
                    alive = now <= member.last_heartbeat + member.session_seconds
                if not alive and member.member_id in group.members:
                    log.info("group %s: member %s expired", group.group_id, member.member_id)
                    self._remove_and_update(
                        group, member, f"member {member.member_id} session expired"
                    )
            if group.state == PREPARING:
                if now >= group.rebalance_deadline:
                    self._complete_join(group)
                else:
                    self._maybe_complete_join(group)

    # ---- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    def _check_member(
        self, group: Group | None, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        if not group_id:
            return SyncResult(ErrorCode.INVALID_GROUP_ID)
        if not self.serves(group_id):
            return SyncResult(ErrorCode.NOT_COORDINATOR)
        group = self._group(group_id)
        code = self._check_member(group, generation, member_id, instance_id)
        if code:
            return SyncResult(code)
        assert group is not None
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        member.last_heartbeat = self.clock()
        if group.state == EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state == PREPARING:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state == STABLE:
            return group.sync_result(member)
        # CompletingRebalance: wait for the leader's assignments
        _finish(member.sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if member_id == group.leader:
            for each in group.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            group.state = STABLE
            now = self.clock()
            for each in group.members.values():
                each.last_heartbeat = now
                if each.sync_future is not None:
                    _finish(each.sync_future, group.sync_result(each))
                    each.sync_future = None
            log.info("group %s generation %d stable", group.group_id, group.generation)
        return await future

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.serves(group_id):
            return ErrorCode.NOT_COORDINATOR
        group = self._group(group_id)
        code = self._check_member(group, generation, member_id, instance_id)
        if code:
            return code
        assert group is not None
        if group.state == EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        group.members[member_id].last_heartbeat = self.clock()
        if group.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(top-level error, one error per leaving (member id, instance id))."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [ErrorCode.INVALID_GROUP_ID] * len(leaving)
        if not self.serves(group_id):
            return ErrorCode.NOT_COORDINATOR, [ErrorCode.NOT_COORDINATOR] * len(leaving)
        group = self._group(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(
                leaving
            )
        codes: list[int] = []
        for member_id, instance_id in leaving:
            if not member_id and instance_id:
                member_id = group.static.get(instance_id, "")
                if not member_id:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
            if group.is_fenced(member_id, instance_id):
                codes.append(ErrorCode.FENCED_INSTANCE_ID)
            elif member_id in group.pending:
                del group.pending[member_id]
                self._maybe_complete_join(group)
                codes.append(ErrorCode.NONE)
            elif member_id not in group.members:
                codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                self._remove_and_update(group, group.members[member_id], f"member {member_id} left")
                codes.append(ErrorCode.NONE)
        return ErrorCode.NONE, codes

    # ---- offsets, listing and deletion -----------------------------------------------------

    def validate_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        """Kafka's fencing of OffsetCommit; NONE means the offsets may be stored."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.serves(group_id):
            return ErrorCode.NOT_COORDINATOR
        group = self._group(group_id)
        if group is None:
            return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation < 0 and group.state == EMPTY:
            return ErrorCode.NONE
        if group.state == COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        group.members[member_id].last_heartbeat = self.clock()
        return ErrorCode.NONE

    def known_group_ids(self) -> list[str]:
        """The groups this gateway coordinates (in a cluster, each member lists its own, as
        Kafka brokers do; clients ask them all)."""
        ids = {gid for gid, g in self.groups.items() if g.state != DEAD}
        if self.store is not None:
            ids.update(self.store.groups_with_offsets())
        return sorted(gid for gid in ids if self.serves(gid))

    def describe(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        if group is not None and group.state != DEAD:
            return group
        if self.store is not None and self.store.has_offsets(group_id):
            return self._group(group_id, create=True)
        return None

    async def delete_group(self, group_id: str) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.serves(group_id):
            return ErrorCode.NOT_COORDINATOR
        group = self.groups.get(group_id)
        has_offsets = self.store is not None and self.store.has_offsets(group_id)
        if (group is None or group.state == DEAD) and not has_offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and group.state != EMPTY and group.state != DEAD:
            return ErrorCode.NON_EMPTY_GROUP
        if group is not None:
            group.state = DEAD
            self.groups.pop(group_id, None)
        if self.store is not None:
            await self.store.delete_group(group_id)
        return ErrorCode.NONE


def _every_group(group_id: str) -> bool:
    return True


def _finish(future: asyncio.Future[Any] | None, result: Any) -> None:
    if future is not None and not future.done():
        future.set_result(result)
