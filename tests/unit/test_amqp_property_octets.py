"""Editing basic properties as octets (property_octets.py): what is not edited stays byte
for byte, whatever types the publisher chose (issue 36)."""

from __future__ import annotations

import datetime
import decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.amqp.frames import encode_properties
from pulsar_gateway.handlers.amqp.property_octets import (
    join_properties,
    join_table,
    read_integer,
    read_shortstr,
    read_text,
    replace_shortstr,
    split_properties,
    split_table,
)

texts = st.text(max_size=20)
short_texts = st.text(st.characters(codec="ascii"), max_size=20)
values = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        texts,
        st.binary(max_size=10).map(bytearray),
        st.floats(-1024, 1024, width=32),
        st.none(),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_texts, inner, max_size=3),
    max_leaves=8,
)
headers = st.dictionaries(short_texts, values, max_size=6)


def _properties(**fields: object) -> bytes:
    return encode_properties(commands.Basic.Properties(**fields))


@settings(max_examples=examples(60), deadline=None)
@given(headers, st.one_of(st.none(), short_texts), st.one_of(st.none(), short_texts))
def test_split_then_join_gives_the_same_octets(table, reply_to, correlation_id) -> None:
    raw = _properties(headers=table, reply_to=reply_to, correlation_id=correlation_id)
    flags, fields = split_properties(raw)
    assert join_properties(fields) == raw
    if table:
        entries = split_table(fields["headers"])
        assert sorted(name for name, _ in entries) == sorted(table)
        assert join_table(entries) == fields["headers"]


@settings(max_examples=examples(60), deadline=None)
@given(headers, short_texts)
def test_replacing_reply_to_leaves_every_other_octet(table, address) -> None:
    raw = _properties(headers=table, reply_to="amq.rabbitmq.reply-to", message_id="m1")
    edited = replace_shortstr(raw, "reply_to", address)
    _, before = split_properties(raw)
    _, after = split_properties(edited)
    assert read_shortstr(after["reply_to"]) == address
    assert {k: v for k, v in after.items() if k != "reply_to"} == {
        k: v for k, v in before.items() if k != "reply_to"
    }


def test_removing_a_property_clears_its_flag() -> None:
    raw = _properties(expiration="1000", priority=3)
    edited = replace_shortstr(raw, "expiration", None)
    properties = commands.Basic.Properties()
    properties.unmarshal(int.from_bytes(edited[:2], "big"), edited[2:])
    assert properties.expiration is None and properties.priority == 3


def test_values_are_read_whatever_their_integer_width() -> None:
    table = b"".join(
        [
            b"\x01ab\x05",
            b"\x01bs\xff\xfe",
            b"\x01cI\x00\x00\x01\x00",
            b"\x01dl" + (2**40).to_bytes(8, "big"),
            b"\x01eS\x00\x00\x00\x02hi",
        ]
    )
    entries = dict(split_table(len(table).to_bytes(4, "big") + table))
    assert [read_integer(entries[k]) for k in "abcd"] == [5, -2, 256, 2**40]
    assert read_text(entries["e"]) == "hi" and read_integer(entries["e"]) is None


def test_a_table_of_every_type_splits_into_its_typed_values() -> None:
    table = {
        "bool": True,
        "int": 7,
        "long": 2**40,
        "str": "x",
        "bytes": bytearray(b"\x00\x01"),
        "float": 1.5,
        "decimal": decimal.Decimal("1.25"),
        "time": datetime.datetime(2024, 1, 2, 3, 4, 5),
        "list": [1, "a"],
        "table": {"k": "v"},
        "void": None,
    }
    raw = _properties(headers=table)
    _, fields = split_properties(raw)
    entries = split_table(fields["headers"])
    assert sorted(name for name, _ in entries) == sorted(table)
    assert join_table(entries) == fields["headers"]
