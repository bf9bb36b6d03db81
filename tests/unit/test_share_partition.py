"""The share partition state machine (KIP-932): acquisition locks, acknowledgements,
delivery counts and the durable form, with time passed in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.kafka.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    Acquired,
    SharePartition,
)
from pulsar_gateway.kafka_codec.errors import ErrorCode

LOCK = 30.0


def partition(start: int = 0, limit: int = 3, window: int = 100) -> SharePartition:
    return SharePartition(start, start, LOCK, limit, window)


def test_two_members_split_the_records() -> None:
    share = partition()
    first = share.acquire(range(0, 5), 10, "a", 0.0, max_records=5)
    second = share.acquire(range(0, 10), 10, "b", 0.0, max_records=10)
    assert first == [Acquired(0, 4, 1)]
    assert second == [Acquired(5, 9, 1)]
    assert share.next_wanted() == 10


def test_accept_moves_the_start_and_forgets() -> None:
    share = partition()
    share.acquire(range(0, 4), 4, "a", 0.0, 10)
    assert share.acknowledge("a", 0, 1, [ACCEPT]) == ErrorCode.NONE
    assert share.start == 2 and 0 not in share.records
    assert share.acknowledge("a", 3, 3, [ACCEPT]) == ErrorCode.NONE
    assert share.start == 2  # offset 2 is still acquired
    assert share.records[3].state == ACKNOWLEDGED


def test_an_unacknowledged_record_comes_back_after_its_lock() -> None:
    share = partition()
    share.acquire([0], 1, "a", 0.0, 10)
    assert not share.expire(LOCK - 0.1)
    assert share.next_wanted() == 1
    assert share.expire(LOCK)
    assert share.next_wanted() == 0
    assert share.acquire([0], 1, "b", LOCK, 10) == [Acquired(0, 0, 2)]


def test_release_redelivers_and_reject_does_not() -> None:
    share = partition()
    share.acquire([0, 1], 2, "a", 0.0, 10)
    assert share.acknowledge("a", 0, 1, [RELEASE, REJECT]) == ErrorCode.NONE
    assert share.records[0].state == AVAILABLE
    assert share.records[1].state == ARCHIVED
    assert share.acquire([0, 1], 2, "a", 1.0, 10) == [Acquired(0, 0, 2)]


def test_the_delivery_limit_archives() -> None:
    share = partition(limit=2)
    share.acquire([0], 1, "a", 0.0, 10)
    share.acknowledge("a", 0, 0, [RELEASE])
    share.acquire([0], 1, "a", 0.0, 10)
    share.acknowledge("a", 0, 0, [RELEASE])
    assert share.start == 1 and share.next_wanted() == 1  # archived, then done


def test_only_the_holder_acknowledges() -> None:
    share = partition()
    share.acquire([0], 1, "a", 0.0, 10)
    assert share.acknowledge("b", 0, 0, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    assert share.acknowledge("a", 0, 0, [9]) == ErrorCode.INVALID_REQUEST
    assert share.acknowledge("a", 0, 1, [ACCEPT, ACCEPT, ACCEPT]) == ErrorCode.INVALID_REQUEST
    assert share.acknowledge("a", 5, 5, [ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    assert share.records[0].state == ACQUIRED


def test_offsets_without_a_record_are_gaps() -> None:
    share = partition()
    assert share.acquire([0, 3], 5, "a", 0.0, 10) == [Acquired(0, 0, 1), Acquired(3, 3, 1)]
    assert share.records[1].state == ARCHIVED and share.end == 5
    assert share.acknowledge("a", 1, 1, [GAP]) == ErrorCode.NONE


def test_the_window_bounds_what_is_in_flight() -> None:
    share = partition(window=3)
    assert share.acquire(range(10), 10, "a", 0.0, 10) == [Acquired(0, 2, 1)]
    assert share.next_wanted() is None
    share.acknowledge("a", 0, 0, [ACCEPT])
    assert share.next_wanted() == 3


def test_a_member_that_leaves_releases_what_it_holds() -> None:
    share = partition()
    share.acquire([0, 1], 2, "a", 0.0, 10)
    assert share.release_member("a")
    assert share.next_wanted() == 0


def test_the_log_start_moving_up_finishes_what_lies_below() -> None:
    share = partition()
    share.acquire([0, 1, 2], 3, "a", 0.0, 10)
    share.skip_to(2)
    assert share.start == 2 and set(share.records) == {2}


def test_restored_state_keeps_counts_and_frees_locks() -> None:
    share = partition(limit=2)
    share.acquire([0, 1, 2, 3], 4, "a", 0.0, 10)
    share.acknowledge("a", 1, 1, [ACCEPT])
    share.acknowledge("a", 3, 3, [RELEASE])
    share.acquire([3], 4, "a", 0.0, 10)  # its second, last delivery
    back = SharePartition.restore(share.state(), LOCK, 2, 100)
    assert back.start == 0 and back.end == 4
    assert back.records[0].state == AVAILABLE and back.records[0].delivery_count == 1
    assert back.records[1].state == ACKNOWLEDGED
    assert back.records[3].state == ARCHIVED  # held at its last delivery when lost
    assert back.acquire([0, 2], 4, "b", 0.0, 10) == [Acquired(0, 0, 2), Acquired(2, 2, 2)]


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from("ab"), st.integers(1, 6)),
        st.tuples(
            st.just("ack"),
            st.sampled_from("ab"),
            st.integers(0, 20),
            st.integers(0, 3),
            st.sampled_from([GAP, ACCEPT, RELEASE, REJECT]),
        ),
        st.tuples(st.just("tick"), st.sampled_from([1.0, LOCK + 1])),
        st.tuples(st.just("leave"), st.sampled_from("ab")),
        st.tuples(st.just("restart")),
    ),
    max_size=40,
)


@settings(max_examples=examples(200), deadline=None)
@given(OPERATIONS)
def test_every_record_is_settled_once_and_never_over_delivered(operations: list) -> None:
    """Whatever members do, a record is accepted at most once, never delivered more than
    the limit, and the stored form restores to the same bounds."""
    limit, log_end = 3, 20
    share = partition(limit=limit, window=8)
    now = 0.0
    accepted: list[int] = []
    deliveries: dict[int, int] = {}
    for operation in operations:
        if operation[0] == "acquire":
            for run in share.acquire(range(log_end), log_end, operation[1], now, operation[2]):
                for offset in range(run.first, run.last + 1):
                    deliveries[offset] = deliveries.get(offset, 0) + 1
                    assert deliveries[offset] == run.delivery_count <= limit
        elif operation[0] == "ack":
            _, member, first, extra, kind = operation
            held = {
                o for o, r in share.records.items() if r.state == ACQUIRED and r.member == member
            }
            code = share.acknowledge(member, first, first + extra, [kind])
            if code == ErrorCode.NONE and kind == ACCEPT:
                accepted.extend(o for o in range(first, first + extra + 1) if o in held)
        elif operation[0] == "tick":
            now += operation[1]
            share.expire(now)
        elif operation[0] == "leave":
            share.release_member(operation[1])
        else:
            share = SharePartition.restore(share.state(), LOCK, limit, 8)
        assert len(accepted) == len(set(accepted))
        assert share.end - share.start <= 8
        assert set(share.records) == set(range(share.start, share.end))
        restored = SharePartition.restore(share.state(), LOCK, limit, 8)
        assert restored.end == share.end and restored.start >= share.start
