"""Waiting on a future with a deadline, without ever losing the waiter's cancellation.

`asyncio.wait_for(asyncio.shield(future), timeout)` is the obvious way to wait for
something that must run on past a timeout, but on Python 3.11 it drops a cancellation
that arrives in the same loop turn as the future's result: it returns the result and the
cancelled task runs on as if nothing had been asked of it. A reader's follow loop caught
that way never ended, and whoever awaited its end after cancelling it waited for ever
(docs/architecture.md, "Cancellation"). `asyncio.wait` has no such race.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def result_within(future: asyncio.Future[Any], timeout: float | None) -> Any:
    """The future's result, or TimeoutError once `timeout` seconds pass (None: no limit).
    The future is not cancelled by the timeout (the caller may wait for it again), and a
    cancellation of the caller always reaches the caller."""
    done, _ = await asyncio.wait([future], timeout=timeout)
    if not done:
        raise TimeoutError
    return future.result()
