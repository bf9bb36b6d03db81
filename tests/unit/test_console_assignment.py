"""The console's reading of a classic consumer group's assignment bytes (the `consumer`
protocol's version, [topic, [partition]], user data): what a client sends is read back,
and any bytes at all give a mapping or {}, never an exception."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.console.kafka_view import consumer_assignment

TOPIC = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
ASSIGNMENT = st.dictionaries(TOPIC, st.lists(st.integers(0, 2**31 - 1), max_size=8), max_size=5)


def encode(assignment: dict[str, list[int]], user_data: bytes = b"") -> bytes:
    out = struct.pack(">hi", 1, len(assignment))
    for topic, partitions in assignment.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(partitions))
        out += struct.pack(f">{len(partitions)}i", *partitions)
    return out + struct.pack(">i", len(user_data)) + user_data


@given(ASSIGNMENT, st.binary(max_size=16))
def test_an_assignment_reads_back(assignment: dict[str, list[int]], user_data: bytes) -> None:
    expected = {topic: sorted(partitions) for topic, partitions in assignment.items()}
    assert consumer_assignment(encode(assignment, user_data)) == expected


@given(st.binary(max_size=200))
def test_any_bytes_give_a_mapping(raw: bytes) -> None:
    result = consumer_assignment(raw)
    assert isinstance(result, dict)


def test_a_cut_assignment_gives_nothing() -> None:
    raw = encode({"orders": [0, 1, 2]})
    assert consumer_assignment(raw[:-8]) == {}
    assert consumer_assignment(b"") == {}
