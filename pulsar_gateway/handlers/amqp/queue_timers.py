"""The timers of a queue engine (queue_engine.py): the expiry of its head message
(x-message-ttl or a per-message TTL), the window in which a priority queue gathers its
stored backlog before it delivers, and the back-off of the nudges of an idle subscription.
The engine keeps the decisions (what expires when, whether a backlog is still unfetched,
whether consumers wait); these keep the times.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# Consumers wait and Pulsar sends nothing: nudge the subscription after this long, then
# after twice as long each time up to the maximum (docs/backend.md, "Shared dispatch can
# park a message": after a gateway restart the count does not know the parked message)
IDLE_NUDGE_FIRST_SECONDS = 2.0
IDLE_NUDGE_MAX_SECONDS = 60.0


def now_ms() -> int:
    """The clock message expiry is measured in (epoch ms, as AMQP's `expiration`)."""
    return int(time.time() * 1000)


class HeadExpiryTimer:
    """Calls `fire` once when the head message expires; rescheduled whenever the head
    changes, cancelled when the queue closes."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None

    def schedule(self, expiry_ms: int | None) -> None:
        """Fire just after `expiry_ms` (so the head is past it then), replacing any earlier
        schedule; None: not at all."""
        self.cancel()
        if expiry_ms is not None:
            delay = max(0.0, (expiry_ms - now_ms()) / 1000) + 0.001
            self._handle = asyncio.get_running_loop().call_later(delay, self._run)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self._handle = None
        self._fire()


class GatherWindow:
    """How long a priority queue may hold back delivery while its count says more is stored
    than it holds: at most `seconds` from the first time it held back (then `retry` runs),
    so a stale count never stalls the queue."""

    def __init__(self, seconds: float, retry: Callable[[], None]) -> None:
        self.seconds = seconds
        self._retry = retry
        self._since: float | None = None

    def holding(self, backlog_unfetched: bool) -> bool:
        """Whether to hold back now; a queue that caught up closes the window."""
        if not backlog_unfetched:
            self._since = None
            return False
        now = time.monotonic()
        if self._since is None:
            self._since = now
            asyncio.get_running_loop().call_later(self.seconds, self._retry)
        return now - self._since < self.seconds


class IdleNudge:
    """How long the pump waits for messages, while consumers wait, before it nudges the
    subscription: the first wait, doubled after each nudge that brought nothing."""

    def __init__(self) -> None:
        self.seconds = IDLE_NUDGE_FIRST_SECONDS

    def cap(self, timeout: float | None) -> float:
        """`timeout`, shortened to the current wait."""
        return self.seconds if timeout is None else min(timeout, self.seconds)

    def reset(self) -> None:
        """Messages came: the next wait is the first one again."""
        self.seconds = IDLE_NUDGE_FIRST_SECONDS

    def back_off(self) -> None:
        """A nudge brought nothing: wait twice as long next time, up to the maximum."""
        self.seconds = min(self.seconds * 2, IDLE_NUDGE_MAX_SECONDS)
