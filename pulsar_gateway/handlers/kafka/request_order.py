"""One connection's requests take effect in the order they arrived.

Kafka serves a connection's requests one at a time, so a producer that pipelines requests
without retries gets its records stored in send order, and an OffsetCommit or an EndTxn sent
behind a Produce acts after it. The listener runs each request as a task of its own (the
pipelining is where its throughput comes from), and a request awaits several things before
it acts (topic lookup, partition open, authorization, quotas); what this module orders is
the moment each request takes effect (docs/offsets.md, "One connection's order"):

- a Produce takes effect per partition when it hands its records to the partition log
  (`PartitionLog.append` fixes their place in the partition when it is called). Its hand-over
  to a partition waits for the hand-over of the connection's previous Produce to that
  partition, and for the ordered requests before it to finish; everything before (lookups,
  decoding, opening the partition) still runs beside the requests before it;
- every other request but Fetch is ordered as a whole: it starts once the ordered requests
  before it have finished and every Produce before it has handed over all its partitions,
  and the next one waits for it to finish;
- a Fetch changes nothing and may wait long (a long poll): it runs beside everything.

Every wait is on a request admitted earlier, so the waits cannot form a cycle, and every
turn is given up however its request ends (`close`), so one failed or cancelled request
never holds up the ones behind it.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

# Requests that take effect in any order: reads that may wait long
UNORDERED = frozenset({ApiKey.FETCH})


class ProduceTurn:
    """A Produce's places in line, one per partition entry in request order."""

    __slots__ = ("_before", "_handed", "_previous")

    def __init__(
        self,
        before: asyncio.Future[None] | None,
        previous: list[asyncio.Future[None] | None],
        handed: list[asyncio.Future[None]],
    ) -> None:
        self._before = before  # the last ordered request admitted before it
        self._previous = previous  # per entry: the previous hand-over to its partition
        self._handed = handed  # per entry: this request's hand-over

    async def wait(self, entry: int) -> None:
        """Until entry `entry` (its position among the request's partitions) may hand over."""
        await _settled(self._before)
        await _settled(self._previous[entry])

    def handed_over(self, entry: int) -> None:
        """Entry `entry` has handed its records over (or gave up): the next may go."""
        _finish(self._handed[entry])

    def close(self) -> None:
        for future in self._handed:
            _finish(future)


class OrderedTurn:
    """A request ordered as a whole: wait, act, `close`."""

    __slots__ = ("_before", "_done", "_produces")

    def __init__(
        self,
        before: asyncio.Future[None] | None,
        produces: list[asyncio.Future[None]],
        done: asyncio.Future[None],
    ) -> None:
        self._before = before
        self._produces = produces  # hand-overs of the Produce requests before it
        self._done = done

    async def wait(self) -> None:
        await _settled(self._before)
        for future in self._produces:
            await _settled(future)

    def close(self) -> None:
        _finish(self._done)


class RequestOrder:
    """One connection's line: `admit` each request as it is read, in order."""

    def __init__(self) -> None:
        self._last_ordered: asyncio.Future[None] | None = None
        # per (topic name as asked, partition): the last Produce hand-over not yet done
        self._handing: dict[tuple[str, int], asyncio.Future[None]] = {}

    def admit(self, api_key: int, body: dict[str, Any] | None) -> ProduceTurn | OrderedTurn | None:
        """The request's turn (None: it runs whenever it likes). Called for every request in
        the order they were read, with no await in between."""
        if api_key in UNORDERED or body is None:
            return None
        loop = asyncio.get_running_loop()
        before = self._last_ordered
        if api_key == ApiKey.PRODUCE:
            previous: list[asyncio.Future[None] | None] = []
            handed: list[asyncio.Future[None]] = []
            for topic in body["topic_data"]:
                for partition in topic["partition_data"]:
                    key = (topic["name"], partition["index"])
                    mine: asyncio.Future[None] = loop.create_future()
                    previous.append(self._handing.get(key))
                    handed.append(mine)
                    self._handing[key] = mine
                    mine.add_done_callback(functools.partial(self._forget, key))
            return ProduceTurn(before, previous, handed)
        produces = list(self._handing.values())
        done: asyncio.Future[None] = loop.create_future()
        self._last_ordered = done
        return OrderedTurn(before, produces, done)

    def _forget(self, key: tuple[str, int], done: asyncio.Future[None]) -> None:
        """A finished hand-over that is still the partition's last: nothing waits behind it."""
        if self._handing.get(key) is done:
            del self._handing[key]


async def _settled(future: asyncio.Future[None] | None) -> None:
    """Until `future` is done, however it ended; cancelling the waiter leaves it alone."""
    if future is not None and not future.done():
        await asyncio.wait((future,))


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
