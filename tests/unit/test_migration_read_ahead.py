"""The copy's reads one answer ahead of its writes (tools/migration/read_ahead.py): the next
Fetch starts while the last answer's batches are written, never more than one ahead, a
failed read reaches the copy, and a copy that stops leaves no read running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from pulsar_gateway.tools.migration.read_ahead import ReadAhead


class Source:
    """Answers 0, 1, 2, ... up to `count`, each read waiting until it is let go."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count = count
        self.fail_at = fail_at
        self.started: list[int] = []  # the reads begun, in order
        self.go = asyncio.Event()
        self.closed = False

    async def items(self) -> AsyncIterator[int]:
        try:
            for n in range(self.count):
                self.started.append(n)
                await self.go.wait()
                if n == self.fail_at:
                    raise RuntimeError(f"fetch {n} failed")
                yield n
        finally:
            self.closed = True


async def _until(condition: Callable[[], bool], what: str) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(wait(), 5)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


def test_the_next_read_starts_while_the_last_answer_is_written() -> None:
    async def run() -> list[int]:
        source = Source(3)
        source.go.set()
        got = []
        async with ReadAhead(source.items()) as ahead:
            async for n in ahead:
                # the caller writes answer n: read n + 1 is under way meanwhile, n + 2 not
                if n + 1 < source.count:
                    await _until(lambda n=n: len(source.started) == n + 2, f"read {n + 1} begun")
                for _ in range(20):
                    await asyncio.sleep(0)
                assert len(source.started) <= n + 2, "more than one answer read ahead"
                got.append(n)
        return got

    assert asyncio.run(run()) == [0, 1, 2]


def test_a_failed_read_reaches_the_copy() -> None:
    async def run() -> list[int]:
        source = Source(5, fail_at=2)
        source.go.set()
        got = []
        async with ReadAhead(source.items()) as ahead:
            async for n in ahead:
                got.append(n)
        return got

    with pytest.raises(RuntimeError, match="fetch 2 failed"):
        asyncio.run(run())


def test_a_copy_that_stops_leaves_no_read_running() -> None:
    async def run() -> Source:
        source = Source(5)
        source.go.set()
        with pytest.raises(ValueError):
            async with ReadAhead(source.items()) as ahead:
                async for _ in ahead:
                    source.go.clear()  # the next read hangs, as a slow Fetch would
                    await _until(lambda: len(source.started) == 2, "read 1 begun")
                    raise ValueError("the gateway refused a batch")
        assert source.closed, "the source was left open"
        return source

    assert asyncio.run(run()).started == [0, 1]
