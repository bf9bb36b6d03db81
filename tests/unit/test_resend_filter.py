"""Resends after a broker crash get no offset of their own; other producers are untouched."""

from __future__ import annotations

import gc
import sys

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.backend.resend_filter import SEQ, RecentOffsets, ResendFilter
from pulsar_gateway.gateway.messages import StoredMessage


def _message(producer: str, sequence: int | None, entry: int) -> StoredMessage:
    props = {} if sequence is None else {SEQ: str(sequence)}
    return StoredMessage((1, entry, -1), b"x", "", props, 0, 0, producer)


def test_resent_messages_point_at_their_first_copy() -> None:
    seen = ResendFilter()
    offsets = []
    offset = 0
    stream = [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 2), ("a", 3), ("a", 4), ("b", 1)]
    for entry, (producer, sequence) in enumerate(stream):
        original = seen.original_offset(_message(producer, sequence, entry), offset)
        if original is None:
            offsets.append(offset)
            offset += 1
        else:
            offsets.append(("resend of", original))
    assert offsets == [0, 1, 2, 3, ("resend of", 1), ("resend of", 3), 4, ("resend of", 2)]


def test_unstamped_messages_are_never_filtered() -> None:
    seen = ResendFilter()
    assert all(
        seen.original_offset(_message("pulsar-native", None, i), i) is None for i in range(5)
    )


def test_a_foreign_stamp_that_is_not_a_sequence_is_left_alone() -> None:
    """A native Pulsar producer may set any property, `__gw.seq` included: what is not one
    of the gateway's sequences makes a message unstamped, not a reader that crashes."""
    seen = ResendFilter()
    for entry, stamp in enumerate(["abc", str(2**70), "-5", ""]):
        message = StoredMessage((1, entry, -1), b"x", "", {SEQ: stamp}, 0, 0, "native")
        assert seen.original_offset(message, entry) is None
    assert seen.snapshot() == {}


def test_runs_hold_no_python_object_each() -> None:
    """Producers interleaving in one partition break the runs (one per produce request):
    their columns must not keep an int object per run on the small-object heap."""
    recent = RecentOffsets(20_000)
    gc.collect()
    before = sys.getallocatedblocks()
    for run in range(5_000):
        recent.add(1_000_000 + 2 * run, 5_000_000 + 3 * run)  # every step breaks the run
    grown = sys.getallocatedblocks() - before
    assert len(recent.firsts) == 5_000 and grown < 50, f"{grown} blocks for 5,000 runs"


def test_state_restored_from_a_checkpoint_keeps_filtering() -> None:
    first = ResendFilter()
    for i in range(1, 4):
        first.original_offset(_message("a", i, i), i)
    restored = ResendFilter(first.snapshot())
    assert restored.original_offset(_message("a", 3, 9), 9) == -1  # older than remembered
    assert restored.original_offset(_message("a", 4, 10), 10) is None


@given(
    steps=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=300),
    keep=st.integers(1, 40),
)
def test_recent_offsets_as_runs_answer_as_a_plain_map(steps, keep) -> None:
    """The run-length memory of sequences gives every remembered sequence the offset a
    plain dictionary would, remembers at least the `keep` newest, and -1 for older ones."""
    recent = RecentOffsets(keep)
    plain: dict[int, int] = {}
    sequence, offset = 0, 0
    for sequence_step, offset_step in steps:
        sequence += sequence_step
        offset += offset_step
        recent.add(sequence, offset)
        plain[sequence] = offset
    newest = sorted(plain)[-keep:]
    for seq in range(sequence + 2):
        got = recent.offset_of(seq)
        if seq in newest:
            assert got == plain[seq]
        else:
            assert got in (-1, plain.get(seq, -1))
    assert len(recent.firsts) <= keep + keep // 4 + 1  # memory: runs, however long


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["gw-a.native", "gw-a.single", "gw-b.native"]), st.integers(0, 40)
        ),
        max_size=200,
    )
)
def test_the_filter_answers_as_a_plain_map(stamps) -> None:
    """Whatever order stamps come in (runs of one producer take the short way), each answer
    is that of a plain map of every producer's highest sequence and first offsets."""
    resends = ResendFilter()
    highest: dict[str, int] = {}
    first: dict[tuple[str, int], int] = {}
    offset = 0
    for number, (producer, sequence) in enumerate(stamps):
        message = StoredMessage((1, number, -1), b"", "", {SEQ: str(sequence)}, 0, 0, producer)
        got = resends.original_offset(message, offset)
        if producer in highest and sequence <= highest[producer]:
            assert got == first.get((producer, sequence), -1)
            continue
        assert got is None
        highest[producer] = sequence
        first[(producer, sequence)] = offset
        offset += 1
    assert resends.snapshot() == highest
