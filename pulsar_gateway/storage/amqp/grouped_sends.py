"""Publishes to AMQP queue topics grouped per loop iteration (`GroupedSends`), for the
Pulsar-backed store (store.py)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.storage.amqp.published import PublishedEntries, StoredFields

# a publish waiting for its group: the message, its outcome, and the message as stored
_Pending = tuple[OutMessage, asyncio.Future[None], StoredFields | None]


class GroupedSends:
    """Publishes to one queue topic within one loop iteration go out as one group.

    A send of one message costs a Python callback and a loop wake-up from the
    client's thread; a group costs one for all (docs/backend.md, "Group completions per loop
    wake-up": the last message's
    outcome stands for its group). Through the wire client a group is also written as
    batched entries, one SEND and one receipt for many messages (docs/backend.md, "AMQP
    queue messages in batched entries"). A socket read carries many publish frames, so
    groups form without waiting; each publisher still hears of its own message.
    """

    def __init__(
        self,
        backend: PulsarBackend,
        batched: bool = False,
        published: PublishedEntries | None = None,
    ) -> None:
        """`published`: where the batched entries' messages are kept for the queue reader,
        as the store reads them back (published.py)."""
        self.backend = backend
        self.batched = batched  # a group as batched entries (the wire client), or one each
        self.published = published
        self._pending: dict[str, list[_Pending]] = {}
        self._scheduled = False
        # the loop of the last submit: asyncio.get_running_loop() makes a getpid() system
        # call each time (CPython checks the loop belongs to this process), one a message
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(
        self, topic: str, message: OutMessage, stored: StoredFields | None = None
    ) -> asyncio.Future[None]:
        """`stored`: the message as the queue reader would decode it (for `published`)."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.setdefault(topic, []).append((message, future, stored))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        published = self.published
        for topic, items in pending.items():
            messages = [message for message, _, _ in items]
            if self.batched:
                kept = None
                if published is not None:
                    built = [stored for _, _, stored in items if stored is not None]
                    if len(built) == len(items):
                        kept = functools.partial(published.add, topic, built)
                task = self.backend.send_queue_messages(topic, messages, kept)
            else:  # one entry each, through pulsar-client
                task = self.backend.send(topic, messages, batching=False)
            task.add_done_callback(functools.partial(_settle_group, items))


def _settle_group(items: list[_Pending], done: asyncio.Future[Any]) -> None:
    """Every publish of a group sent as one: the group's outcome is each one's."""
    error = done.exception() if not done.cancelled() else asyncio.CancelledError()
    for _, future, _ in items:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
