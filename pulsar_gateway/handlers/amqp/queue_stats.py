"""A queue's message counters since its engine started in this process, for the management
API's `message_stats` (RabbitMQ's names: publish, deliver_get, ack) and the console's
per-queue rates, which the page works out from two readings, as it does the overview's.

Counted where the engine counts messages (queue_engine.py): `publish` when a publish to the
queue is stored, `deliver_get` when a ready message goes to a consumer or basic.get,
redeliveries included, `ack` when a delivered message is settled for good (a client's ack,
or a no-ack delivery). They are kept in memory only: a restart, or an idle queue's engine
let go, starts them at zero again, which a reader of rates takes for a reset.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class QueueStats:
    publish: int = 0
    deliver_get: int = 0
    ack: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
