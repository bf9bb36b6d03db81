"""A consumer's acknowledgements, grouped: one ACK for all those made within a short delay,
as Pulsar's clients group theirs (every ACK is a write to the socket), and held while the
consumer is disconnected, to go out right after it subscribes again (docs/pulsar-protocol.md,
"Acknowledgements and redelivery")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from pulsar_gateway.gateway.backend.wire.entries import ReceivedEntry
from pulsar_gateway.gateway.backend.wire.ids import MessageId

# acknowledgements kept while disconnected, sent once subscribed again
MAX_HELD = 100_000
# acknowledgements are grouped for this long (or until this many wait), one ACK for all
DELAY_SECONDS = 0.01
GROUP_MAX = 1000

Entries = list[tuple[int, int]]  # (ledger, entry) of whole entries


class AckGroup:
    """`send` writes one ACK of the given entries and returns False when it cannot (the
    consumer is disconnected): those are then held, up to MAX_HELD."""

    def __init__(self, send: Callable[[Entries], bool], delay: float = DELAY_SECONDS) -> None:
        self._send = send
        self.delay = delay
        self._pending: Entries = []
        self._held: Entries = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, entries: Entries) -> None:
        self._pending += entries
        if len(self._pending) >= GROUP_MAX or self.delay <= 0:
            self.flush()
        elif self._timer is None and self._pending:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self.flush)

    def flush(self) -> None:
        """Send what waits now (or hold it, when disconnected)."""
        self.cancel_timer()
        entries, self._pending = self._pending, []
        if entries and not self._send(entries) and len(self._held) + len(entries) <= MAX_HELD:
            self._held += entries

    def take_held(self) -> Entries:
        """What was acknowledged while disconnected (and is forgotten here)."""
        held, self._held = self._held, []
        return held

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def ack_ids(items: Iterable[ReceivedEntry | MessageId]) -> Entries:
    """The (ledger, entry) of each item, a chunked message's chunks included."""
    ids: Entries = []
    for item in items:
        if isinstance(item, ReceivedEntry):
            ids += (mid.entry for mid in item.chunk_ids)
            ids.append(item.id.entry)
        else:
            ids.append(item.entry)
    return ids
