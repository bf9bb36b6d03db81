"""A durable queue's message count, kept in the store now and then.

The count (messages stored and not acknowledged) answers queue.declare and basic.get's
message_count without reading the queue; writing it on every change would cost a store
write per message, so it is written at most once every COUNT_SAVE_SECONDS. A crash loses
the last changes; the queue engine corrects a stale count when the subscription shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from pulsar_gateway.handlers.amqp.broker_model import BrokerStore

log = logging.getLogger("gateway.amqp.queue")

COUNT_SAVE_SECONDS = 1.0


class SavedCount:
    """Writes `read()` to the store for one queue, at most once every COUNT_SAVE_SECONDS."""

    def __init__(self, store: BrokerStore, vhost: str, queue: str, read: Callable[[], int]) -> None:
        self.store = store
        self.vhost = vhost
        self.queue = queue
        self.read = read
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def changed(self) -> None:
        """The count changed: write it within COUNT_SAVE_SECONDS."""
        if self._closed:
            return
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._save())

    async def _save(self) -> None:
        while self._dirty and not self._closed:
            await asyncio.sleep(COUNT_SAVE_SECONDS)
            self._dirty = False
            try:
                await self.store.save_count(self.vhost, self.queue, self.read())
            except Exception as exc:  # a lagging count is not worth failing anything for
                log.warning("saving count of %s failed: %s", self.queue, exc)

    async def flush(self) -> None:
        """Write it now (the vhost is closing)."""
        with contextlib.suppress(Exception):
            await self.store.save_count(self.vhost, self.queue, self.read())

    def close(self) -> None:
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
