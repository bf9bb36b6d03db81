"""Client quotas, enforced as Kafka enforces them: by throttling, never by refusing.

A quota is set on an entity (a user, a client id, or a user with a client id; either name
may be the default for its type) with AlterClientQuotas and kept in the metadata store
(`ClientQuotaStore`). Two kinds are enforced here: `producer_byte_rate` (bytes of Produce
requests) and `consumer_byte_rate` (bytes of Fetch responses). docs/quotas.md has the
whole story; in short:

- A request's quota is found in Kafka's order of precedence (`precedence`): the most
  specific entity that sets the key wins. The clients sharing that entity share one rate:
  a quota on a user covers all of its clients together, a default covers each user (or
  client id) on its own.
- The rate is measured over `SAMPLES` windows of `WINDOW_SECONDS` (Kafka's defaults, 11 of
  1 s), never over less than the whole span but the current window, so a new client is
  not throttled for one burst.
- Over its quota, the client is answered at once with `throttle_time_ms` set to how long
  it must stay quiet for the rate to fall back to the quota (Kafka's formula), and the
  gateway reads nothing more from the connection for that long (KIP-219): the client
  backs off, and one that does not is held back anyway.

Every gateway of a cluster measures its own traffic, as every Kafka broker does: a quota
is per member.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pulsar_gateway.handlers.kafka.port import ClientQuotaStore, QuotaEntity

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
ENFORCED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
SAMPLES = 11  # Kafka's quota.window.num
WINDOW_SECONDS = 1.0  # Kafka's quota.window.size.seconds
MAX_RATES = 10_000  # distinct (user, client id) rates kept; the least recently used go


def entity(
    user: str | None = None,
    client_id: str | None = None,
    *,
    default_user: bool = False,
    default_client: bool = False,
) -> QuotaEntity:
    """An entity in its one spelling: (type, name) pairs, user first; None names the
    type's default."""
    parts: list[tuple[str, str | None]] = []
    if user is not None or default_user:
        parts.append(("user", None if default_user else user))
    if client_id is not None or default_client:
        parts.append(("client-id", None if default_client else client_id))
    return tuple(parts)


def precedence(user: str, client_id: str) -> list[QuotaEntity]:
    """The entities whose quota may apply to `user` with `client_id`, most specific
    first, as Kafka lists them (docs/quotas.md, "Which quota applies")."""
    return [
        entity(user, client_id),
        entity(user, default_client=True),
        entity(user),
        entity(client_id=client_id, default_user=True),
        entity(default_user=True, default_client=True),
        entity(default_user=True),
        entity(client_id=client_id),
        entity(default_client=True),
    ]


@dataclass
class _Rate:
    """Bytes per window over the last SAMPLES windows."""

    windows: deque[tuple[int, float]] = field(default_factory=deque)  # (window index, bytes)

    def record(self, amount: float, now: float) -> float:
        """Add `amount` now; the rate (bytes/s) over the measured span."""
        index = int(now // WINDOW_SECONDS)
        windows = self.windows
        if windows and windows[-1][0] == index:
            windows[-1] = (index, windows[-1][1] + amount)
        else:
            windows.append((index, amount))
        while windows[0][0] <= index - SAMPLES:
            windows.popleft()
        total = sum(amount for _, amount in windows)
        # as Kafka's Rate: never divide by less than the full windows before the current one
        elapsed = max(now - windows[0][0] * WINDOW_SECONDS, (SAMPLES - 1) * WINDOW_SECONDS)
        return total / elapsed


class ClientQuotas:
    """The quotas in force and the rates measured against them, for one gateway."""

    def __init__(
        self, store: ClientQuotaStore, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.clock = clock
        self._rates: dict[tuple[str, str, str], _Rate] = {}

    def bound(self, key: str, user: str, client_id: str) -> tuple[QuotaEntity, float] | None:
        """The entity whose `key` quota applies, and its value; None when none does."""
        if self.store.empty:
            return None
        for candidate in precedence(user, client_id):
            values = self.store.lookup(candidate)
            if values is not None and key in values:
                return candidate, values[key]
        return None

    def throttle_ms(self, key: str, user: str, client_id: str, amount: int) -> int:
        """Record `amount` bytes against the quota that applies; how long the client is to
        be held back (0 when within its quota, or when no quota applies)."""
        found = self.bound(key, user, client_id)
        if found is None:
            return 0
        applied, limit = found
        observed = self._rate(key, applied, user, client_id).record(amount, self.clock())
        if observed <= limit:
            return 0
        # how long silence takes to bring the rate over the whole span back to the quota
        throttle = (observed - limit) / limit * SAMPLES * WINDOW_SECONDS
        return int(min(throttle, SAMPLES * WINDOW_SECONDS) * 1000)

    def refund(self, key: str, user: str, client_id: str, amount: int) -> None:
        """Take back `amount` recorded a moment ago: bytes that are not sent after all (a
        throttled Fetch is answered without its records, as Kafka does)."""
        found = self.bound(key, user, client_id)
        if found is not None:
            self._rate(key, found[0], user, client_id).record(-amount, self.clock())

    def _rate(self, key: str, applied: QuotaEntity, user: str, client_id: str) -> _Rate:
        """The rate that the clients sharing the `applied` quota share."""
        types = {kind for kind, _ in applied}
        rate_key = (
            key,
            user if "user" in types else "",
            client_id if "client-id" in types else "",
        )
        rate = self._rates.pop(rate_key, None) or _Rate()
        self._rates[rate_key] = rate  # most recently used last
        if len(self._rates) > MAX_RATES:
            del self._rates[next(iter(self._rates))]
        return rate


class ConnectionMute:
    """Until when one connection's next request is not read (KIP-219's muted channel)."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def extend(self, throttle_ms: int, now: float) -> None:
        self.until = max(self.until, now + throttle_ms / 1000)
