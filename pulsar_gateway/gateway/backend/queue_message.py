"""What a queue consumer hands out, through pulsar-client (`queue_consumers.py`) or the
wire client (`native_queue_consumer.py`) alike."""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_gateway.gateway.messages import MessageKey


@dataclass(slots=True)
class ReceivedMessage:
    """A message taken from a subscription; `id` is what ack/nack take back."""

    id: MessageKey
    payload: bytes = field(repr=False)
    properties: dict[str, str]
    publish_time: int
    redelivery_count: int
    producer: str = ""  # the Pulsar producer's name: with its sequence stamp, what a resend repeats
    # the message as the publishing side kept it, when the queue consumer had it (its
    # `known`): then `payload` and `properties` are left empty and `stamp` is its sequence
    # stamp
    built: object = None
    stamp: int = -1
