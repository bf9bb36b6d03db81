"""An append's offsets when the tailer numbered its messages, and the tail cache dropped them,
before the append asked (storage/kafka/append_offsets.py, `NumberedWhileAppending`).

Under a 2x produce overload the loop runs late: by the time an append resumes with its send
receipts, the tailer has numbered its messages and many more, and a small tail cache has let
them go. Each such append used to scan the log from a checkpoint with a reader of its own,
and the readers held what pulsar-lite sent them: the gateway grew to 4.7 GiB and produced a
quarter as much. The backend here numbers the append's messages, and a thousand more, before
the send returns; it has no readers, so an append that scans fails."""

from __future__ import annotations

import asyncio
from typing import Any

from pulsar_gateway.gateway.messages import MessageKey, OutMessage, StoredMessage
from pulsar_gateway.storage.kafka.partition_log import PartitionLog


class _Metadata:
    async def put(self, key: str, value: Any) -> None:
        pass


class _RacingBackend:
    """Stores and, before answering, lets the tailer number the batch and `then` more."""

    def __init__(self, then: int) -> None:
        self.log: PartitionLog | None = None
        self.entry = 0
        self.then = then

    def _stored(self, count: int) -> list[StoredMessage]:
        out = [
            StoredMessage((1, self.entry + i, -1), b"m" * 100, "", {}, 0, 1) for i in range(count)
        ]
        self.entry += count
        return out

    async def send(
        self, topic: str, messages: list[OutMessage], batching: bool = True, whole: bool = False
    ) -> tuple[MessageKey, MessageKey]:
        assert self.log is not None
        mine = self._stored(len(messages))
        self.log._index(mine + self._stored(self.then))
        return mine[0].id, mine[-1].id


def _log(then: int) -> PartitionLog:
    backend = _RacingBackend(then)
    log = PartitionLog(backend, _Metadata(), "t", tail_records=10)  # type: ignore[arg-type]
    backend.log = log
    return log


def test_an_append_numbered_and_dropped_from_the_tail_before_it_asks_gets_its_offset() -> None:
    async def scenario() -> None:
        log = _log(then=1000)
        first = await log.append([OutMessage(b"a")] * 3)
        second = await log.append([OutMessage(b"b")] * 2)
        assert (first, second) == (0, 1003)
        assert log.tail_start > second  # both were out of the tail cache when they asked
        assert log._numbered.ids == []  # nothing kept once no append waits

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_appends_waiting_together_each_get_their_own_offsets() -> None:
    async def scenario() -> None:
        log = _log(then=50)
        offsets = await asyncio.gather(*(log.append([OutMessage(b"x")] * 4) for _ in range(5)))
        assert offsets == [0, 54, 108, 162, 216]

    asyncio.run(asyncio.wait_for(scenario(), 10))
