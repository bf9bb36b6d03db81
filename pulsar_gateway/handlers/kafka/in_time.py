"""Answers in time: a request waiting on storage gets a retriable error rather than silence.

A client that hears nothing for its request timeout gives up on the whole connection (and a
Kafka producer or consumer then starts over); a broker that stalls, or a write queued behind
a long completion, can hold a request for longer than that. So requests that wait on storage
are answered after `seconds` with the error their clients retry (docs/transactions.md,
"Answers in time") while the work runs on to its end: it is not cancelled half-way, and a
retry sees its outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from pulsar_gateway.gateway.errors import StorageError
from pulsar_gateway.gateway.waiting import result_within

log = logging.getLogger("gateway.kafka")

T = TypeVar("T")


class LateWork:
    """The work of requests already answered as busy, until it ends (for `close`)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    async def within(self, work: Awaitable[T], seconds: float, busy: T, what: str) -> T:
        """`work`'s result, or `busy` once `seconds` have passed (the work goes on)."""
        task = asyncio.ensure_future(work)
        try:
            return await result_within(task, seconds)
        except TimeoutError:
            log.info("%s takes over %g s; answered as busy, the work goes on", what, seconds)
            self.tasks.add(task)
            task.add_done_callback(self._done)
            return busy

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, StorageError):
                log.error("work of a request answered as busy failed", exc_info=exc)
