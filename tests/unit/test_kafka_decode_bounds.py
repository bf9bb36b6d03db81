"""Decoding is bounded by what the message can hold and by an entry budget (issue 10, item 8).

Properties over every generated request and response definition:

- ``min_size`` is exact: a value with every array empty and every nullable field null encodes
  to exactly ``min_size`` bytes (so it is a true lower bound for the array check);
- an array count that the bytes left cannot hold at ``min_size`` per entry is refused at
  once, before anything is allocated or looped (a count of 2**31 - 1 costs microseconds);
- the entry budget counts every array entry of every array: a decode spends exactly the
  number of list items it returns, and one entry less raises TooManyEntries.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pulsar_gateway.kafka_codec.protocol as kp
from harness.hypothesis_budget import examples
from harness.raw_kafka_socket import uvarint
from pulsar_gateway.kafka_codec.protocol import (
    API_NAMES,
    EntryBudget,
    KafkaDecodeError,
    TooManyEntries,
    decode_request,
    encode_request,
    encode_response,
    messages,
    parse_request_header,
    vocabulary,
)

DEFINITIONS = sorted(
    [(key, version, False) for key, version in messages.REQUESTS]
    + [(key, version, True) for key, version in messages.RESPONSES]
)
REQUESTS = sorted(messages.REQUESTS)


def _definition(key: int, version: int, response: bool) -> vocabulary.KafkaStruct:
    return (messages.RESPONSES if response else messages.REQUESTS)[(key, version)]


def filled(con: Any, length: int) -> Any:
    """A value of ``con``: ``length`` entries per array (0: empty, or null where nullable),
    other fields at their smallest encoding, tagged fields left out."""
    if isinstance(con, vocabulary.KafkaStruct):
        return {name: filled(sub, length) for name, sub, _ in con.fields}
    if isinstance(con, vocabulary.ArrayField):
        if length == 0:
            return None if con.nullable else []
        return [filled(con.subcon, length) for _ in range(length)]
    if isinstance(con, vocabulary.NullableStructField):
        return None
    if isinstance(con, vocabulary.StringField):
        return None if con.nullable else ""
    if isinstance(con, vocabulary.BytesField):
        return None if con.nullable else b""
    if isinstance(con, vocabulary.UuidField):
        return uuid.UUID(int=0)
    if isinstance(con, vocabulary.BoolField):
        return False
    return 0.0 if con.fmt_name == "_F64" else 0


def list_items(value: Any) -> int:
    """Array entries in a decoded value: every list's items, nested ones included."""
    if isinstance(value, dict):
        return sum(list_items(v) for v in value.values())
    if isinstance(value, list):
        return len(value) + sum(list_items(v) for v in value)
    return 0


def request_body(key: int, version: int, body: dict[str, Any]) -> memoryview:
    frame = memoryview(encode_request(key, version, 1, None, body))[4:]
    return frame[parse_request_header(frame).body_offset :]


def encoded_size(key: int, version: int, response: bool, body: dict[str, Any]) -> int:
    if response:
        flexible = kp._is_flexible(messages.RESPONSE_FLEXIBLE_FROM, key, version) and key != 18
        return len(encode_response(key, version, 1, body)) - 8 - int(flexible)
    return len(request_body(key, version, body))


@pytest.mark.parametrize(
    "case",
    DEFINITIONS,
    ids=[f"{API_NAMES[k]}{'Response' if r else 'Request'}-v{v}" for k, v, r in DEFINITIONS],
)
def test_min_size_is_the_smallest_encoding(case: tuple[int, int, bool]) -> None:
    con = _definition(*case)
    assert encoded_size(*case, filled(con, 0)) == con.min_size
    assert encoded_size(*case, filled(con, 1)) >= con.min_size


def _top_level_arrays() -> list[tuple[int, int, int]]:
    """(key, version, field index) of every request's top-level arrays."""
    found = []
    for key, version in REQUESTS:
        for index, (_, sub, _) in enumerate(messages.REQUESTS[(key, version)].fields):
            if isinstance(sub, vocabulary.ArrayField):
                found.append((key, version, index))
    return found


TOP_LEVEL_ARRAYS = _top_level_arrays()


@settings(max_examples=examples(1500), deadline=None)
@given(
    where=st.sampled_from(TOP_LEVEL_ARRAYS),
    count=st.integers(1, 2**31 - 2) | st.sampled_from([2**31 - 2, 2_000_000]),
    padding=st.integers(0, 4096),
)
def test_a_count_the_bytes_cannot_hold_is_refused_before_allocating(
    where: tuple[int, int, int], count: int, padding: int
) -> None:
    key, version, index = where
    con = messages.REQUESTS[(key, version)]
    array = con.fields[index][1]
    body = filled(con, 0)
    body[con.fields[index][0]] = []
    encoded = bytes(request_body(key, version, body))
    # with every field at its smallest, the array's count sits after the fields before it
    at = sum(sub.min_size for _, sub, _ in con.fields[:index])
    empty_count = b"\x01" if array.compact else b"\x00\x00\x00\x00"
    assert encoded[at : at + len(empty_count)] == empty_count
    claimed = uvarint(count + 1) if array.compact else struct.pack(">i", count)
    hostile = encoded[:at] + claimed + encoded[at + len(empty_count) :] + b"\x00" * padding
    left = len(hostile) - at - len(claimed)
    if count * array.entry_size <= left:
        return  # the bytes could hold it: then the entry budget bounds it (below)
    decode_request(key, version, encoded)  # compiles the definition, outside the measure
    tracemalloc.start()
    try:
        with pytest.raises(KafkaDecodeError, match="exceed the"):
            decode_request(key, version, hostile)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # no entry was decoded: the few kB are the exception and its message
    assert peak < 64 * 1024, f"{count} claimed entries allocated {peak} bytes"


@settings(max_examples=examples(1000), deadline=None)
@given(
    case=st.sampled_from(REQUESTS),
    length=st.integers(0, 3),
    slack=st.integers(0, 3),
)
def test_the_entry_budget_counts_every_entry(
    case: tuple[int, int], length: int, slack: int
) -> None:
    key, version = case
    body = request_body(key, version, filled(messages.REQUESTS[case], length))
    decoded = decode_request(key, version, body)
    entries = list_items(decoded)
    budget = EntryBudget(entries + slack)
    assert decode_request(key, version, body, budget) == decoded
    assert budget.left == slack
    if entries:
        with pytest.raises(TooManyEntries):
            decode_request(key, version, body, EntryBudget(entries - 1))


def test_millions_of_tiny_entries_stop_at_the_budget() -> None:
    """The 6 MB Produce of 2M three-byte topic entries: every count fits the bytes, so only
    the budget stops it, and it does so at the count, before decoding an entry."""
    count = 2_000_000
    topics = uvarint(count + 1) + b"\x01\x01\x00" * count
    body = b"\x00" + struct.pack(">hi", 1, 30000) + topics + b"\x00"
    decode_request(0, 9, body[:7] + b"\x01\x00")  # compiles Produce v9 outside the measure
    started = time.perf_counter()
    with pytest.raises(TooManyEntries):
        decode_request(0, 9, body, EntryBudget(100_000))
    assert time.perf_counter() - started < 0.5  # unbounded, this took 7 to 9 s
