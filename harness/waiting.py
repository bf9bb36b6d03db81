"""Waiting on a condition, with a deadline: the one way tests wait for something to happen.

A fixed sleep is either too short on a slow machine (a flaky failure) or too long everywhere
(a slow suite), and it does not say what it waits for. `wait_until` polls a predicate until
it holds and fails the test with `message` when the deadline passes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

Message = str | Callable[[], str]


def _timed_out(timeout: float, message: Message) -> AssertionError:
    what = message() if callable(message) else message
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: Message = "a condition",
) -> T:
    """Call `predicate` every `interval` seconds until it returns a truthy value, and return
    that value; raise AssertionError naming `message` (a string, or a callable describing
    the state at the deadline) when `timeout` seconds pass first. The predicate may block
    itself (a consumer's poll, say): then an `interval` of 0 is fine."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message)
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: Message = "a condition",
) -> T:
    """`wait_until` for a running event loop: the predicate may be a plain function or
    return an awaitable, and the waits between calls let the loop run."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message)
        await asyncio.sleep(interval)


def wait_until_stable(
    read: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    polls: int = 3,
    accept: Callable[[T], bool] = lambda value: True,
    message: Message = "a value to settle",
) -> T:
    """Read a value every `interval` seconds until `polls` reads in a row agree and `accept`
    takes it (a queue count after asynchronous requeues, a buffer that stopped filling);
    return it, or fail the test as `wait_until` does."""
    seen: list[T] = []

    def settled() -> bool:
        seen.append(read())
        last = seen[-polls:]
        return len(last) == polls and all(v == last[0] for v in last) and accept(last[0])

    wait_until(settled, timeout, interval, message)
    return seen[-1]
