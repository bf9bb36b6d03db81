"""What a listener owns to hold up under abuse: byte budgets, per-IP counts, a log limiter.

Each server (Kafka, AMQP) makes its own instances, so two listeners, or two gateways in one
test process, never share a count; nothing here is module state.

- `ByteBudget`: bytes read and not yet answered, against a limit. Waiting for room is how a
  listener applies backpressure: it stops reading the socket, the kernel's buffers fill and
  the client's writes block, instead of the gateway's memory growing.
- `ConnectionLimits`: `max_connections` in all and `max_connections_per_ip` from one address,
  so that one host (or one script holding idle sockets) cannot take every connection slot,
  applied at accept, before any TLS handshake (tls_accept.py), with descriptors in reserve.
- `PerIpCount`: connections per address in one state (before login), against a limit.
- `PerIpBudgets`: a `ByteBudget` per address between its connections' and the listener's,
  so that one host's connections cannot take the whole listener's budget.
- `LogLimiter`: a logging filter that lets a burst of each message template through per
  interval and counts the rest, so a flood of bad requests cannot flood the log as well.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway import metrics

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


class ConnectionLimits:
    """Open connections in all and per peer address; a new one beyond either is refused.

    ``per_ip`` is Kafka's ``max.connections.per.ip``: without it one host holding idle
    sockets takes every one of ``total`` and locks every other client out. A refusal closes
    the socket, counts ``gateway_connections_refused_total`` and logs (through the
    listener's logger, so its LogLimiter applies) which setting refused it.
    """

    def __init__(self, protocol: str, total: int, per_ip: int, logger: logging.Logger) -> None:
        self.protocol = protocol
        self.total = total
        self.per_ip = per_ip
        self.log = logger
        self.open = 0
        self._by_ip: dict[str, int] = {}

    def admit(self, writer: asyncio.StreamWriter) -> str | None:
        """The peer's address, counted as open; or None once the socket has been refused."""
        sock = writer.get_extra_info("socket")
        return self.admit_socket(sock, writer.get_extra_info("peername"), writer.close)

    def admit_socket(self, sock: Any, peer: Any, close: Callable[[], object]) -> str | None:
        """`admit` for a socket as accepted (a TLS listener's, before its handshake:
        tls_accept.py): a socket that never finishes one counts, and sockets beyond the
        limits cost no handshake. Also refused: a socket whose descriptor is among the last
        `descriptor_reserve()` the process may open (RLIMIT_NOFILE), kept for /health, the
        backend and the files (a flood once used them all and /health failed with them)."""
        ip = str(peer[0]) if peer else "?"
        from_ip = self._by_ip.get(ip, 0)
        descriptor = sock.fileno() if sock is not None else -1
        ceiling = descriptor_ceiling()
        if descriptor >= ceiling:
            metrics.CONNECTIONS_REFUSED.labels(self.protocol, "file_descriptors").inc()
            self.log.warning(
                "refusing %s: %s socket descriptor %d is among the last %d the process may "
                "open (RLIMIT_NOFILE %d), kept for /health and the backend (file_descriptors)",
                peer,
                self.protocol,
                descriptor,
                descriptor_reserve(),
                ceiling + descriptor_reserve(),
            )
            close()
            return None
        if self.open >= self.total:
            self._refuse(close, peer, "max_connections", self.open)
            return None
        if from_ip >= self.per_ip:
            self._refuse(close, peer, "max_connections_per_ip", from_ip)
            return None
        self.open += 1
        self._by_ip[ip] = from_ip + 1
        return ip

    def warn_about_descriptors(self) -> None:
        """At start-up: say so when `total` connections would not fit in the descriptors
        the process may open (they are refused, with a log line, near the limit)."""
        ceiling = descriptor_ceiling()
        if self.total > ceiling:
            self.log.warning(
                "%s.max_connections is %d but the process may open only %d more descriptors "
                "(RLIMIT_NOFILE %d, %d kept for /health and the backend): connections are "
                "refused beyond that; raise `ulimit -n` to serve more",
                self.protocol,
                self.total,
                ceiling,
                ceiling + descriptor_reserve(),
                descriptor_reserve(),
            )

    def release(self, ip: str) -> None:
        self.open -= 1
        count = self._by_ip.get(ip, 0) - 1
        if count > 0:
            self._by_ip[ip] = count
        else:
            self._by_ip.pop(ip, None)

    def refuse(self, close: Callable[[], object], peer: Any, setting: str, count: int) -> None:
        """Close a socket (``close``), refused by ``setting`` (another limit than these)."""
        self._refuse(close, peer, setting, count)

    def _refuse(self, close: Callable[[], object], peer: Any, setting: str, count: int) -> None:
        metrics.CONNECTIONS_REFUSED.labels(self.protocol, setting).inc()
        warn(
            self.log,
            "refusing %s: %d connections open (%s.%s)",
            peer,
            count,
            self.protocol,
            setting,
        )
        close()


class PerIpCount:
    """Connections per peer address in one state (not logged in yet), against ``limit``:
    strangers holding sockets open before login cannot crowd out those who log in."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_ip: dict[str, int] = {}

    def count(self, ip: str) -> int:
        return self._by_ip.get(ip, 0)

    def take(self, ip: str) -> bool:
        """Count one more from ``ip``; False (nothing counted) at the limit."""
        count = self._by_ip.get(ip, 0)
        if count >= self.limit:
            return False
        self._by_ip[ip] = count + 1
        return True

    def give_back(self, ip: str) -> None:
        count = self._by_ip.get(ip, 0) - 1
        if count > 0:
            self._by_ip[ip] = count
        else:
            self._by_ip.pop(ip, None)


class PerIpBudgets:
    """One `ByteBudget` of ``limit`` per peer address, within the listener's ``parent``: the
    parent of each of that address's connection budgets. Ten connections that never read
    their answers once held the listener's whole budget, and no other client was read until
    they were stopped (`frame_timeout_seconds` later); now they hold their address's share.
    An address's budget lives while it has connections."""

    def __init__(self, limit: int, parent: ByteBudget) -> None:
        self.limit = limit
        self.parent = parent
        self._by_ip: dict[str, tuple[ByteBudget, int]] = {}

    def take(self, ip: str) -> ByteBudget:
        """The address's budget, for one more of its connections."""
        budget, users = self._by_ip.get(ip) or (ByteBudget(self.limit, self.parent), 0)
        self._by_ip[ip] = (budget, users + 1)
        return budget

    def give_back(self, ip: str) -> None:
        """One of the address's connections ended (having given back what it held)."""
        budget, users = self._by_ip[ip]
        if users > 1:
            self._by_ip[ip] = (budget, users - 1)
        else:
            del self._by_ip[ip]
            budget.release_all()  # nothing, unless a connection's bytes went astray

    def __len__(self) -> int:
        return len(self._by_ip)


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

    def suppresses(self, name: str, template: str) -> bool:
        """Whether a record of logger `name` with message `template` would be dropped now;
        if so it is counted as suppressed, as `filter` would have (see `warn`)."""
        window = self._windows.get((name, template))
        if window is None or self.clock() - window[0] >= self.interval:
            return False
        if window[1] < self.burst:
            return False
        window[2] += 1
        return True

    def attach(self, *names: str) -> None:
        for name in names:
            logger = logging.getLogger(name)
            logger.addFilter(self)
            self._loggers.append(logger)

    def detach(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers.clear()


def warn(logger: logging.Logger, template: str, *args: object) -> None:
    """`logger.warning(template, *args)`, unless a `LogLimiter` on the logger would drop it.
    A record dropped by the filter has still been made (the caller's frame looked up, the
    record built): 55-85 us on the loaded test machine, more than the rest of the work for
    a topic refused in a 99,999-topic Metadata, and the loop paid it for every refused
    socket of a flood (issue 33). Asked first, the limiter drops it for ~1 us."""
    for limiter in logger.filters:
        if isinstance(limiter, LogLimiter) and limiter.suppresses(logger.name, template):
            return
    logger.warning(template, *args)


# descriptors kept free for /health, the backend's connections and files: an accepted
# socket numbered within this many of RLIMIT_NOFILE is refused
DESCRIPTOR_RESERVE = 128


def descriptor_reserve() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return DESCRIPTOR_RESERVE
    return min(DESCRIPTOR_RESERVE, soft // 4)


def descriptor_ceiling() -> int:
    """The lowest descriptor number an accepted socket may not have. The kernel gives the
    lowest free number, so a socket numbered this high means the process is near its limit.
    Read at each accept (a system call: cheap), so that a changed limit applies at once."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 62
    return soft - descriptor_reserve()


def bound_address(server: Any) -> tuple[str, int] | None:
    """The host and port a listening server (an asyncio Server or a TlsListener: anything
    with `sockets`) is bound to (None before it listens)."""
    if server is None:
        return None
    host, port = server.sockets[0].getsockname()[:2]
    return host, port
