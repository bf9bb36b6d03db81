"""What a read_committed Fetch may return of a partition: records below its last stable
offset (LSO), and the aborted transactions among them for the client to drop.

Every transaction below the LSO is decided, so the client, given each aborted transaction's
producer id and first offset, drops its records up to its abort marker; committed ones and
markers it reads as they are (docs/transactions.md). read_uncommitted Fetches are not
touched: they return everything up to the high watermark, as before.
"""

from __future__ import annotations

from typing import Any

from pulsar_gateway.gateway.messages import LogEntry, records_in
from pulsar_gateway.handlers.kafka.port import PartitionLog

READ_COMMITTED = 1


def below_stable(entries: list[LogEntry], stable: int) -> list[LogEntry]:
    """The entries that start below the LSO (an entry never straddles it: a transaction's
    first batch starts it)."""
    if not entries or entries[-1].offset < stable:
        return entries
    return [entry for entry in entries if entry.offset < stable]


def aborted_in(log: PartitionLog, offset: int, entries: list[LogEntry]) -> list[dict[str, Any]]:
    """The aborted transactions with records among `entries`, as Fetch lists them."""
    if not entries:
        return []
    start = min(offset, entries[0].offset)
    end = entries[-1].offset + records_in(entries[-1].message)
    return [
        {"producer_id": producer_id, "first_offset": first}
        for producer_id, first in log.aborted_transactions(start, end)
    ]
