"""The gateway-wide bound on AMQP publishes awaiting the store: RabbitMQ's memory alarm.

Each connection already stops being read once its own publishes awaiting the store hold
`amqp.max_in_flight_bytes`; but a thousand connections each under that bound can still hold
a thousand times it. The alarm adds them up: once all connections together hold
`amqp.max_total_in_flight_bytes`, it is raised, and every connection that publishes is
blocked at its next publish (connection.blocked to clients that asked for it, and its socket
not read), as RabbitMQ blocks publishers while its memory alarm is on. Consumers are not
blocked: their acks are what lets the store catch up. The alarm clears once the total is
down to half, and every connection it blocked is told (connection.unblocked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("gateway.amqp")


class PublishAlarm:
    """Bytes of publishes awaiting the store, across every connection of a listener."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.raised = False
        self._on_clear: set[Callable[[], None]] = set()

    def watch(self, on_clear: Callable[[], None]) -> None:
        """`on_clear` is called each time the alarm clears, until `unwatch`."""
        self._on_clear.add(on_clear)

    def unwatch(self, on_clear: Callable[[], None]) -> None:
        self._on_clear.discard(on_clear)

    def add(self, n: int) -> None:
        self.used += n
        if not self.raised and self.used >= self.limit:
            self.raised = True
            log.warning(
                "publish alarm: %d bytes of publishes await the store (amqp."
                "max_total_in_flight_bytes %d): publishing connections are blocked",
                self.used,
                self.limit,
            )

    def remove(self, n: int) -> None:
        self.used -= n
        if self.raised and self.used <= self.limit // 2:
            self.raised = False
            log.warning("publish alarm cleared: %d bytes await the store", self.used)
            for on_clear in list(self._on_clear):
                on_clear()
