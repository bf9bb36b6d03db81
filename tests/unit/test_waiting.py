"""gateway/waiting.py: a deadline on a future that never swallows the caller's cancel."""

from __future__ import annotations

import asyncio
import gc

import pytest

from pulsar_gateway.gateway.waiting import cancel_and_wait, result_within


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


def test_an_error_in_the_same_turn_as_the_cancel_is_not_logged_as_lost() -> None:
    """A request's caller cancelled in the turn the broker's error answer arrived: nobody
    reads the answer's future any more, and asyncio must not log its error as never
    retrieved (a CI run failed on that line in the gateway's log)."""
    reported: list[dict] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(result_within(future, 10))
        await asyncio.sleep(0)  # the waiter is waiting now
        future.set_exception(ConnectionError("Topic has no messages"))
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        del future, waiter
        gc.collect()

    asyncio.run(scenario())
    assert not [ctx for ctx in reported if "never retrieved" in ctx.get("message", "")]


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


def test_a_task_that_loses_a_cancel_is_cancelled_again_until_it_ends() -> None:
    """A loop around `asyncio.wait_for` whose inner future completes in the same turn as
    the cancel (Python 3.11 then forgets the cancel and the loop goes round again), or a
    task that ignores one cancel outright: `cancel_and_wait` still ends it."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[int]] = []

        async def looping() -> None:
            while True:
                futures.append(loop.create_future())
                await asyncio.wait_for(futures[-1], 30)

        async def stubborn() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass  # loses the first cancel
            await asyncio.sleep(30)

        task = asyncio.ensure_future(looping())
        other = asyncio.ensure_future(stubborn())
        while not futures:  # appended, so the task is waiting inside wait_for now
            await asyncio.sleep(0)
        futures[-1].set_result(1)
        await asyncio.wait_for(cancel_and_wait(task, other, None), 5)
        assert task.cancelled() and other.cancelled()

    asyncio.run(scenario())


def test_the_error_of_a_task_that_had_already_ended_is_retrieved_too() -> None:
    """AMQP's splice stops both pumps when the first ends: a pump that ended with a reset
    connection (a killed cluster member) was already done, was left out, and asyncio logged
    'Task exception was never retrieved' at ERROR for every such hand-off."""
    reported: list[dict] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))

        async def reset() -> None:
            raise ConnectionResetError(104, "Connection reset by peer")

        ended = asyncio.ensure_future(reset())
        running = asyncio.ensure_future(asyncio.sleep(60))
        await asyncio.wait([ended, running], return_when=asyncio.FIRST_COMPLETED)
        await cancel_and_wait(ended, running)
        del ended, running
        gc.collect()

    asyncio.run(scenario())
    assert not [ctx for ctx in reported if "never retrieved" in ctx.get("message", "")]
