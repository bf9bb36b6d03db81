"""A batched Pulsar entry split message by message, as the message path
(native_reader.stored_messages) gives it: the reference the whole-entry readers are
compared with in property tests."""

from __future__ import annotations

from pulsar_gateway.gateway.backend.wire.batch import split_batch
from pulsar_gateway.gateway.messages import MessageKey, StoredMessage

PRODUCER = "gw-1.native"
PUBLISHED = 1_700_000_000_999


def split_entry(mid: MessageKey, data: bytes, count: int) -> list[StoredMessage]:
    """The entry at `mid` (ledger, entry, 0), its messages numbered by batch index."""
    return [
        StoredMessage(
            (mid[0], mid[1], m.batch_index),
            m.payload,
            m.key or "",
            m.properties,
            m.event_time,
            PUBLISHED,
            PRODUCER,
        )
        for m in split_batch(data, count)
    ]
