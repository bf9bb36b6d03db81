"""The tailer's stall check asks the broker whether it stores more than the reader was sent;
entries the broker sent while it answered are a late dispatch, not a stall, and are numbered
without reopening the reader (docs/backend.md, "Readers skip or stall"). Under busy loops
every stall declared in the hostile-clients test was one: the entry was already queued when
the answer came, and the reopen (a close and a subscribe, 0.36 s under load) threw it away
and made a produce wait past its bound. A reader the broker truly stopped sending to is
still reopened."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pulsar_gateway.gateway.messages import MessageKey, StoredMessage
from pulsar_gateway.storage.kafka import partition_log
from pulsar_gateway.storage.kafka.partition_log import PartitionLog

TOPIC = "persistent://public/default/t-partition-0"
STORED = StoredMessage((1, 0, -1), b"r", "", {}, 0, 1)


class _Metadata:
    def children(self, prefix: str) -> list[tuple[str, Any]]:
        return []

    async def put(self, key: str, value: Any) -> None:
        pass


class _Reader:
    """A reader of an empty topic until `store` is called. The broker's answer on what it
    holds then says "more"; `sent_with_answer`: the entry reaches the reader together with
    that answer (a late dispatch), else only a new reader gets it (a stall)."""

    def __init__(self, sent_with_answer: bool) -> None:
        self.sent_with_answer = sent_with_answer
        self.stored = False
        self.queued: list[StoredMessage] = []
        self.arrived = asyncio.Event()
        self.last_passed: MessageKey | None = None
        self.connected = True
        self.reopens = 0

    def store(self) -> None:
        self.stored = True

    async def has_more(self, timeout: float = 30) -> bool:
        more = self.stored and self.last_passed is None
        if more and self.sent_with_answer and not self.queued:
            self._queue()
        return more

    def _queue(self) -> None:
        self.queued.append(STORED)
        self.arrived.set()

    async def read_batch(self, limit: int, timeout: float | None = None, **_: Any) -> Any:
        if not self.queued:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout)
            except TimeoutError:
                return []
        out, self.queued = self.queued, []
        self.last_passed = out[-1].id
        return out

    async def reopen(self) -> None:
        self.reopens += 1
        self.queued = []  # what the old reader held goes with it
        if self.stored and self.last_passed is None:
            self._queue()  # a new reader is sent what is stored

    def hurry(self) -> None:
        pass

    async def close(self) -> None:
        pass


class _Backend:
    reachable = True

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader

    async def open_log_reader(self, topic: str, start: MessageKey, **_: Any) -> _Reader:
        return self.reader


async def _fetch_after_store(reader: _Reader) -> PartitionLog:
    """A partition opened on an empty topic, a fetch waiting on it, then one entry stored;
    returns once the tailer numbered it."""
    log = PartitionLog(_Backend(reader), _Metadata(), TOPIC)  # type: ignore[arg-type]
    await log.open()
    fetch = asyncio.ensure_future(log.wait_for_data(0, 30))
    reader.store()
    await fetch
    assert log.next_offset == 1
    await log.close()
    return log


@pytest.fixture(autouse=True)
def _short_idle_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_log, "IDLE_READ_SECONDS", 0.02)


def test_an_entry_that_came_with_the_brokers_answer_is_numbered_without_a_reopen() -> None:
    reader = _Reader(sent_with_answer=True)
    asyncio.run(asyncio.wait_for(_fetch_after_store(reader), 10))
    assert reader.reopens == 0, "a late dispatch was taken for a stall: the reader reopened"


def test_a_reader_the_broker_stopped_sending_to_is_reopened() -> None:
    reader = _Reader(sent_with_answer=False)
    asyncio.run(asyncio.wait_for(_fetch_after_store(reader), 10))
    assert reader.reopens == 1
