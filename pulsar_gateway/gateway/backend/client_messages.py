"""What pulsar-client sends and answers, made from and turned into the gateway's own
message types (the `pulsar-client` side of `PulsarBackend`)."""

from __future__ import annotations

from typing import Any

import _pulsar

from pulsar_gateway.gateway.backend.resend_filter import SEQ, stamp_text
from pulsar_gateway.gateway.messages import MessageKey, OutMessage

# pulsar-lite's largest message; anything bigger goes through a chunking producer.
MAX_UNCHUNKED_BYTES = 5 * 1024 * 1024 - 64 * 1024


def build_message(message: OutMessage, sequence: int, more: bool = False) -> Any:
    builder = _pulsar.MessageBuilder()
    builder.property(SEQ, stamp_text(sequence, more))
    if message.payload is None:
        builder.set_null_value()
    else:
        builder.content(message.payload)
    if message.key:
        builder.partition_key(message.key)
        builder.ordering_key(message.key)
    if message.properties:
        builder.properties(message.properties)
    if message.event_time > 0:
        builder.event_timestamp(message.event_time)
    return builder.build()


def message_key(mid: Any) -> MessageKey:
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


def is_big(message: OutMessage) -> bool:
    return message.payload is not None and len(message.payload) > MAX_UNCHUNKED_BYTES
