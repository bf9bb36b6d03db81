"""What a listener owns to hold up under abuse: byte budgets, per-IP counts, a log limiter.

Each server (Kafka, AMQP) makes its own instances, so two listeners, or two gateways in one
test process, never share a count; nothing here is module state.

- `ByteBudget`: bytes read and not yet answered, against a limit. Waiting for room is how a
  listener applies backpressure: it stops reading the socket, the kernel's buffers fill and
  the client's writes block, instead of the gateway's memory growing.
- `ConnectionsPerIp`: so that one host (or one script) cannot take every connection slot.
- `LogLimiter`: a logging filter that lets a burst of each message template through per
  interval and counts the rest, so a flood of bad requests cannot flood the log as well.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

_MAX_KEYS = 1024


class ByteBudget:
    """Bytes in use against ``limit``, optionally within a ``parent`` (a total across budgets).

    `acquire` waits until the bytes fit; a request larger than the limit is let in alone, once
    nothing else is held, so that no frame the listener accepts can wait forever. `charge`
    adds bytes that already exist (a decoded request is bigger than its frame) without
    waiting: the next `acquire` waits for them instead.
    """

    def __init__(self, limit: int, parent: ByteBudget | None = None) -> None:
        self.limit = limit
        self.parent = parent
        self.used = 0
        self._waiters: list[asyncio.Future[None]] = []

    def fits(self, n: int) -> bool:
        return self.used == 0 or self.used + n <= self.limit

    async def acquire(self, n: int) -> None:
        """Take ``n`` bytes here and in the parent, waiting (in order: here, then the parent)
        until both have room."""
        while not self.fits(n):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)
        self.used += n
        if self.parent is not None:
            try:
                await self.parent.acquire(n)
            except BaseException:
                self._give_back(n)
                raise

    def charge(self, n: int) -> None:
        """Count ``n`` more bytes, here and in the parent, without waiting."""
        self.used += n
        if self.parent is not None:
            self.parent.charge(n)

    def release(self, n: int) -> None:
        """Give back ``n`` bytes here and in the parent; wakes whoever waits for room."""
        self._give_back(n)
        if self.parent is not None:
            self.parent.release(n)

    def release_all(self) -> None:
        """Give back everything held here (a connection that closed with requests queued)."""
        self.release(self.used)

    def _give_back(self, n: int) -> None:
        self.used -= n
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


class ConnectionsPerIp:
    """Open connections per peer address, refused beyond ``limit``.

    Kafka's ``max.connections.per.ip``: without it one host holding idle sockets takes every
    one of ``max_connections`` and locks every other client out.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``, or say no (and count nothing) at the limit."""
        count = self._open.get(ip, 0)
        if count >= self.limit:
            return False
        self._open[ip] = count + 1
        return True

    def release(self, ip: str) -> None:
        count = self._open.get(ip, 0) - 1
        if count > 0:
            self._open[ip] = count
        else:
            self._open.pop(ip, None)

    def open_from(self, ip: str) -> int:
        return self._open.get(ip, 0)


class LogLimiter(logging.Filter):
    """Lets ``burst`` records of each message template through per ``interval`` seconds.

    Keyed by logger and the unformatted message (a template in the code, so the keys are
    few), not by the formatted text, which differs per peer. The first record let through
    after a quiet spell says how many like it were suppressed. Attach it with `attach` to the
    loggers whose messages a client can cause per request, and `detach` it on stop.
    """

    def __init__(
        self,
        burst: int = 10,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.interval = interval
        self.clock = clock
        # per key: start of the current window, records let through in it, suppressed since
        self._windows: dict[tuple[str, str], list[float | int]] = {}
        self._loggers: list[logging.Logger] = []

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        key = (record.name, str(record.msg))
        window = self._windows.get(key)
        if window is None and len(self._windows) >= _MAX_KEYS:
            self._windows.clear()  # messages formatted before logging: keys without end
        if window is None or now - window[0] >= self.interval:
            suppressed = int(window[2]) if window is not None else 0
            self._windows[key] = [now, 1, 0]
            if suppressed:
                record.msg = f"{record.msg} (and {suppressed} more like it suppressed)"
            return True
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        return False

    def attach(self, *names: str) -> None:
        for name in names:
            logger = logging.getLogger(name)
            logger.addFilter(self)
            self._loggers.append(logger)

    def detach(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers.clear()
