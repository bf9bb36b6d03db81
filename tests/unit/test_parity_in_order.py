"""Parity's in-order walk: a partition passes it only when the target holds exactly the
source's records, in order, at the offsets the translation runs (or aligned starts) say;
any damage sends it on to the comparison by content."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.tools.parity.chunks import chunks_of
from pulsar_gateway.tools.parity.in_order import OffsetMap, Walk
from pulsar_gateway.tools.parity.in_order import walk as walk_chunks
from pulsar_gateway.tools.parity.records import Record

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=3),
        st.none() | st.binary(max_size=3),
        st.lists(st.tuples(st.sampled_from("ab"), st.none() | st.binary(max_size=2)), max_size=2),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=30,
)


SIZES = st.tuples(st.integers(1, 8), st.integers(1, 8))


def walk(
    topic: str,
    partition: int,
    offsets: OffsetMap,
    source: list[Record],
    target: list[Record],
    sizes: tuple[int, int] = (1, 1),
) -> Walk:
    """The walk over both sides cut into chunks of these sizes (the readers' chunks
    seldom line up), whole chunks compared at once where they can be."""
    left, right = chunks_of(source, sizes[0]), chunks_of(target, sizes[1])
    return walk_chunks(topic, partition, offsets, left, right)


def numbered(rows: list[tuple], first: int = 0) -> list[Record]:
    return [
        (first + i, key, value, headers, ts) for i, (key, value, headers, ts) in enumerate(rows)
    ]


def test_the_offset_map_follows_runs_then_aligned_starts() -> None:
    runs = OffsetMap(((5, 0, 3), (10, 3, 2)))
    assert [runs.target_of(o) for o in (4, 5, 7, 8, 10, 11, 12)] == [None, 0, 2, None, 3, 4, None]
    assert OffsetMap(align=(100, 7)).target_of(102) == 9
    assert OffsetMap().target_of(0) is None


@settings(max_examples=examples(200), deadline=None)
@given(records, st.integers(0, 50), st.integers(0, 50), SIZES)
def test_a_faithful_copy_passes_with_its_count(rows, source_start, target_start, sizes) -> None:
    source = numbered(rows, source_start)
    target = numbered(rows, target_start)
    # the readers hand headers over in different containers: tuples against lists
    target = [(o, k, v, [tuple(h) for h in hs], ts) for o, k, v, hs, ts in target]
    result = walk("t", 0, OffsetMap(align=(source_start, target_start)), source, target, sizes)
    assert result.identical and result.records == len(rows)
    runs = OffsetMap(((source_start, target_start, len(rows)),))
    assert walk("t", 0, runs, source, target, sizes).identical


DAMAGE = st.sampled_from(["drop", "duplicate", "swap", "key", "value", "header", "ts", "shift"])


@settings(max_examples=examples(300), deadline=None)
@given(records, DAMAGE, st.data(), SIZES)
def test_any_damage_is_found_where_it_is(rows, damage, data, sizes) -> None:
    source = numbered(rows)
    at = data.draw(st.integers(0, len(rows) - 1))
    damaged = list(rows)
    key, value, headers, ts = damaged[at]
    if damage == "drop":
        del damaged[at]
    elif damage == "duplicate":
        damaged.insert(at, damaged[at])
    elif damage == "swap":
        other = data.draw(st.integers(0, len(rows) - 1).filter(lambda i: rows[i] != rows[at]))
        damaged[at], damaged[other] = damaged[other], damaged[at]
        at = min(at, other)
    elif damage == "key":
        damaged[at] = (b"x" if key is None else None, value, headers, ts)
    elif damage == "value":
        damaged[at] = (key, (value or b"") + b"!", headers, ts)
    elif damage == "header":
        damaged[at] = (key, value, [*headers, ("c", None)], ts)
    elif damage == "ts":
        damaged[at] = (key, value, headers, ts + 1)
    target = numbered(damaged)
    if damage == "shift":  # every record right but one offset out of place
        target = [(o + (1 if o >= at else 0), *rest) for o, *rest in target]
    result = walk("t", 0, OffsetMap(align=(0, 0)), source, target, sizes)
    assert not result.identical
    # the walk stops at the first place the logs part (a dropped or doubled record equal
    # to its neighbours parts them only at the end)
    first = next(
        i
        for i in range(max(len(source), len(target)))
        if i >= len(source) or i >= len(target) or source[i] != target[i]
    )
    assert result.records == first
    assert result.first_difference == (
        source[first][0] if first < len(source) else None,
        target[first][0] if first < len(target) else None,
    )


def test_records_outside_every_run_are_a_difference() -> None:
    source = numbered([(b"k", b"v", [], 1)] * 4)
    target = numbered([(b"k", b"v", [], 1)] * 4)
    partial = OffsetMap(((0, 0, 3),))  # the fourth source record was never copied
    assert walk("t", 0, partial, source, target).first_difference == (3, 3)


def test_one_log_longer_than_the_other_differs_at_its_end() -> None:
    rows = numbered([(b"k", b"v", [], 1)] * 3)
    assert walk("t", 0, OffsetMap(align=(0, 0)), rows, rows[:2]).first_difference == (2, None)
    assert walk("t", 0, OffsetMap(align=(0, 0)), rows[:2], rows).first_difference == (None, 2)
    assert walk("t", 0, OffsetMap(align=(0, 0)), [], []).identical


def test_a_stretch_across_two_runs_with_a_gap_between_differs_in_the_gap() -> None:
    """Source offsets 3 and 4 were never copied, yet the first and last offsets of a chunk
    land where they should: the walk must not take the chunk's ends for all of it."""
    rows = numbered([(b"k", b"v", [], 1)] * 7)
    runs = OffsetMap(((0, 0, 3), (5, 5, 2)))
    assert walk("t", 0, runs, rows, rows, (8, 8)).first_difference == (3, 3)


@settings(max_examples=examples(100), deadline=None)
@given(records, st.data(), SIZES)
def test_a_compacted_source_passes_through_its_runs(rows, data, sizes) -> None:
    """Source offsets with gaps (compaction, transaction markers), copied one run per
    stretch without a gap: every record lands where its run says."""
    gaps = data.draw(st.lists(st.integers(0, 2), min_size=len(rows), max_size=len(rows)))
    offsets = [sum(gaps[: i + 1]) + i for i in range(len(rows))]
    source = [(offset, *row) for offset, row in zip(offsets, rows, strict=True)]
    target = numbered(rows)
    runs = OffsetMap(tuple((offset, i, 1) for i, offset in enumerate(offsets)))
    assert walk("t", 0, runs, source, target, sizes).identical
    if len(rows) > 1:
        moved = [*target[:-1], (target[-1][0] + 1, *target[-1][1:])]
        assert walk("t", 0, runs, source, moved, sizes).first_difference == (
            offsets[-1],
            len(rows),
        )


def test_headers_compare_by_content_whatever_the_container() -> None:
    """confluent-kafka gives None for no headers and may give a header's value as str; the
    gateway's readers give [] and bytes."""
    source = [(0, b"k", b"v", None, 1), (1, b"k", b"v", [("h", "x")], 1)]
    target = [(0, b"k", b"v", [], 1), (1, b"k", b"v", [("h", b"x")], 1)]
    assert walk("t", 0, OffsetMap(align=(0, 0)), source, target, (2, 2)).identical
    changed = [(0, b"k", b"v", [], 1), (1, b"k", b"v", [("h", b"y")], 1)]
    result = walk("t", 0, OffsetMap(align=(0, 0)), source, changed, (2, 2))
    assert result.first_difference == (1, 1)
