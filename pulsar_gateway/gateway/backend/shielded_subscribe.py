"""Subscribe with pulsar-client's asyncio API without the library's cancel race.

`pulsar.asyncio.Client.subscribe` completes its future in two steps on the event loop: a
first callback checks that the future is not done, then schedules `set_result` as a second
callback. A caller cancelled between the two (a closing connection, a timeout) leaves the
second one to set a result on a cancelled future, and asyncio logs `InvalidStateError` with a
traceback (issue 31 asks for none under any load; docs/architecture.md, "Cancellation").

Here the library's future is never cancelled: the caller awaits it through `asyncio.shield`.
A caller that goes away leaves the subscribe to finish on its own, and the consumer it brings
is closed at once, so no consumer the gateway does not read holds messages.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("gateway.backend")


async def subscribe(client: Any, topic: str, subscription: str, **options: Any) -> Any:
    """`client.subscribe(topic, subscription, **options)`, safe to cancel."""
    attempt = asyncio.ensure_future(client.subscribe(topic, subscription, **options))
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        attempt.add_done_callback(_close_orphan)
        raise


def _close_orphan(attempt: asyncio.Future[Any]) -> None:
    """A subscribe finished after its caller left: close the consumer it made. The C++
    client's own asynchronous close, whose callback needs no event loop task."""
    if attempt.cancelled() or attempt.exception() is not None:
        return
    attempt.result()._consumer.close_async(_closed)


def _closed(result: Any) -> None:
    log.debug("closed a consumer whose subscriber had gone: %s", result)
