"""Where a group's commit acknowledges a partition's Pulsar subscription
(storage/kafka/subscription_position.py): the last message before the entry holding the
committed offset, found with few look-ups however many records that entry holds."""

from __future__ import annotations

import asyncio
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.storage.kafka.partition_log import LogEntry
from pulsar_gateway.storage.kafka.subscription_position import entry_start_position


class _Log:
    """The part of a PartitionLog the position reads: one record per message, entries of
    the given sizes (message ids (ledger, entry, batch index) grow with offsets)."""

    def __init__(self, sizes: list[int], log_start: int) -> None:
        self.ids = [(3, entry, index) for entry, size in enumerate(sizes) for index in range(size)]
        self.log_start = log_start
        self.next_offset = len(self.ids)
        self.look_ups = 0

    async def entry_at(self, offset: int) -> LogEntry:
        assert self.log_start <= offset < self.next_offset
        self.look_ups += 1
        return LogEntry(offset, StoredMessage(self.ids[offset], b"", None, {}, 0, 0))


def _expected(log: _Log, offset: int) -> tuple[int, int, int] | None:
    """Walked back record by record, as the gateway did before."""
    end = min(offset, log.next_offset)
    if end <= log.log_start:
        return None
    if end == log.next_offset:
        return log.ids[end - 1]
    start = end
    while start > log.log_start and log.ids[start - 1][:2] == log.ids[end][:2]:
        start -= 1
    return log.ids[start - 1] if start > log.log_start else None


@settings(max_examples=examples(150), deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=8),
    data=st.data(),
)
def test_the_position_is_the_last_message_before_the_committed_offsets_entry(
    sizes: list[int], data: st.DataObject
) -> None:
    log = _Log(sizes, 0)
    log.log_start = data.draw(st.integers(0, log.next_offset - 1))
    offset = data.draw(st.integers(0, log.next_offset + 2))
    assert asyncio.run(entry_start_position(log, offset)) == _expected(log, offset)  # type: ignore[arg-type]


def test_a_commit_inside_an_entry_of_many_records_takes_few_look_ups() -> None:
    """Where a message's batch index does not lead to its entry's first (one message of the
    entry was a resent copy the tailer dropped), the walk back went record by record: one
    look-up per record, ten thousand here."""
    log = _Log([5, 10_001, 7], 0)
    del log.ids[5 + 5_000]  # offsets stay dense: the copy has none
    log.next_offset -= 1
    position = asyncio.run(entry_start_position(log, 5 + 9_999))  # type: ignore[arg-type]
    assert position == (3, 0, 4)
    assert log.look_ups <= 2 * math.ceil(math.log2(10_000)) + 4
