"""What the backend keeps per topic it writes to: its producers, the order of its sends and
the sequence stamped on its messages (pulsar_backend.py sends through it; native_writer.py
adds the wire client's producer)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any


class TopicWriter:
    """A batching producer plus, on demand, a chunking one for messages over 5 MiB.

    Order within the partition is kept across the two by waiting for the other
    producer's outstanding group before switching.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.id = uuid.uuid4().hex  # names its producers (resend_filter.writer_of)
        self.batching: Any = None
        self.chunking: Any = None
        self.last_group: asyncio.Future[Any] | None = None
        self.last_kind = "batching"
        self.sequence = 0  # stamped on every message: resends are recognised by it
        self.last_used = time.monotonic()
        # set once the topic's last send has queued its messages: the next waits for it
        self.queued: asyncio.Future[None] | None = None
        self.single: Any = None  # batching off: one entry per message (AMQP queues)
        self.native: Any = None  # `pulsar.client = "native"`: the wire producer (native_writer)
        self.native_sequence = 0  # where the next wire producer's sequence ids start
        # Whether the topic's current ledger is known to hold an entry already, so that a
        # batch sent now cannot be its entry 0 (docs/backend.md, "A batch must not open a
        # ledger"). Until then a send's first message goes out alone.
        self.ledger_opened = False
