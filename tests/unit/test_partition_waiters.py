"""A partition's data waiters are futures that appends resolve; one left pending after its
waiter gave up counts as a request still waiting (PartitionLog.busy), and the idle sweep never
closes a busy partition, so its reader, producer and tail cache would be held for good."""

from __future__ import annotations

import asyncio

import pytest

from pulsar_gateway.gateway.backend.pulsar_backend import BackendError
from pulsar_gateway.storage.kafka.partition_log import PartitionLog


class _Metadata:
    async def put(self, key: str, value: object) -> None:
        pass


class _SlowStartStream:
    """A reader that says it has more once (so catch-up waits for data that never comes),
    then that it has passed on everything."""

    def __init__(self) -> None:
        self.asked = 0
        self.last_passed = None

    async def has_more(self, timeout: float = 30) -> bool:
        self.asked += 1
        return self.asked == 1


def test_catch_up_leaves_no_waiter_behind() -> None:
    async def scenario() -> None:
        log = PartitionLog(None, _Metadata(), "t")  # type: ignore[arg-type]
        log._stream = _SlowStartStream()  # type: ignore[assignment]
        log._task = asyncio.ensure_future(asyncio.Event().wait())  # a tailer at work
        await log.reach_end()
        assert not log.busy, "catch-up left a pending data waiter: the partition never idles"
        log._task.cancel()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_reaching_the_end_of_a_closed_log_fails_instead_of_waiting_for_good() -> None:
    """A log closed (its tailer gone) while a produce waits for it to reach the end: the
    tailer would never number what the broker says is there, so the wait must end."""

    async def scenario() -> None:
        log = PartitionLog(None, _Metadata(), "t")  # type: ignore[arg-type]
        log._stream = _SlowStartStream()  # type: ignore[assignment]
        with pytest.raises(BackendError, match="closed"):
            await log.reach_end()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_cancelled_long_poll_leaves_no_waiter_behind() -> None:
    """wait_for_data, cancelled from outside (its connection closed), takes its waiter along."""

    async def scenario() -> None:
        log = PartitionLog(None, _Metadata(), "t")  # type: ignore[arg-type]
        poll = asyncio.ensure_future(log.wait_for_data(0, 60))
        while not log.busy:
            await asyncio.sleep(0)
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
        assert not log.busy

    asyncio.run(asyncio.wait_for(scenario(), 10))
