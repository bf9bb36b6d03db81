"""The source's next Fetch while the gateway stores the last one's batches.

A partition's copy alternates two waits: a Fetch from the source, then one Produce after
another to the gateway. Reading one answer ahead, in a task of its own, overlaps them: the
next answer is on its way while the current one's batches are written. The writes stay as
they were (one Produce in flight per partition, in source order), so the copy's exactly-once
checks (copier.py) are untouched; only the reads run ahead, and never more than one answer:
the copy holds at most two (the one being written and the one coming in).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


class _End:
    """The source ran out, or failed with `error`."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class ReadAhead(Generic[T]):
    """`source`'s items, the next one fetched while the caller works on the last.

    Used as `async with ReadAhead(items) as ahead: async for item in ahead`; leaving the
    block stops the reading task (and closes `source`) before the caller closes what it
    reads from, so no read outlives its connection."""

    def __init__(self, source: AsyncIterator[T]) -> None:
        self._source = source
        self._handed: asyncio.Queue[T | _End] = asyncio.Queue(maxsize=1)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ReadAhead[T]:
        self._task = asyncio.create_task(self._pump())
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _pump(self) -> None:
        end = _End()
        try:
            async for item in self._source:
                await self._handed.put(item)
                # taken: the next read starts now, while the caller writes this one
                await self._handed.join()
        except Exception as exc:  # noqa: BLE001 - handed to the caller, raised there
            end = _End(exc)
        finally:
            close = getattr(self._source, "aclose", None)
            if close is not None:
                await close()
        await self._handed.put(end)

    def __aiter__(self) -> ReadAhead[T]:
        return self

    async def __anext__(self) -> T:
        item = await self._handed.get()
        self._handed.task_done()
        if isinstance(item, _End):
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        return item
