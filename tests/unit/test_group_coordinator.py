"""The group coordinator's state machine, without a broker: a fake clock drives session
and rebalance timeouts, and hypothesis drives random join/leave/heartbeat sequences."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.kafka.group_coordinator import GroupCoordinator
from pulsar_gateway.handlers.kafka.group_model import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    JoinResult,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode

PROTOCOLS = [("range", b"meta")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _coordinator() -> tuple[GroupCoordinator, Clock]:
    clock = Clock()
    return GroupCoordinator(clock=clock), clock


def _join(
    coordinator: GroupCoordinator,
    member_id: str = "",
    instance: str | None = None,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
) -> asyncio.Task[JoinResult]:
    return asyncio.ensure_future(
        coordinator.join(
            "g",
            member_id,
            instance,
            "client",
            "/host",
            6000,
            6000,
            protocol_type,
            protocols or PROTOCOLS,
            require_known_member=True,
        )
    )


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _stable_member(coordinator: GroupCoordinator, instance: str | None = None) -> Any:
    first = await _join(coordinator, instance=instance)
    if first.error == ErrorCode.MEMBER_ID_REQUIRED:
        first = await _join(coordinator, first.member_id, instance)
    assert first.error == 0
    sync = await coordinator.sync(
        "g", first.generation, first.member_id, instance, None, None, {first.member_id: b"a"}
    )
    assert sync.error == 0 and sync.assignment == b"a"
    return first


def test_join_sync_heartbeat_leave() -> None:
    async def scenario() -> None:
        coordinator, clock = _coordinator()
        first = await _stable_member(coordinator)
        assert coordinator.groups["g"].state == STABLE
        assert coordinator.heartbeat("g", first.generation, first.member_id, None) == 0
        assert coordinator.heartbeat("g", first.generation - 1, first.member_id, None) == (
            ErrorCode.ILLEGAL_GENERATION
        )
        assert (
            coordinator.heartbeat("g", first.generation, "nobody", None)
            == ErrorCode.UNKNOWN_MEMBER_ID
        )
        assert (await _join(coordinator, protocol_type="connect")).error == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        )
        # a second member: the first hears ErrorCode.REBALANCE_IN_PROGRESS and rejoins
        second_id = (await _join(coordinator)).member_id
        second = _join(coordinator, second_id)
        await _settle()
        assert coordinator.groups["g"].state == PREPARING
        assert coordinator.heartbeat("g", first.generation, first.member_id, None) == (
            ErrorCode.REBALANCE_IN_PROGRESS
        )
        rejoin = _join(coordinator, first.member_id)
        both = await asyncio.gather(rejoin, second)
        assert {r.generation for r in both} == {first.generation + 1}
        leader = next(r for r in both if r.members)
        assert len(leader.members) == 2
        assert coordinator.groups["g"].state == COMPLETING
        # the leaver: the group rebalances without it
        top, codes = coordinator.leave("g", [(second_id, None)])
        assert (top, codes) == (0, [0])
        assert coordinator.groups["g"].state in (PREPARING, COMPLETING)
        # the session timeout removes a silent member
        await _settle()
        clock.now += 7
        coordinator.sweep(clock.now)
        assert coordinator.groups["g"].state == EMPTY

    asyncio.run(scenario())


def test_rebalance_timeout_completes_with_those_who_rejoined() -> None:
    async def scenario() -> None:
        coordinator, clock = _coordinator()
        first = await _stable_member(coordinator)
        newcomer_id = (await _join(coordinator)).member_id
        newcomer = _join(coordinator, newcomer_id)
        await _settle()
        clock.now += 6.5  # the first member never rejoins
        coordinator.sweep(clock.now)
        result = await newcomer
        assert result.error == 0 and result.leader == newcomer_id
        assert first.member_id not in coordinator.groups["g"].members

    asyncio.run(scenario())


def test_static_member_rejoin_replaces_the_old_id_without_rebalance() -> None:
    async def scenario() -> None:
        coordinator, _ = _coordinator()
        first = await _stable_member(coordinator, instance="pod-1")
        generation = coordinator.groups["g"].generation
        again = await _join(coordinator, instance="pod-1")
        assert again.error == 0 and again.member_id != first.member_id
        assert coordinator.groups["g"].generation == generation
        assert coordinator.groups["g"].state == STABLE
        sync = await coordinator.sync("g", generation, again.member_id, "pod-1", None, None, {})
        assert sync.assignment == b"a"  # the old member's assignment carried over
        assert coordinator.heartbeat("g", generation, first.member_id, "pod-1") == (
            ErrorCode.FENCED_INSTANCE_ID
        )
        assert (
            coordinator.heartbeat("g", generation, first.member_id, None)
            == ErrorCode.UNKNOWN_MEMBER_ID
        )

    asyncio.run(scenario())


def test_commit_fencing() -> None:
    async def scenario() -> None:
        coordinator, _ = _coordinator()
        assert coordinator.validate_commit("solo", -1, "", None) == 0
        assert coordinator.validate_commit("solo", 3, "m", None) == ErrorCode.ILLEGAL_GENERATION
        first = await _stable_member(coordinator)
        assert coordinator.validate_commit("g", first.generation, first.member_id, None) == 0
        assert coordinator.validate_commit("g", -1, "", None) == ErrorCode.UNKNOWN_MEMBER_ID
        assert coordinator.validate_commit("g", first.generation + 1, first.member_id, None) == (
            ErrorCode.ILLEGAL_GENERATION
        )

    asyncio.run(scenario())


ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["join", "rejoin", "sync", "heartbeat", "leave", "tick"]),
        st.integers(0, 3),
    ),
    max_size=40,
)


def _check_invariants(coordinator: GroupCoordinator) -> None:
    group = coordinator.groups.get("g")
    if group is None:
        return
    if group.state == EMPTY:
        assert not group.members
    else:
        assert group.members
        assert group.leader in group.members
    if group.state == STABLE:
        assert all(m.join_future is None for m in group.members.values())
        assert group.protocol_name is not None
    for instance, member_id in group.static.items():
        assert group.members[member_id].instance_id == instance


@settings(max_examples=examples(150), deadline=None)
@given(ACTIONS)
def test_random_sequences_keep_invariants(actions: list[tuple[str, int]]) -> None:
    async def scenario() -> None:
        coordinator, clock = _coordinator()
        ids: list[str] = []
        generations_seen: dict[int, set[str]] = {}
        pending: list[asyncio.Task[Any]] = []
        assignments: dict[str, bytes] = {}

        def record(result: Any) -> None:
            if isinstance(result, JoinResult) and result.error == 0:
                if result.member_id not in ids:
                    ids.append(result.member_id)
                generations_seen.setdefault(result.generation, set()).add(result.leader)
                if result.members:
                    for member_id, _, _ in result.members:
                        assignments[member_id] = member_id.encode()

        for action, which in actions:
            group = coordinator.groups.get("g")
            member_id = ids[which % len(ids)] if ids else ""
            generation = group.generation if group else 0
            if action == "join":
                first = await _join(coordinator)
                if first.error == ErrorCode.MEMBER_ID_REQUIRED:
                    pending.append(_join(coordinator, first.member_id))
            elif action == "rejoin" and member_id:
                pending.append(_join(coordinator, member_id))
            elif action == "sync" and member_id:
                pending.append(
                    asyncio.ensure_future(
                        coordinator.sync(
                            "g", generation, member_id, None, None, None, dict(assignments)
                        )
                    )
                )
            elif action == "heartbeat" and member_id:
                coordinator.heartbeat("g", generation, member_id, None)
            elif action == "leave" and member_id:
                coordinator.leave("g", [(member_id, None)])
            elif action == "tick":
                clock.now += 2.5
                coordinator.sweep(clock.now)
            await _settle()
            for task in [t for t in pending if t.done()]:
                pending.remove(task)
                record(task.result())
            _check_invariants(coordinator)
        # one leader per generation
        assert all(len(leaders) == 1 for leaders in generations_seen.values())
        for _ in range(10):  # let everything time out; nothing hangs forever
            clock.now += 7
            coordinator.sweep(clock.now)
            await _settle()
        group = coordinator.groups.get("g")
        if group is not None and group.state == STABLE:
            assert all(m.assignment is not None for m in group.members.values())
        await coordinator.close()
        await _settle()
        assert all(task.done() for task in pending)

    asyncio.run(scenario())
