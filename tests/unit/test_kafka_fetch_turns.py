"""Big Fetch answers are built a slice per turn of the event loop (issue 31).

Ten connections that never read their answers, each with a 4 MiB Fetch, had their answers
built in the same turn of the loop (read from the log, re-based, encoded: some five copies
of 4 MiB each), whenever their connections were opened again: turns of 40-64 ms of CPU,
one after the other, and every well-behaved client beside them waited 200-800 ms
(tests/integration/test_hostile_clients.py). Now each `bytes_per_turn` read and each
encoding of a big answer is a turn of its own, round-robin with the other paced handlers
(handlers/loop_turns.py).

Measured here as CPU time, which a loaded machine does not stretch: the busiest turn of
the loop while ten such Fetches are answered at once, against all the CPU their answering
took. Before, one turn held 55-75% of it (the ten answers built in it); a turn now holds
about one slice of one answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator

from harness.kafka_memory_store import memory_storage
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.server import KafkaServer
from tests.unit.test_kafka_budgets_come_back import connect, produce, read_frame, request

VALUE = 1_000_000
RECORDS = 4
FETCHERS = 10
# the busiest turn's share of the CPU it took to answer ten Fetches at once
BUSIEST_SHARE = 0.25


def big_fetch(correlation: int) -> bytes:
    budget = RECORDS * VALUE + 1024
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": budget}
    body = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": budget,
        "isolation_level": 0,
        "session_id": 0,
        "topics": [{"topic": "sink", "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return request(1, 12, correlation, body)


async def drain_answer(reader: asyncio.StreamReader) -> int:
    """Read one answer 64 KiB at a time (the client's side of the loop stays cheap)."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    left = size
    while left:
        chunk = await reader.read(min(left, 64 * 1024))
        if not chunk:
            raise ConnectionError("closed mid-answer")
        left -= len(chunk)
    return size


@contextlib.asynccontextmanager
async def serving(records: int, size: int) -> AsyncIterator[tuple[str, int]]:
    """A listener on the in-memory store whose topic "sink" holds `records` records of
    `size` bytes, one batch each; its address."""
    server = KafkaServer(KafkaSection(port=0), memory_storage())
    await server.start()
    try:
        reader, writer = await connect(server.address)
        for number in range(records):
            writer.write(produce(number, "sink", bytes([number]) * size))
            await read_frame(reader)
        writer.close()
        yield server.address
    finally:
        await server.stop()


async def busiest_turn(fetchers: int, address: tuple[str, int]) -> tuple[float, float, int]:
    """The most CPU one turn of the loop took while `fetchers` connections had their 4 MB
    Fetch answered, the CPU all the turns took, and the smallest answer's size."""
    clients = [await connect(address) for _ in range(fetchers)]
    done = asyncio.Event()
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        last = time.thread_time()
        while not done.is_set():
            await asyncio.sleep(0)  # once per turn of the loop
            now = time.thread_time()
            worst = max(worst, now - last)
            last = now

    started = time.thread_time()
    probing = asyncio.create_task(probe())
    try:
        for _, writer in clients:
            writer.write(big_fetch(7))
        async with asyncio.timeout(60):
            sizes = await asyncio.gather(*(drain_answer(reader) for reader, _ in clients))
    finally:
        done.set()
        await probing
        total = time.thread_time() - started
        for _, writer in clients:
            writer.close()
    return worst, total, min(sizes)


def test_ten_big_fetches_share_the_loop_a_slice_at_a_time() -> None:
    async def scenario() -> tuple[float, float, int]:
        async with serving(RECORDS, VALUE) as address:
            await busiest_turn(1, address)  # warm: first allocations, code paths
            return await busiest_turn(FETCHERS, address)

    busiest, total, size = asyncio.run(scenario())
    print(f"busiest turn: {busiest * 1000:.1f} ms of the {total * 1000:.0f} ms of CPU")
    assert size > RECORDS * VALUE, f"each answer holds the {RECORDS} records ({size} B)"
    assert busiest <= BUSIEST_SHARE * total, (
        f"one turn of the loop took {busiest * 1000:.1f} ms of the {total * 1000:.0f} ms of "
        f"CPU that answering {FETCHERS} Fetches of 4 MB took"
    )


def test_a_big_fetch_read_in_slices_still_fills_its_budget() -> None:
    """Slicing the read must not shorten the answer: records of 100 KB do not add up to a
    slice exactly, and a slice that stopped short of `bytes_per_turn` only because the
    next record would not fit is not the end of the partition."""
    small, count = 100_000, 30

    async def scenario() -> int:
        async with serving(count, small) as address:
            reader, writer = await connect(address)
            writer.write(big_fetch(99))  # a budget of 4 MB + 1 KiB: all 30 records fit
            size = await drain_answer(reader)
            writer.close()
            return size

    size = asyncio.run(scenario())
    assert size > count * small, f"the answer holds all {count} records ({size} B)"
