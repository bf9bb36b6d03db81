"""The metadata changelog's replay at start-up (metadata_records.LogReplay): no record, however
damaged, stops the load.

The log is read at every start, so a record that raised there kept the gateway from starting
until someone edited the log by hand; the follower (metadata_store.py) already skipped the
same records while the gateway ran, so a gateway ran fine and then could not restart. A record
that is not what its kind says is reported unreadable and skipped, and a damaged chunk of the
newest snapshot leaves that snapshot incomplete (the load then reads the whole log).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.gateway.metadata_records import (
    CONTROL,
    DELETED,
    IF_ABSENT,
    INDEX,
    PART_OF,
    LogReplay,
    encode,
)

SNAPSHOT = "7:0:-1"


def _record(key: str, payload: bytes | None, **properties: str) -> StoredMessage:
    return StoredMessage((1, 0, -1), payload, key, properties, 0, 0)


def _replayed(records: list[StoredMessage], newest: str = "") -> tuple[LogReplay, list[str]]:
    unreadable: list[str] = []
    replay = LogReplay(newest, unreadable.append)
    for record in records:
        replay.add(record)
    return replay, unreadable


def test_a_changes_record_that_is_not_an_object_is_skipped_and_the_load_goes_on() -> None:
    replay, unreadable = _replayed(
        [
            _record("a", encode(1)),
            _record("", b"[1, 2]", **{CONTROL: "changes", DELETED: "1"}),
            _record("b", encode(2)),
        ]
    )
    assert replay.table() == {"a": 1, "b": 2}
    assert len(unreadable) == 1


def test_a_chunk_that_is_not_json_leaves_its_snapshot_incomplete() -> None:
    chunk = {CONTROL: "chunk", DELETED: "1", PART_OF: SNAPSHOT}
    replay, unreadable = _replayed(
        [
            _record("", encode({"a": 1}), **chunk, **{INDEX: "0"}),
            _record("", b'{"b": 2', **chunk, **{INDEX: "1"}),
            _record("", b"", **{CONTROL: "end", DELETED: "1", PART_OF: SNAPSHOT, INDEX: "2"}),
        ],
        SNAPSHOT,
    )
    assert not replay.complete()
    assert len(unreadable) == 1


def test_an_end_record_whose_count_is_not_a_number_leaves_its_snapshot_incomplete() -> None:
    end = {CONTROL: "end", DELETED: "1", PART_OF: SNAPSHOT, INDEX: "two"}
    replay, _ = _replayed([_record("", b"", **end)], SNAPSHOT)
    assert not replay.complete()


def test_a_record_nested_deeper_than_the_parser_goes_is_skipped() -> None:
    replay, unreadable = _replayed([_record("a", TOO_DEEP), _record("b", encode(2))])
    assert replay.table() == {"b": 2}
    assert unreadable == ["a"]


scalars = st.none() | st.integers(-2, 2) | st.sampled_from(["", "x", [], {}])
json_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", ""]), scalars | st.lists(scalars, max_size=2)),
)
TOO_DEEP = b"[" * 5000 + b"]" * 5000
payloads = st.one_of(st.none(), st.binary(max_size=20), json_values.map(encode), st.just(TOO_DEEP))
kinds = st.sampled_from([None, "changes", "chunk", "end", "begin", "marker", "other"])
property_values = st.one_of(
    st.sampled_from(["", "1", "0", "-1", "2", SNAPSHOT, "x", "1e3"]), st.text(max_size=6)
)


@st.composite
def records(draw: Any) -> StoredMessage:
    properties: dict[str, str] = {}
    kind = draw(kinds)
    if kind is not None:
        properties[CONTROL] = kind
    for name in (DELETED, IF_ABSENT, PART_OF, INDEX):
        if draw(st.booleans()):
            properties[name] = draw(property_values)
    return _record(draw(st.sampled_from(["a", "b", ""])), draw(payloads), **properties)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(records(), max_size=8), st.sampled_from(["", SNAPSHOT]))
def test_no_record_stops_a_load(log: list[StoredMessage], newest: str) -> None:
    replay, unreadable = _replayed(log, newest)
    replay.complete()
    table = replay.table()
    assert isinstance(table, dict)
    json.dumps(table)  # what was loaded is JSON again, as the store writes it back
    assert len(unreadable) <= len(log)
