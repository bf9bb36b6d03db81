"""Which messages of a queue's batched entries were acknowledged, while an entry is not
acknowledged whole (docs/backend.md, "AMQP queue messages in batched entries").

The broker acknowledges entries, not messages, and pulsar-lite keeps no batch index
acknowledgement (an ACK with an `ack_set` acknowledges the whole entry: docs/backend.md,
"Batch index acks lose messages"), so the gateway keeps the acknowledged batch indexes of
an entry itself and acknowledges the entry once all of its messages are. When the broker
sends such an entry again, its acknowledged messages are dropped.

`QueueAcks` holds one subscription's entries; the AMQP store writes them to the metadata
store (`storage/amqp/kept_acks.py`) and loads them before it subscribes, so they outlive
the process. An entry acknowledged whole may be kept in memory for a while too
(`keep_done`): should its ACK be lost on the way (a broker restart), the broker sends it
again, and every message of it is dropped and the entry acknowledged again. Such entries
are not written (`records`): their ACK is sent before each write.
"""

from __future__ import annotations

import time

# entries acknowledged in part kept per subscription at most (the oldest forgotten first:
# their acknowledged messages would come again if the broker sent the entry again)
MAX_PARTIAL_ENTRIES = 10_000

EntryId = tuple[int, int]  # ledger, entry

# an entry's record: ledger, entry, its message count, and the acknowledged batch indexes
# as the bits of a hexadecimal number
Record = list[int | str]


class QueueAcks:
    """One subscription's entries acknowledged in part (see the module).

    `changes` grows with every change, so a saver knows when it has something to write.
    """

    def __init__(self, max_entries: int = MAX_PARTIAL_ENTRIES, keep_done: float = 0.0) -> None:
        self.max_entries = max_entries
        self.keep_done = keep_done  # seconds an entry acknowledged whole is kept (0: none)
        self._acked: dict[EntryId, set[int]] = {}
        self._sizes: dict[EntryId, int] = {}
        self._done: dict[EntryId, float] = {}  # kept entries acknowledged whole -> until when
        self.changes = 0

    def get(self, ledger: int, entry: int) -> set[int] | None:
        return self._acked.get((ledger, entry))

    def add(self, ledger: int, entry: int, index: int, size: int) -> bool:
        """Note message `index` of the entry (of `size` messages) acknowledged; True when
        that makes the whole entry acknowledged (the caller acknowledges it to the broker)."""
        key = (ledger, entry)
        acked = self._acked.get(key)
        if acked is None:
            if size <= 1 and not self.keep_done:
                return True
            while len(self._acked) >= self.max_entries:
                self._drop(next(iter(self._acked)))
            acked = self._acked[key] = set()
            self._sizes[key] = size
        elif index in acked:
            return False  # already counted (and an entry done already was acknowledged)
        acked.add(index)
        self.changes += 1
        if len(acked) < size:
            return False
        if self.keep_done:
            self._done[key] = time.monotonic() + self.keep_done
        else:
            self._drop(key)
        return True

    def done(self, ledger: int, entry: int) -> bool:
        """Whether every message of the entry is acknowledged (a kept entry done)."""
        return (ledger, entry) in self._done

    def _drop(self, key: EntryId) -> None:
        del self._acked[key]
        del self._sizes[key]
        self._done.pop(key, None)

    def prune(self, now: float | None = None) -> None:
        """Forget the entries done whose keeping time has passed."""
        now = time.monotonic() if now is None else now
        old = [key for key, until in self._done.items() if until <= now]
        for key in old:
            self._drop(key)
        if old:
            self.changes += 1

    @property
    def keeps_done(self) -> bool:
        """Entries done are still kept (a saver runs again to forget them)."""
        return bool(self._done)

    def records(self) -> list[Record]:
        """The entries acknowledged in part, as JSON-ready records (`Record`); the entries
        done are left out (the caller sent their ACK first)."""
        out: list[Record] = []
        done = self._done
        for (ledger, entry), acked in self._acked.items():
            if (ledger, entry) in done:
                continue
            mask = 0
            for index in acked:
                mask |= 1 << index
            out.append([ledger, entry, self._sizes[(ledger, entry)], format(mask, "x")])
        return out

    def load(self, records: list[Record], keep_done: float) -> None:
        """Replace what is held with `records` (as `records` wrote them); entries done in
        them are kept `keep_done` seconds from now. A malformed record is skipped."""
        self._acked.clear()
        self._sizes.clear()
        self._done.clear()
        until = time.monotonic() + keep_done
        for record in records[-self.max_entries :]:
            try:
                ledger, entry, size, mask_text = record
                mask = int(str(mask_text), 16)
                size = int(size)
                key = (int(ledger), int(entry))
            except (TypeError, ValueError):
                continue
            if size < 1 or mask <= 0 or mask >> size:
                continue
            self._acked[key] = {i for i in range(size) if mask >> i & 1}
            self._sizes[key] = size
            if len(self._acked[key]) == size:
                self._done[key] = until
        self.changes += 1

    def __len__(self) -> int:
        return len(self._acked)


class PartialBatches:
    """The `QueueAcks` of every subscription this process consumes, so that a queue's next
    consumer in this process has what the last one acknowledged."""

    def __init__(self, max_entries: int = MAX_PARTIAL_ENTRIES) -> None:
        self.max_entries = max_entries
        self._queues: dict[tuple[str, str], QueueAcks] = {}

    def of(self, topic: str, subscription: str) -> QueueAcks:
        acks = self._queues.get((topic, subscription))
        if acks is None:
            acks = self._queues[(topic, subscription)] = QueueAcks(self.max_entries)
        return acks

    def forget(self, topic: str, subscription: str) -> None:
        """The subscription is gone (queue deleted, or created afresh), or another process
        may consume it next (what it acknowledged is kept in the store)."""
        self._queues.pop((topic, subscription), None)

    def __len__(self) -> int:
        return sum(len(acks) for acks in self._queues.values())
