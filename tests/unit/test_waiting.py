"""gateway/waiting.py: a deadline on a future that never swallows the caller's cancel."""

from __future__ import annotations

import asyncio

import pytest

from pulsar_gateway.gateway.waiting import result_within


def test_a_cancel_in_the_same_turn_as_the_result_reaches_the_waiter() -> None:
    """The race that kept a cancelled metadata follower running for ever: the result and
    the cancel land in one loop turn; the waiter must still end cancelled."""

    async def scenario() -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(result_within(future, 10))
        await asyncio.sleep(0)  # the waiter is waiting now
        future.set_result(1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert future.result() == 1

    asyncio.run(scenario())


def test_a_timeout_leaves_the_future_to_finish() -> None:
    async def scenario() -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await result_within(future, 0.01)
        assert not future.done()
        future.set_result(7)
        assert await result_within(future, None) == 7

    asyncio.run(scenario())


def test_a_failed_future_raises_its_error() -> None:
    async def scenario() -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_exception(ConnectionError("gone"))
        with pytest.raises(ConnectionError):
            await result_within(future, 1)

    asyncio.run(scenario())
