"""The copy of a message that a queue dead-letters, as RabbitMQ 3.13 and 4.x make it.

The copy keeps the publisher's property octets and changes only what RabbitMQ changes
(property_octets.py: the application's own headers keep their types byte for byte):

- `x-death` holds one entry per (queue, reason): the first time a message dies in a queue
  for a reason, a new entry goes to the front of the array (count 1, the queue, reason,
  time, exchange and routing keys of that death, and `original-expiration` when the
  message had one); each later death for the same pair adds one to that entry's `count`
  (a `long`, as RabbitMQ types it) and moves it to the front, its other fields kept as
  they were. Applications cap their retries on `x-death[0].count`.
- `x-first-death-reason`, `-queue` and `-exchange` are set once; `x-last-death-reason`,
  `-queue` and `-exchange` (RabbitMQ 3.13 and later) follow each death.
- `expiration` is removed, so the copy does not expire again in the queue it reaches.

Routing is the dead-letter exchange's, with the queue's dead-letter routing key or the
message's own.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from pamqp import decode

from pulsar_gateway.handlers.amqp.broker_model import AmqpMessage
from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.amqp.exchange_routing import route, sender_selected_keys
from pulsar_gateway.handlers.amqp.property_octets import (
    FieldValue,
    array_value,
    join_properties,
    join_table,
    long_value,
    longstr_value,
    read_integer,
    read_shortstr,
    read_text,
    split_array,
    split_properties,
    split_table,
    table_value,
    timestamp_value,
)
from pulsar_gateway.handlers.amqp.topology import Queue, Topology

X_DEATH = "x-death"


def dead_letter_copy(
    topology: Topology, queue: Queue, message: AmqpMessage, reason: str
) -> tuple[frozenset[str], AmqpMessage] | None:
    """The copy of `message` the queue's dead-letter exchange routes, and where it goes;
    None when it goes nowhere (no such exchange, or nothing bound for it)."""
    dlx = queue.dead_letter_exchange
    if dlx is None or dlx not in topology.exchanges:
        return None
    key = queue.dead_letter_routing_key or message.routing_key
    raw, headers = dead_letter_properties(message, queue.name, reason)
    try:
        queues = route(topology, dlx, key, headers, sender_selected_keys(headers))
    except AmqpError:
        return None
    if not queues:
        return None
    copy = AmqpMessage(
        dlx,
        key,
        raw,
        message.body,
        message.persistent,
        None,
        int(time.time() * 1000),
        message.priority,
    )
    return queues, copy


def dead_letter_properties(
    message: AmqpMessage, queue: str, reason: str, now: datetime.datetime | None = None
) -> tuple[bytes, dict[str, Any]]:
    """The message's property octets as dead-lettered from `queue` for `reason`, and the
    headers decoded (for a headers exchange's routing)."""
    raw = message.properties_raw
    try:
        _, fields = split_properties(raw)
        entries = split_table(fields["headers"]) if "headers" in fields else []
    except (ValueError, IndexError):
        return raw, {}  # not well-formed: the decoder let nothing like it in
    expiration = fields.pop("expiration", None)
    when = now or datetime.datetime.now(datetime.UTC)
    deaths = _deaths(entries, queue, reason, message, expiration, when)
    updates: dict[str, FieldValue] = {X_DEATH: deaths}
    names = {name for name, _ in entries}
    for part, text in (("reason", reason), ("queue", queue), ("exchange", message.exchange)):
        if f"x-first-death-{part}" not in names:
            updates[f"x-first-death-{part}"] = longstr_value(text)
        updates[f"x-last-death-{part}"] = longstr_value(text)
    kept = [(name, value) for name, value in entries if name not in updates]
    table = join_table([*kept, *updates.items()])
    fields["headers"] = table
    headers = decode.field_table(table)[1]
    return join_properties(fields), headers


def message_headers(raw: bytes) -> dict[str, Any]:
    """The headers of property octets, decoded (for routing); {} when there are none."""
    try:
        fields = split_properties(raw)[1]
        return decode.field_table(fields["headers"])[1] if "headers" in fields else {}
    except (ValueError, IndexError):
        return {}


def _deaths(
    entries: list[tuple[str, FieldValue]],
    queue: str,
    reason: str,
    message: AmqpMessage,
    expiration: bytes | None,
    when: datetime.datetime,
) -> FieldValue:
    """The new `x-death` array: the (queue, reason) entry counted up and moved to the front,
    or a new entry in front."""
    previous = next((value for name, value in entries if name == X_DEATH), None)
    others: list[FieldValue] = []
    found: dict[str, FieldValue] | None = None
    for value in split_array(previous) if previous is not None else []:
        entry = dict(split_table(value[1:])) if value[:1] == b"F" else None
        if (
            found is None
            and entry is not None
            and read_text(entry.get("queue", b"")) == queue
            and read_text(entry.get("reason", b"")) == reason
        ):
            found = entry
        else:
            others.append(value)
    if found is not None:
        found["count"] = long_value((read_integer(found.get("count", b"")) or 0) + 1)
    else:
        found = {
            "count": long_value(1),
            "exchange": longstr_value(message.exchange),
            "queue": longstr_value(queue),
            "reason": longstr_value(reason),
            "routing-keys": array_value([longstr_value(message.routing_key)]),
            "time": timestamp_value(when.replace(microsecond=0)),
        }
        if expiration is not None:
            found["original-expiration"] = longstr_value(read_shortstr(expiration))
    # RabbitMQ keeps an entry's fields sorted by name
    return array_value([table_value(sorted(found.items())), *others])
