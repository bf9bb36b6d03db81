"""The loop watch: a blocked event loop is reported with where its thread is stuck, once
per stall, and its end is reported too; a loop that keeps running is never reported."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from pulsar_gateway.gateway.loop_watch import LoopWatch


def _block_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # what a synchronous client call does to the loop


async def _watched(seconds_blocked: float, seconds_running: float) -> LoopWatch:
    watch = LoopWatch(threshold=0.3, interval=0.05)
    watch.start()
    try:
        await asyncio.sleep(seconds_running)  # the loop runs: nothing to report
        _block_the_loop_for(seconds_blocked)
        await asyncio.sleep(0.3)  # running again: the watch sees the loop touch its stamp
    finally:
        watch.stop()
    return watch


def test_a_blocked_loop_is_reported_with_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.loop")
    watch = asyncio.run(_watched(seconds_blocked=1.0, seconds_running=0.5))
    blocked = [r.getMessage() for r in caplog.records if "blocked for" in r.getMessage()]
    assert watch.stalls == 1 and len(blocked) == 1, blocked
    assert "_block_the_loop_for" in blocked[0]  # where the loop's thread was
    assert any("runs again after" in r.getMessage() for r in caplog.records)


def test_a_loop_that_keeps_running_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.loop")
    watch = asyncio.run(_watched(seconds_blocked=0.0, seconds_running=1.0))
    assert watch.stalls == 0
    assert not caplog.records
