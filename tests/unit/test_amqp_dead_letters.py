"""The dead-lettered copy's properties (dead_letters.py), as RabbitMQ 3.13/4 make them."""

from __future__ import annotations

import datetime

from pamqp import commands

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.dead_letters import dead_letter_properties
from pulsar_gateway.handlers.amqp.frames import encode_properties
from pulsar_gateway.handlers.amqp.property_octets import (
    read_integer,
    read_text,
    split_array,
    split_properties,
    split_table,
)

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def _message(raw: bytes, exchange: str = "ex", key: str = "rk") -> AmqpMessage:
    return AmqpMessage(exchange, key, raw, b"body")


def _deaths(raw: bytes) -> list[dict[str, bytes]]:
    _, fields = split_properties(raw)
    headers = dict(split_table(fields["headers"]))
    return [dict(split_table(v[1:])) for v in split_array(headers["x-death"])]


def test_each_queue_and_reason_has_one_entry_counted_up_and_moved_to_the_front() -> None:
    raw = encode_properties(commands.Basic.Properties(headers={"app": 1}, expiration="500"))
    path = [("work", "rejected"), ("wait", "expired")] * 3 + [("work", "rejected")]
    for queue, reason in path:
        raw, _ = dead_letter_properties(_message(raw), queue, reason, NOW)
    deaths = _deaths(raw)
    assert [(read_text(d["queue"]), read_text(d["reason"])) for d in deaths] == [
        ("work", "rejected"),
        ("wait", "expired"),
    ]
    assert [d["count"] for d in deaths] == [
        b"l" + (4).to_bytes(8, "big"),
        b"l" + (3).to_bytes(8, "big"),
    ]
    assert read_integer(deaths[0]["count"]) == 4
    # the fields of the first death are kept; expiration went into original-expiration
    assert read_text(deaths[0]["original-expiration"]) == "500"
    assert "original-expiration" not in deaths[1]
    assert list(deaths[0]) == sorted(deaths[0])
    _, fields = split_properties(raw)
    assert "expiration" not in fields


def test_application_headers_keep_their_octets() -> None:
    table = b"\x03appI\x00\x00\x00\x05\x03neg" + b"b\xff"
    headers = len(table).to_bytes(4, "big") + table
    raw = commands.Basic.Properties.flags["headers"].to_bytes(2, "big") + headers
    copy, decoded = dead_letter_properties(_message(raw), "q", "maxlen", NOW)
    entries = dict(split_table(split_properties(copy)[1]["headers"]))
    assert entries["app"] == b"I\x00\x00\x00\x05" and entries["neg"] == b"b\xff"
    assert decoded["x-first-death-reason"] == decoded["x-last-death-reason"] == "maxlen"
