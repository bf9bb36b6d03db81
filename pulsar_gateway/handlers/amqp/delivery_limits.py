"""Quorum queues' delivery counts and delivery limit, as RabbitMQ's quorum queues have them.

A quorum queue counts the unsuccessful deliveries of each message: every return to the
queue (basic.nack or basic.reject with requeue, basic.recover, a channel closed or a
consumer cancelled with the message unacknowledged). Each delivery carries the count so
far in the `x-delivery-count` header (a `long`; 0 on the first delivery, as RabbitMQ 3.10
sends it, the count on each redelivery). Once a message has been returned more often than
`x-delivery-limit` allows it is dead-lettered with reason `delivery_limit` (or dropped
without a dead-letter exchange): a poison message stops coming back. Without the argument
the limit is RabbitMQ 4's default, 20 (3.x had none).

Counts live in the gateway's memory beside Pulsar's own redelivery count, which carries
them across a gateway restart (the larger of the two is used). The header is added to what
goes out only: the stored message, and a dead-lettered copy of it, stay as published.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable

from pulsar_gateway.handlers.amqp.broker_model import StoredDelivery
from pulsar_gateway.handlers.amqp.property_octets import (
    join_properties,
    join_table,
    long_value,
    split_properties,
    split_table,
)
from pulsar_gateway.handlers.amqp.topology import Queue

DEFAULT_DELIVERY_LIMIT = 20  # RabbitMQ 4.0's default for quorum queues
DELIVERY_COUNT = "x-delivery-count"
STREAM_OFFSET = "x-stream-offset"


def delivery_limit(queue: Queue) -> int | None:
    """The queue's delivery limit; None for queues that do not count (classic ones)."""
    if queue.queue_type != "quorum":
        return None
    limit = queue.arguments.get("x-delivery-limit")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    return DEFAULT_DELIVERY_LIMIT


class DeliveryCounts:
    """A quorum queue's returns per message, and its limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._returns: dict[Hashable, int] = {}

    def count(self, delivery: StoredDelivery) -> int:
        return max(self._returns.get(delivery.message_id, 0), delivery.redelivery_count)

    def returned(
        self, deliveries: Iterable[StoredDelivery]
    ) -> tuple[list[StoredDelivery], list[StoredDelivery]]:
        """Deliveries that came back: (those going back to the queue, those past the
        limit)."""
        back: list[StoredDelivery] = []
        spent: list[StoredDelivery] = []
        for delivery in deliveries:
            count = self.count(delivery) + 1
            if count > self.limit:
                self._returns.pop(delivery.message_id, None)
                spent.append(delivery)
            else:
                self._returns[delivery.message_id] = count
                back.append(delivery)
        return back, spent

    def stamp(self, delivery: StoredDelivery) -> StoredDelivery:
        """The delivery as it goes out: carrying its count."""
        return dataclasses.replace(delivery, delivery_count=self.count(delivery))

    def forget(self, message_id: Hashable) -> None:
        self._returns.pop(message_id, None)


def outgoing_properties(delivery: StoredDelivery) -> bytes:
    """The property octets a delivery is sent with: as stored, plus `x-delivery-count`
    when its queue counts deliveries and `x-stream-offset` when it comes from a stream
    (the other headers keep their octets)."""
    raw = delivery.message.properties_raw
    added = {}
    if delivery.delivery_count is not None:
        added[DELIVERY_COUNT] = long_value(delivery.delivery_count)
    if delivery.stream_offset is not None:
        added[STREAM_OFFSET] = long_value(delivery.stream_offset)
    if not added:
        return raw
    _, fields = split_properties(raw)
    entries = split_table(fields["headers"]) if "headers" in fields else []
    entries = [(name, value) for name, value in entries if name not in added]
    fields["headers"] = join_table([*entries, *added.items()])
    return join_properties(fields)
