"""A partition's checkpoints: every `index_interval` offsets, where that offset is in the
Pulsar topic (its message id), with the state counting needs there (docs/offsets.md).

A reopened partition resumes counting from its last checkpoint, and a read below the
in-memory tail starts a reader at the nearest checkpoint before it and counts forward; both
count as the tailer did only if they start from what the tailer knew at that point: the
resend filter's state, and (last checkpoint only) the idempotent producers and the open
transactions. Aborted transactions are kept beside them, one key each, for read_committed
fetches after a restart.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from typing import Any, NamedTuple

from pulsar_gateway.gateway.backend.resend_filter import ResendFilter
from pulsar_gateway.gateway.messages import MessageKey
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.storage.kafka.producer_state import ProducerStateIndex
from pulsar_gateway.storage.kafka.transaction_index import AbortedTransaction, TransactionIndex

log = logging.getLogger("gateway.partition")

INDEX_PREFIX = "offset-index/"
SAVE_WAIT_SECONDS = 5.0  # how long a closing partition waits for its checkpoints' saves
ABORTED_PREFIX = "kafka-aborted-txn/"  # + topic/marker offset: [producer id, first offset]


class Stored(NamedTuple):
    """What a reopened partition resumes from, as the metadata store holds it."""

    producers: ProducerStateIndex  # the idempotent producers at the last checkpoint
    transactions: TransactionIndex  # the open transactions then, and the aborted ones


class Start(NamedTuple):
    """Where a reader counting as the tailer did may start: at `mid`, `offset`, with the
    resend filter as it stood there."""

    mid: MessageKey
    offset: int
    resends: ResendFilter


class OffsetCheckpoints:
    """One partition's checkpoints, in memory in offset order and saved as they are made."""

    def __init__(self, metadata: MetadataStore, topic: str) -> None:
        self.metadata = metadata
        self.topic = topic
        self.offsets: list[int] = []
        self._ids: list[MessageKey] = []
        self._states: list[dict[str, int]] = []
        self._saving: set[asyncio.Future[None]] = set()

    def load(self) -> Stored:
        """Read this partition's checkpoints and aborted transactions from the store."""
        prefix = f"{INDEX_PREFIX}{self.topic}/"
        entries = sorted(
            (int(key[len(prefix) :]), value) for key, value in self.metadata.children(prefix)
        )
        self.offsets = [offset for offset, _ in entries]
        self._ids = [tuple(value["id"]) for _, value in entries]  # type: ignore[misc]
        self._states = [value["resends"] for _, value in entries]
        aborted_prefix = f"{ABORTED_PREFIX}{self.topic}/"
        aborted = [
            AbortedTransaction(producer_id, first, int(key[len(aborted_prefix) :]))
            for key, (producer_id, first) in self.metadata.children(aborted_prefix)
        ]
        # only the last is needed: a reopened log restores it and replays what follows
        last = entries[-1][1] if entries else {}
        transactions = TransactionIndex(last.get("txns"))
        for one in aborted:
            transactions.add_aborted(one)
        return Stored(ProducerStateIndex(last.get("producers")), transactions)

    def last(self) -> Start | None:
        """The newest checkpoint, where a reopened partition resumes (None: there is none)."""
        return self.start(len(self.offsets) - 1) if self.offsets else None

    def next_due(self, interval: int) -> int:
        """The offset from which the next checkpoint is due (one per `interval` offsets)."""
        return (self.offsets[-1] // interval + 1) * interval if self.offsets else 0

    def before_offset(self, offset: int) -> int:
        """Position of the last checkpoint at or before `offset` (-1: none)."""
        return bisect.bisect_right(self.offsets, offset) - 1

    def before_id(self, mid: MessageKey) -> int:
        """Position of the last checkpoint at or before message `mid` (-1: none)."""
        return bisect.bisect_right(self._ids, mid) - 1

    def start(self, position: int) -> Start:
        """Checkpoint `position` (from `before_offset` or `before_id`, at least 0)."""
        return Start(
            self._ids[position], self.offsets[position], ResendFilter(self._states[position])
        )

    def add(
        self,
        offset: int,
        mid: MessageKey,
        resends: dict[str, int],
        producers: dict[str, Any],
        transactions: dict[str, Any],
    ) -> None:
        """Where offset `offset` is, and the resend filter's, the idempotent producers' and
        the open transactions' state just before it; saved in the background (a lost save
        only means counting from the checkpoint before)."""
        self.offsets.append(offset)
        self._ids.append(mid)
        self._states.append(resends)
        value: dict[str, Any] = {"id": list(mid), "resends": resends}
        if producers:
            value["producers"] = producers
        if transactions:
            value["txns"] = transactions
        self._save(f"{INDEX_PREFIX}{self.topic}/{offset:020d}", value)

    def save_aborted(self, aborted: AbortedTransaction) -> None:
        """Keep an aborted transaction for read_committed fetches after a restart (a save
        lost to a crash is made again when the reopened log replays the marker)."""
        key = f"{ABORTED_PREFIX}{self.topic}/{aborted.last_offset:020d}"
        self._save(key, [aborted.producer_id, aborted.first_offset])

    def _save(self, key: str, value: Any) -> None:
        task = asyncio.ensure_future(self.metadata.put(key, value))
        self._saving.add(task)
        task.add_done_callback(self._saved)

    def _saved(self, task: asyncio.Future[None]) -> None:
        self._saving.discard(task)
        _log_failure(task)

    async def finish_saving(self, timeout: float = SAVE_WAIT_SECONDS) -> None:
        """Wait for the saves under way, for a partition that closes: the gateway closes
        its partitions before its metadata store, and a save still under way then was lost
        ("offset checkpoint failed: AlreadyClosed") and the next open counted from the
        checkpoint before. Bounded, so a stalled broker cannot hold a shutdown."""
        if self._saving:
            await asyncio.wait(set(self._saving), timeout=timeout)


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("offset checkpoint failed: %s", task.exception())
