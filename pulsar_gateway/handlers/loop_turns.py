"""Turns on the event loop for handlers whose work grows with what a client asks for.

Every connection of a listener shares one event loop: a Metadata naming 99,999 topics
once kept it for 5-9 s, and every other client waited that long for anything (issue 33).
Such handlers go through their items with `LoopTurns.paced` (or count them with a
`Pace` across nested loops): `per_turn` items, then a
turn of the loop for everything else, and, since a client may pipeline many such
requests (or many clients send one), the paced handlers of a listener take their turns
one after the other, one batch per loop iteration, round-robin. Whatever the number of
expensive requests in flight, the loop is held for one batch at a time (a few ms); a
cheap request waits a few batches, never the whole of someone else's work.

Responses built from so many items are encoded in a worker thread (requests.py), as big
requests are decoded in one: the interpreter switches threads every few ms, so the loop
runs meanwhile.

Work that grows with bytes rather than items takes its turns the same way (`after_bytes`,
`turn_if_busy`): a Fetch answer of megabytes is copied some five times on its way out
(read from the tail, re-based, encoded, written), 3-4 ms per MiB copied here. Ten
connections that never read their answers each had a 4 MiB Fetch built in the same turn of
the loop, whenever their connections were opened again: turns of 40-85 ms, one after the
other, and every well-behaved client waited 200-800 ms for an answer (issue 31, measured
with a timer probing the loop's lateness and py-spy). Each such step of `BYTES_PER_TURN`
or more is now followed by a turn, round-robin with every other paced handler, and a big
read waits for those ahead of it: a turn holds one such step at a time.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

T = TypeVar("T")

# Items of a handler's loop per turn: ~20-60 us each (a topic named in Metadata, looked up,
# authorized and described), so a turn holds the loop for a few ms at most.
PER_TURN = 32

# Bytes copied or encoded in one go after which a handler takes a turn: a few ms of work.
BYTES_PER_TURN = 512 * 1024


class LoopTurns:
    """Round-robin turns on the loop for the paced handlers of one listener."""

    def __init__(self, per_turn: int = PER_TURN, bytes_per_turn: int = BYTES_PER_TURN) -> None:
        self.per_turn = per_turn
        self.bytes_per_turn = bytes_per_turn
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._scheduled = False

    def pace(self) -> Pace:
        """A count of one request's items (across nested loops: topics, then partitions)."""
        return Pace(self)

    async def paced(self, items: Iterable[T]) -> AsyncIterator[T]:
        """``items``, with a turn of the loop (after everyone waiting for one) every
        `per_turn` of them."""
        pace = Pace(self)
        for item in items:
            await pace.step()
            yield item

    async def after_bytes(self, size: int) -> None:
        """A turn after a step that copied or encoded ``size`` bytes, if that was
        `bytes_per_turn` or more: the next step (of this or any handler) waits for it."""
        if size >= self.bytes_per_turn:
            await self.turn()

    async def turn_if_busy(self) -> None:
        """A turn before work that may be big (a read of megabytes), only while other
        paced handlers wait for theirs: started in the same turn, ten such reads ran one
        after the other in it. With nobody waiting, the work starts at once."""
        if self._waiting:
            await self.turn()

    async def turn(self) -> None:
        """Give the loop up until every paced handler that asked before has had its turn."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiting.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._next)
        await waiter

    def _next(self) -> None:
        """Wake one waiter per loop iteration (skipping those cancelled meanwhile)."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
        if self._waiting:
            asyncio.get_running_loop().call_soon(self._next)
        else:
            self._scheduled = False


class Pace:
    """One request's items so far: `step` before each takes a turn every `per_turn`."""

    def __init__(self, turns: LoopTurns) -> None:
        self.turns = turns
        self.count = 0

    async def step(self, items: int = 1) -> None:
        self.count += items
        if self.count > self.turns.per_turn:
            self.count = 0
            await self.turns.turn()
