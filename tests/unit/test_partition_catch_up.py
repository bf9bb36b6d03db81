"""A reopened partition is ready once it has numbered what is stored. Its reader starts at
the last checkpoint's message, which is stored: a "nothing more" from the broker before
that message is numbered came too early, and is doubted (docs/offsets.md, "Checkpoints").
Seen once in about 70 runs of tests/integration/test_partition_open.py beside busy loops:
the partition opened at offset 2,000 with 2,500 records stored."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pulsar_gateway.gateway.messages import MessageKey, StoredMessage
from pulsar_gateway.storage.kafka import partition_log
from pulsar_gateway.storage.kafka.offset_checkpoints import INDEX_PREFIX
from pulsar_gateway.storage.kafka.partition_log import PartitionLog

TOPIC = "persistent://public/default/t-partition-0"
CHECKPOINT: MessageKey = (1, 6, 0)  # offset 2,000's message


class _Metadata:
    """One checkpoint: offset 2,000 is message (1, 6, 0)."""

    def children(self, prefix: str) -> list[tuple[str, Any]]:
        if prefix != f"{INDEX_PREFIX}{TOPIC}/":
            return []
        return [(f"{prefix}{2000:020d}", {"id": list(CHECKPOINT), "resends": {}})]

    async def put(self, key: str, value: Any) -> None:
        pass


class _EarlyNo:
    """A reader whose broker answers "nothing more" at once, before the reader has passed
    on anything; its messages come only once that was said."""

    def __init__(self, messages: list[StoredMessage]) -> None:
        self.messages = messages
        self.said = asyncio.Event()
        self.last_passed: MessageKey | None = None
        self.connected = True
        self.start: MessageKey | None = None

    async def has_more(self, timeout: float = 30) -> bool:
        # the messages come right after the answer: once its asker has acted on it
        asyncio.get_running_loop().call_soon(self.said.set)
        return False

    async def read_batch(self, limit: int, timeout: float | None = None, **_: Any) -> Any:
        if self.messages:
            await self.said.wait()
            out, self.messages = self.messages, []
            self.last_passed = out[-1].id
            return out
        try:
            await asyncio.wait_for(asyncio.Event().wait(), timeout)
        except TimeoutError:
            pass
        return []

    def hurry(self) -> None:
        pass

    async def close(self) -> None:
        pass


class _Backend:
    reachable = True

    def __init__(self, stream: _EarlyNo) -> None:
        self.stream = stream

    async def open_log_reader(self, topic: str, start: MessageKey, **_: Any) -> _EarlyNo:
        self.stream.start = start
        return self.stream


def _reopened(messages: list[StoredMessage]) -> tuple[PartitionLog, _EarlyNo]:
    stream = _EarlyNo(messages)
    log = PartitionLog(_Backend(stream), _Metadata(), TOPIC)  # type: ignore[arg-type]
    return log, stream


def test_an_early_nothing_more_does_not_open_a_partition_short_of_its_checkpoint() -> None:
    async def scenario() -> None:
        stored = [StoredMessage((1, 6, i), b"r", "", {}, 0, 1) for i in range(500)]
        log, stream = _reopened(stored)
        async with asyncio.timeout(10):  # no task between: the offset as `open` returned
            await log.open()
            opened_at = log.next_offset
        assert stream.start == CHECKPOINT
        assert opened_at == 2500  # not 2,000: all stored after the checkpoint counted
        await log.close()

    asyncio.run(scenario())


def test_a_partition_whose_checkpoint_message_is_gone_still_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reader never passes the checkpoint's message (the topic lost it): the answer is
    believed after CATCH_UP_DOUBTS doubts, and the partition opens where the checkpoint
    says."""
    monkeypatch.setattr(partition_log, "CATCH_UP_MAX_PAUSE", 0.02)

    async def scenario() -> None:
        log, stream = _reopened([])
        await asyncio.wait_for(log.open(), 10)
        assert stream.said.is_set()
        assert log.next_offset == 2000
        await log.close()

    asyncio.run(scenario())
