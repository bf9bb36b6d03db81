"""Heartbeat and timeout bookkeeping on a clock the driver passes in.

No timers live here: the driver asks "is a heartbeat due?", "is the peer
dead?" and "when should I look again?" with a monotonic time in seconds,
which keeps the core deterministic and testable without sleeping. The pace is
RabbitMQ's: send when nothing went out for half the interval; give up after
two intervals without a received octet (the spec's rule); give up on a
handshake that does not reach connection.open-ok within the handshake
timeout; and wait for a close-ok at most min(heartbeat, 30 s).
"""

from __future__ import annotations

from enum import Enum

CLOSING_TIMEOUT = 30.0  # RabbitMQ's ?CLOSING_TIMEOUT


class Phase(Enum):
    """What the connection is waiting for, as far as time is concerned."""

    HANDSHAKE = "handshake"  # before connection.open-ok
    RUNNING = "running"
    CLOSING = "closing"  # connection.close sent, close-ok awaited
    DONE = "done"


class HeartbeatClock:
    """Last octet in, last octet out, and the deadlines derived from them."""

    __slots__ = (
        "handshake_timeout",
        "interval",
        "_started_at",
        "_last_received",
        "_last_sent",
        "_closing_since",
    )

    def __init__(self, now: float, handshake_timeout: float) -> None:
        self.handshake_timeout = handshake_timeout
        self.interval = 0  # negotiated heartbeat in seconds, 0 = off
        self._started_at = now
        self._last_received = now
        self._last_sent = now
        self._closing_since = now

    def received(self, now: float) -> None:
        """Any octet from the peer proves it alive, not only heartbeat frames."""
        self._last_received = now

    def sent(self, now: float) -> None:
        self._last_sent = now

    def closing(self, now: float) -> None:
        """We sent connection.close: the close-ok wait starts now."""
        self._closing_since = now

    def heartbeat_due(self, now: float, phase: Phase) -> bool:
        return (
            self.interval > 0
            and phase in (Phase.HANDSHAKE, Phase.RUNNING)
            and now - self._last_sent >= self.interval / 2
        )

    def expired(self, now: float, phase: Phase) -> str | None:
        """Why the peer is to be given up on now, or None."""
        for deadline, reason in self._deadlines(phase):
            if now >= deadline:
                return reason
        return None

    def next_deadline(self, phase: Phase) -> float | None:
        """The earliest time at which a heartbeat or a timeout may be due."""
        times = [deadline for deadline, _ in self._deadlines(phase)]
        if self.interval and phase in (Phase.HANDSHAKE, Phase.RUNNING):
            times.append(self._last_sent + self.interval / 2)
        return min(times) if times else None

    def _deadlines(self, phase: Phase) -> list[tuple[float, str]]:
        deadlines: list[tuple[float, str]] = []
        if phase is Phase.HANDSHAKE:
            deadlines.append((self._started_at + self.handshake_timeout, "handshake timeout"))
        if self.interval and phase in (Phase.HANDSHAKE, Phase.RUNNING):
            deadlines.append(
                (
                    self._last_received + 2 * self.interval,
                    f"missed heartbeats from client, timeout: {self.interval}s",
                )
            )
        if phase is Phase.CLOSING:
            wait = self.interval if 0 < self.interval < CLOSING_TIMEOUT else CLOSING_TIMEOUT
            deadlines.append((self._closing_since + wait, "no connection.close-ok in time"))
        return deadlines
