"""Open and aborted transactions of one partition, read from the log itself.

Kafka keeps, per partition, the first offset of every open transaction (the oldest of them is
the last stable offset, LSO: `read_committed` consumers read up to it) and an index of aborted
transactions (producer id, first offset, offset of the abort marker), which a `read_committed`
Fetch returns so that the client drops the aborted records. The partition log shows every
message it numbers to a `TransactionIndex`: a record stamped `TXN` opens its producer's
transaction at its offset if none is open, a marker closes it (and an abort is remembered).

The open transactions go into each offset checkpoint with the idempotent producers' state, so
a reopened partition replays the log from its last checkpoint and has the same LSO; aborted
transactions are saved one key each as they are seen (and seen again by that replay when the
save was lost). docs/transactions.md says more.
"""

from __future__ import annotations

import bisect
from typing import Any, NamedTuple

from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.kafka_codec.control_batch import ABORT, MARKER, TXN, parse_txn_value


class AbortedTransaction(NamedTuple):
    """An aborted transaction in one partition: its producer, first offset and marker."""

    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class TransactionIndex:
    def __init__(self, open_transactions: dict[str, int] | None = None) -> None:
        # producer id -> first offset of its open transaction
        self._open: dict[int, int] = {int(k): v for k, v in (open_transactions or {}).items()}
        self._aborted: list[AbortedTransaction] = []  # by marker offset
        self._aborted_markers: list[int] = []

    def observe(self, message: StoredMessage, offset: int) -> AbortedTransaction | None:
        """Learn from a message numbered `offset`; the aborted transaction it ends, if any."""
        properties = message.properties
        value = properties.get(TXN)
        if value is None:
            return None
        parsed = parse_txn_value(value)
        if parsed is None:
            return None
        producer_id = parsed[0]
        marker = properties.get(MARKER)
        if marker is None:
            self._open.setdefault(producer_id, offset)
            return None
        first = self._open.pop(producer_id, None)
        if marker != ABORT or first is None:
            return None
        aborted = AbortedTransaction(producer_id, first, offset)
        self.add_aborted(aborted)
        return aborted

    def add_aborted(self, aborted: AbortedTransaction) -> None:
        """Remember an aborted transaction (from the log, or loaded back); once each."""
        at = bisect.bisect_left(self._aborted_markers, aborted.last_offset)
        if at < len(self._aborted) and self._aborted[at] == aborted:
            return
        self._aborted.insert(at, aborted)
        self._aborted_markers.insert(at, aborted.last_offset)

    def last_stable_offset(self, next_offset: int) -> int:
        """The first offset of the oldest open transaction, else the high watermark."""
        return min(self._open.values(), default=next_offset)

    def open_start(self, producer_id: int) -> int | None:
        return self._open.get(producer_id)

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """Aborted transactions with a record in [start, end): their markers lie at or after
        `start` and their first record before `end`."""
        at = bisect.bisect_left(self._aborted_markers, start)
        return [a for a in self._aborted[at:] if a.first_offset < end]

    def snapshot(self) -> dict[str, Any]:
        """The open transactions as JSON values, for a checkpoint."""
        return {str(producer_id): first for producer_id, first in self._open.items()}
