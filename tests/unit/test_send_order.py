"""Appends' steps in the order of their sends, whatever order the appends finish in
(storage/kafka/send_order.py), and batches kept whole for tail fetches in that order
(storage/kafka/partition_log.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.messages import MessageKey, OutMessage, StoredMessage
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.send_order import SendOrder


@st.composite
def _finishes(draw: st.DrawFn) -> tuple[int, list[int], set[int]]:
    count = draw(st.integers(1, 30))
    order = draw(st.permutations(range(count)))
    without_step = draw(st.sets(st.integers(0, count - 1)))
    return count, list(order), without_step


@given(_finishes())
def test_steps_run_in_ticket_order_each_once_and_only_after_every_earlier_ticket(
    case: tuple[int, list[int], set[int]],
) -> None:
    count, finish_order, without_step = case
    order = SendOrder()
    tickets = [order.ticket() for _ in range(count)]
    assert tickets == list(range(count))
    finished: set[int] = set()
    ran: list[int] = []

    def step(ticket: int) -> None:
        assert set(range(ticket)) <= finished  # every earlier append is done
        ran.append(ticket)

    for ticket in finish_order:
        finished.add(ticket)
        order.done(ticket, None if ticket in without_step else (lambda t=ticket: step(t)))
    assert ran == [t for t in range(count) if t not in without_step]
    assert order.held == 0


class _Metadata:
    async def put(self, key: str, value: Any) -> None:
        pass


class _GatedBackend:
    """Stores at once and has the tailer number the messages, but answers a send only when
    its gate opens: the first append's receipt comes after the second append is done."""

    def __init__(self) -> None:
        self.log: PartitionLog | None = None
        self.entry = 0
        self.gates: list[asyncio.Event] = []

    async def send(
        self,
        topic: str,
        messages: list[OutMessage],
        batching: bool = True,
        whole: bool = False,
        produced: object = None,
    ) -> tuple[MessageKey, MessageKey]:
        assert self.log is not None
        stored = [
            StoredMessage((1, self.entry + i, -1), m.payload, "", {}, 0, 1)
            for i, m in enumerate(messages)
        ]
        self.entry += len(messages)
        self.log._index(stored)
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return stored[0].id, stored[-1].id


def test_batches_finishing_out_of_order_are_all_kept_for_tail_fetches() -> None:
    """Before, the second batch was kept first and the first turned away, so a tail fetch
    unpacked and encoded its records one by one (38 of 49 batches in a 200k-record run)."""

    async def scenario() -> None:
        backend = _GatedBackend()
        log = PartitionLog(backend, _Metadata(), "t")  # type: ignore[arg-type]
        backend.log = log
        first = asyncio.ensure_future(log.append([OutMessage(b"a")] * 3, encoded=b"batch-a"))
        second = asyncio.ensure_future(log.append([OutMessage(b"b")] * 2, encoded=b"batch-b"))
        while len(backend.gates) < 2:
            await asyncio.sleep(0)
        backend.gates[1].set()
        assert await second == 3
        backend.gates[0].set()
        assert await first == 0
        entries = await log.read(0, 1 << 20)
        assert [(e.offset, e.message.payload) for e in entries] == [
            (0, b"batch-a"),
            (3, b"batch-b"),
        ]

    asyncio.run(asyncio.wait_for(scenario(), 10))
