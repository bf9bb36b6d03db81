"""The loop watch: a blocked event loop is reported with where its thread is stuck, once
per stall, and its end is reported too; a loop that keeps running is never reported."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest

from harness.waiting import async_wait_until
from pulsar_gateway.gateway.loop_watch import LoopWatch


def _block_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # what a synchronous client call does to the loop


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _watched(body: Callable[[], Awaitable[None]]) -> LoopWatch:
    """Run `body` on a loop under a quick watch (0.3 s threshold); the watch afterwards."""

    async def scenario() -> LoopWatch:
        watch = LoopWatch(threshold=0.3, interval=0.05)
        watch.start()
        try:
            await body()
        finally:
            watch.stop()
        return watch

    return asyncio.run(scenario())


def test_a_blocked_loop_is_reported_with_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.loop")

    async def block_then_run() -> None:
        _block_the_loop_for(1.0)
        # running again: the watch notices once the loop has touched its stamp
        await async_wait_until(lambda: _said(caplog, "runs again after"), 10)

    watch = _watched(block_then_run)
    blocked = _said(caplog, "blocked for")
    assert watch.stalls == 1 and len(blocked) == 1, blocked
    assert "_block_the_loop_for" in blocked[0]  # where the loop's thread was


def test_a_loop_that_keeps_running_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.loop")

    async def short_steps() -> None:
        # a loop that stays busy with short steps for 20 of the watch's intervals
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    assert _watched(short_steps).stalls == 0
    assert not caplog.records
