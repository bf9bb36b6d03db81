"""A Kafka batch stored as one message per record is numbered whole (docs/offsets.md, "A
batch is numbered whole"): the tailer holds back the messages from where a batch begins that
has not ended yet, so the high watermark never stops inside a batch, even when the reader
hands the batch over in two reads; the offsets are those of numbering all at once."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.resend_filter import SEQ, stamp_text
from pulsar_gateway.gateway.messages import StoredMessage
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.whole_batches import BATCH_SLACK_BYTES, BatchEdges, WholeBatches


class _Metadata:
    async def put(self, key: str, value: Any) -> None:
        pass


class _Backend:
    reachable = True


def _message(entry: int, producer: str, stamp: str | None) -> StoredMessage:
    properties = {} if stamp is None else {SEQ: stamp}
    return StoredMessage((1, entry, -1), b"v", "", properties, 0, 1, producer)


def _batches(sizes: list[int], writer: str = "gw-a", first_entry: int = 0) -> list[StoredMessage]:
    """Messages of batches of these sizes, stamped and named as the backend does it: the very
    first message goes out alone on the writer's single producer (it opens the ledger), the
    rest on its batching one."""
    out = []
    sequence = 0
    for size in sizes:
        for position in range(size):
            sequence += 1
            stamp = stamp_text(sequence, more=position < size - 1)
            kind = "single" if sequence == 1 else "batching"
            out.append(_message(first_entry + len(out), f"{writer}.{kind}", stamp))
    return out


def open_batch_start(messages: list[StoredMessage]) -> int:
    """How many of `messages`, read at once, may be numbered."""
    return len(WholeBatches(1000).take(messages))


def test_open_batch_start_finds_the_first_unended_batch() -> None:
    assert open_batch_start(_batches([3, 2])) == 5
    assert open_batch_start(_batches([3, 2])[:4]) == 3
    assert open_batch_start(_batches([3])[:1]) == 0
    # a native producer's message inside the batch neither ends nor opens one
    mixed = _batches([3])[:2] + [_message(99, "native", None)]
    # the batch that opened the ledger ends on another producer of the same writer
    assert open_batch_start(_batches([3, 3])) == 6
    assert open_batch_start(mixed) == 0
    # another gateway producer's whole batch inside the open one leaves it open
    other = _batches([2], writer="gw-b", first_entry=50)
    assert open_batch_start(_batches([3])[:1] + other) == 0
    assert open_batch_start(_batches([3]) + other) == 5


def test_a_long_stream_is_scanned_once_and_held_little() -> None:
    """Reads of whole batches hold nothing between them, however many come (each read is
    scanned once; the tailer held 13,600 messages and blocked the loop for seconds when a
    batch's producers were told apart by name)."""
    whole = WholeBatches(1000)
    messages = _batches([7] * 3000)
    taken = 0
    for start in range(0, len(messages), 500):
        taken += len(whole.take(messages[start : start + 500]))
        assert len(whole.held) < 7
    assert taken == len(messages) and not whole.held


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=12),
    st.lists(st.integers(1, 7), min_size=1, max_size=20),
)
def test_reads_split_anywhere_stop_the_watermark_only_between_batches(
    sizes: list[int], reads: list[int]
) -> None:
    messages = _batches(sizes)
    ends = {sum(sizes[: i + 1]) for i in range(len(sizes))} | {0}

    async def scenario() -> None:
        log = PartitionLog(_Backend(), _Metadata(), "t")  # type: ignore[arg-type]
        position = 0
        read = 0
        while position < len(messages):
            take = reads[read % len(reads)]
            read += 1
            log._index_whole(messages[position : position + take])
            position += take
            assert log.next_offset in ends  # never inside a batch
        assert log.next_offset == len(messages)
        assert [entry.offset for entry in log._tail.read(0, 1 << 30)] == list(range(len(messages)))

    asyncio.run(scenario())


def test_a_batch_whose_rest_never_comes_is_released() -> None:
    async def scenario() -> None:
        log = PartitionLog(_Backend(), _Metadata(), "t")  # type: ignore[arg-type]
        log._index_whole(_batches([2, 4])[:4])
        assert log.next_offset == 2 and len(log._whole.held) == 2
        log._index_whole([], release=True)
        assert log.next_offset == 4 and not log._whole.held

    asyncio.run(scenario())


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=12),
    st.integers(1, 2000),
    st.integers(0, 30),
)
def test_a_byte_limited_read_of_the_tail_stops_only_between_batches(
    sizes: list[int], max_bytes: int, start: int
) -> None:
    """A fetch whose byte limit falls inside a batch gets the batch's rest with it (Kafka
    makes a batch visible whole); a read from inside a batch may stop at that batch's end."""
    messages = _batches(sizes)
    ends = {sum(sizes[: i + 1]) for i in range(len(sizes))}
    start = min(start, len(messages) - 1)

    async def scenario() -> None:
        log = PartitionLog(_Backend(), _Metadata(), "t")  # type: ignore[arg-type]
        log._index_whole(messages)
        offset = start
        while offset < len(messages):
            read = log._tail.read(offset, max_bytes)
            assert read and read[0].offset == offset
            offset = read[-1].offset + 1
            assert offset in ends  # never inside a batch
        assert offset == len(messages)

    asyncio.run(scenario())


def test_a_batch_whose_rest_never_comes_does_not_hold_a_read_for_ever() -> None:
    edges = BatchEdges()
    edges.saw(_batches([3])[0])
    assert not edges.may_stop(100, 50)
    assert edges.may_stop(BATCH_SLACK_BYTES + 51, 50)
