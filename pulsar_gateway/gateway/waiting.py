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

# how long a cancelled task may run on before it is cancelled again
CANCEL_RETRY_SECONDS = 0.5


async def result_within(future: asyncio.Future[Any], timeout: float | None) -> Any:
    """The future's result, or TimeoutError once `timeout` seconds pass (None: no limit).
    The future is not cancelled by the timeout (the caller may wait for it again), and a
    cancellation of the caller always reaches the caller.

    A future that failed in the same loop turn as the caller's cancel has its error read
    before the cancel goes on: nobody else waits for a request's answer once its caller is
    gone, and asyncio logs an error never read at ERROR (a broker's error answer to a
    cancelled GET_LAST_MESSAGE_ID did, and failed a test run's check of the gateway log)."""
    try:
        done, _ = await asyncio.wait([future], timeout=timeout)
    except asyncio.CancelledError:
        if future.done() and not future.cancelled():
            future.exception()
        raise
    if not done:
        raise TimeoutError
    return future.result()


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel the tasks and wait until every one has ended, cancelling again any that runs
    on. A cancel can be lost on Python 3.11: `asyncio.wait_for` inside the task returns its
    inner result and forgets a cancel that lands in the same loop turn, and the task's loop
    then goes round again (a membership's heartbeat loop did, and stopping it hung). Errors
    the tasks end with are theirs: retrieved here, not raised, from those that had already
    ended too (asyncio logs an error never retrieved at ERROR)."""
    for task in tasks:
        if task is not None and task.done() and not task.cancelled():
            task.exception()
    pending = {task for task in tasks if task is not None and not task.done()}
    for task in pending:
        task.cancel()
    while pending:
        done, pending = await asyncio.wait(pending, timeout=CANCEL_RETRY_SECONDS)
        for task in done:
            if not task.cancelled():
                task.exception()
        for task in pending:
            task.cancel()
