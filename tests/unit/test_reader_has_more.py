"""pulsar-client's "nothing more" inside a batched entry is asked again (`ReaderStream.has_more`).

pulsar-lite names a topic's last entry without its batch index, and the client compares it
with the last message taken: with its queue empty for a moment while its I/O thread still
adds the entry's messages, it says "no more" with most of the entry to come. A partition
log then opened with 42 of an entry's 528 messages counted (beside busy loops)."""

from __future__ import annotations

import asyncio
from typing import Any

import _pulsar

from pulsar_gateway.gateway.backend.reader_stream import ReaderStream


class _Reader:
    """Answers "is a message available" from `answers`, in order."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.asked = 0

    def has_message_available_async(self, callback: Any) -> None:
        answer = self.answers[self.asked]
        self.asked += 1
        callback(_pulsar.Result.Ok, answer)


def _asked(last: tuple[int, int, int], answers: list[bool]) -> tuple[bool, int]:
    async def scenario() -> tuple[bool, int]:
        reader = _Reader(answers)
        stream = ReaderStream(reader)
        stream._last = last
        return await stream.has_more(), reader.asked

    return asyncio.run(scenario())


def test_a_no_inside_a_batched_entry_is_asked_again() -> None:
    assert _asked((1, 9, 41), [False, True]) == (True, 2)
    assert _asked((1, 9, 527), [False, False]) == (False, 2)  # the entry's last: no more


def test_a_no_after_a_whole_entry_or_a_yes_is_believed_at_once() -> None:
    assert _asked((1, 9, -1), [False, True]) == (False, 1)
    assert _asked((1, 9, 41), [True]) == (True, 1)
