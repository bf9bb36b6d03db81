"""A record as parity compares it, and how one is made of a confluent-kafka message.

Kept apart from `sources.py` (which needs pyspark) so that the samples of a report
(`samples.py`) read records the same way without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka import Message

# (offset, key, value, headers, timestamp): a record as both sides' readers yield it
Record = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]


def kafka_record(message: Message) -> Record:
    """A consumed message (no error) as a `Record`. confluent-kafka hands header values over
    as bytes; its types also allow str (and a dict of headers), which are taken as UTF-8."""
    offset = message.offset()
    if offset is None:
        raise ValueError("a consumed message has no offset")
    return (
        offset,
        message.key(),
        message.value(),
        plain_headers(message.headers()),
        message.timestamp()[1],
    )


def plain_headers(headers: Any) -> list[tuple[str, bytes | None]]:
    """Headers as (name, bytes or None) pairs, whichever container they came in (None for
    none, a dict, str values taken as UTF-8)."""
    pairs = (headers or {}).items() if isinstance(headers, dict | None) else headers
    return [(name, _as_bytes(data)) for name, data in pairs]


def _as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data
