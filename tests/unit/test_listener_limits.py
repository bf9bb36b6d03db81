"""The listeners' limit objects on their own: byte budgets, the log limiter."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pulsar_gateway.handlers.listener_limits import ByteBudget, LogLimiter, warn


def test_byte_budget_waits_for_room_in_itself_and_its_parent() -> None:
    async def scenario() -> None:
        total = ByteBudget(100)
        first, second = ByteBudget(80, total), ByteBudget(80, total)
        await first.acquire(70)
        waiting = asyncio.ensure_future(second.acquire(40))  # 70 + 40 > 100 in the total
        await asyncio.sleep(0)
        assert not waiting.done() and total.used == 70
        first.release(70)
        await asyncio.wait_for(waiting, 1)
        assert (first.used, second.used, total.used) == (0, 40, 40)
        second.charge(50)  # decoded bytes: counted without waiting, even over the limit
        assert total.used == 90
        second.release_all()
        assert total.used == 0

    asyncio.run(scenario())


def test_a_request_larger_than_the_budget_is_let_in_alone() -> None:
    async def scenario() -> None:
        budget = ByteBudget(10)
        await asyncio.wait_for(budget.acquire(50), 1)
        blocked = asyncio.ensure_future(budget.acquire(1))
        await asyncio.sleep(0)
        assert not blocked.done()
        budget.release(50)
        await asyncio.wait_for(blocked, 1)

    asyncio.run(scenario())


def test_a_cancelled_wait_takes_nothing() -> None:
    async def scenario() -> None:
        total = ByteBudget(10)
        await total.acquire(10)
        own = ByteBudget(100, total)
        waiting = asyncio.ensure_future(own.acquire(5))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert own.used == 0 and total.used == 10

    asyncio.run(scenario())


def test_log_limiter_lets_a_burst_through_then_counts_what_it_held_back() -> None:
    now = [0.0]
    limiter = LogLimiter(burst=3, interval=10.0, clock=lambda: now[0])
    logger = logging.getLogger("test.listener_limits")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    logger.propagate = False
    limiter.attach("test.listener_limits")
    try:
        for peer in range(20):
            logger.warning("closing connection from %s: bad frame", peer)
        logger.warning("another message %d", 1)  # its own allowance
        assert records == [
            "closing connection from 0: bad frame",
            "closing connection from 1: bad frame",
            "closing connection from 2: bad frame",
            "another message 1",
        ]
        now[0] = 10.0
        logger.warning("closing connection from %s: bad frame", 99)
        assert records[-1].endswith("from 99: bad frame (and 17 more like it suppressed)")
        limiter.detach()  # a stopped listener leaves the logger as it found it
        for peer in range(5):
            logger.warning("closing connection from %s: bad frame", peer)
        assert len(records) == 10
    finally:
        limiter.detach()
        logger.removeHandler(handler)


def test_warn_asks_the_limiter_first_and_keeps_its_count() -> None:
    """`warn` drops what the limiter would drop without making a record (a flood's refusals
    and a 99,999-topic Metadata's denials cost the loop a record each), and the next line
    let through still says how many were held back."""
    now = [0.0]
    limiter = LogLimiter(burst=2, interval=10.0, clock=lambda: now[0])
    logger = logging.getLogger("test.listener_limits.warn")
    records: list[str] = []
    made = [0]

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    class Counting(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            made[0] += 1
            return True

    handler = Keep()
    logger.addHandler(handler)
    logger.propagate = False
    logger.addFilter(Counting())
    limiter.attach("test.listener_limits.warn")
    try:
        for peer in range(10):
            warn(logger, "refusing %s", peer)
        assert records == ["refusing 0", "refusing 1"]
        assert made[0] == 2  # the eight held back were never made into records
        now[0] = 10.0
        warn(logger, "refusing %s", 99)
        assert records[-1] == "refusing 99 (and 8 more like it suppressed)"
    finally:
        limiter.detach()
        logger.removeHandler(handler)
