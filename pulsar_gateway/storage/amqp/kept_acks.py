"""A queue's messages acknowledged inside batched entries, kept in the metadata store so
that they outlive the process (docs/backend.md, "AMQP queue messages in batched entries").

The broker acknowledges whole entries, and pulsar-lite keeps no batch index
acknowledgement, so which messages of an entry acknowledged in part a client acknowledged
is known to the gateway alone (`gateway/backend/partial_acks.py`). Without this record a
restarted gateway, or the cluster member a vhost moved to, would deliver them again when
the broker sends their entry again.

- Loaded before the queue's consumer subscribes (the broker sends the unacknowledged
  entries right after), when no consumer of the queue is open in this process (one that
  is has the newest state in memory).
- Written once per SAVE_SECONDS while it changes, as long as the wire consumer groups
  its acknowledgements: a gateway killed loses about as much as the broker does of acks
  still on their way (a record of many entries less often: `save_delay`).
- Written before the queue's consumer closes (a vhost handed over, a restart, an idle
  queue), so the next consumer, here or on another member, finds it; the member taking a
  vhost over reads the metadata to its end before serving it (docs/cluster.md).
- An entry acknowledged whole leaves the record, its ACK sent just before (the readers'
  `flush_acks`, on the same connection as the write), so the broker has the ACK before
  the record forgets the entry. In memory it stays KEEP_DONE_SECONDS, for an ACK lost on
  the way (a broker restart): the broker sends the entry again and it is acknowledged
  again unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from pulsar_gateway.gateway.backend.partial_acks import QueueAcks
from pulsar_gateway.gateway.metadata_store import MetadataStore

log = logging.getLogger("gateway.amqp.store")

SAVE_SECONDS = 0.1  # as long as a wire queue consumer groups its acks
# ...for a record of up to this many entries; a larger one (a queue acknowledged far out
# of order, as the delayed exchange's topic is) is written less often, at most every
# MAX_SAVE_SECONDS, so that writing it stays a small share of the work
SAVE_ENTRIES = 100
MAX_SAVE_SECONDS = 1.0
KEEP_DONE_SECONDS = 1.0  # far longer than an ACK's way to the broker
CLOSE_SAVES = 3  # saves tried at close while acks keep arriving


def save_delay(entries: int) -> float:
    """How long changes wait to be written, for a record of `entries` entries."""
    return min(SAVE_SECONDS * max(1.0, entries / SAVE_ENTRIES), MAX_SAVE_SECONDS)


class KeptAcks:
    """Keeps one queue's `QueueAcks` in the metadata store under `key`."""

    def __init__(self, metadata: MetadataStore, key: str, acks: QueueAcks) -> None:
        self.metadata = metadata
        self.key = key
        self.acks = acks
        self.acks.keep_done = KEEP_DONE_SECONDS
        self.users = 0  # open readers of the queue in this process
        # each open reader's: sends its acknowledgements of entries done now
        self.flushers: list[Callable[[], None]] = []
        self._saved = -1
        self._task: asyncio.Task[None] | None = None
        self._sleeping = False  # the saver waits (a write under way is never cancelled)
        self._closing = False

    def load(self) -> None:
        """Take what the store holds (this process has no consumer of the queue open)."""
        record: Any = self.metadata.get(self.key)
        entries = record.get("entries", []) if isinstance(record, dict) else []
        self.acks.load(entries if isinstance(entries, list) else [], KEEP_DONE_SECONDS)
        self._saved = self.acks.changes
        if self.acks.keeps_done:
            self._schedule()

    def changed(self) -> None:
        """Acknowledgements were made: write them within SAVE_SECONDS if they changed it."""
        if self.acks.changes != self._saved:
            self._schedule()

    def _schedule(self) -> None:
        if self._closing:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self._closing:
            self._sleeping = True
            try:
                await asyncio.sleep(save_delay(len(self.acks)))
            finally:
                self._sleeping = False
            await self.save()
            if self.acks.changes == self._saved and not self.acks.keeps_done:
                return

    async def save(self) -> None:
        """Write the record now if it changed (a failure is logged; the next save retries)."""
        self.acks.prune()
        changes = self.acks.changes
        if changes == self._saved:
            return
        for flush in self.flushers:
            flush()  # the entries done leave the record: the broker gets their ACK first
        records = self.acks.records()
        try:
            if records:
                await self.metadata.put(self.key, {"entries": records})
            elif self.metadata.get(self.key) is not None:
                await self.metadata.delete(self.key)
        except Exception as exc:
            log.warning("saving the acknowledged messages of %s failed: %s", self.key, exc)
            return
        self._saved = changes

    async def flush(self) -> None:
        """A reader of the queue is closing: write what changed now, before its consumer
        closes and the broker sends the entries it held elsewhere. The saver goes on
        (another reader may be open) unless `close` follows."""
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            if self._sleeping:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        for _ in range(CLOSE_SAVES):
            await self.save()
            if self.acks.changes == self._saved:
                break
        self._closing = False

    def resume(self) -> None:
        """After `flush`, with another reader of the queue still open: save as before."""
        if self.acks.changes != self._saved or self.acks.keeps_done:
            self._schedule()

    def close(self) -> None:
        """No reader of the queue is left in this process: stop saving."""
        self._closing = True
        if self._task is not None and not self._task.done() and self._sleeping:
            self._task.cancel()
