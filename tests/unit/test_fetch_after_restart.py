"""A Fetch after a restart (issue 32): its partitions' logs are opened together, each
partition's read from Pulsar is started before the first is read, and once a Fetch has its
min_bytes it takes only what is at hand.

Traced on the bench (bench/cold_fetch.py, 200,000 records in 3 partitions): the first Fetch
after a restart opened the three partition logs one after another (each a few round trips
to the broker and a catch-up from its last checkpoint), then read the first partition's
history (a reader opened, its first entries waited for, made into batches), and only then
opened the second partition's reader: 170-250 ms before the client got its first answer,
of 360-550 ms in all at load 4-8.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harness.kafka_memory_store import MemoryPartitionLog
from pulsar_gateway.gateway.messages import MORE, SEQ, StoredMessage
from pulsar_gateway.handlers.kafka.port import StorageError, TopicRecord
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from tests.unit.test_fetch_limits import fetch_body, fill, sizes
from tests.unit.test_kafka_apis import Broker, fetched


def test_a_fetch_opens_its_partitions_logs_together() -> None:
    """Each open waits (here until all three are under way, at most 5 s): one after
    another, the first open waited out its deadline alone."""

    async def scenario() -> None:
        broker = Broker(default_partitions=3)
        for partition in range(3):
            await fill(broker, "orders", [[b"v%d" % partition]], partition)
        topics: Any = broker.storage.topics
        original = topics.partition_of
        under_way: list[int] = []
        all_three = asyncio.Event()
        most = 0

        async def partition_of(record: TopicRecord, index: int) -> MemoryPartitionLog:
            nonlocal most
            under_way.append(index)
            most = max(most, len(under_way))
            if len(under_way) == 3:
                all_three.set()
            try:
                await asyncio.wait_for(all_three.wait(), 5)
            except TimeoutError:
                pass
            finally:
                under_way.remove(index)
            return await original(record, index)

        topics.partition_of = partition_of
        body = fetch_body([("orders", p, 0, 1 << 20) for p in range(3)])
        response = await broker.call(ApiKey.FETCH, 12, body)
        partitions = response["responses"][0]["partitions"]
        assert [p["error_code"] for p in partitions] == [ErrorCode.NONE] * 3
        assert [fetched(p) for p in partitions] == [[(0, b"v%d" % p)] for p in range(3)]
        assert most == 3

    asyncio.run(scenario())


def test_a_partition_that_cannot_be_opened_is_a_storage_error_beside_the_others() -> None:
    async def scenario() -> None:
        broker = Broker(default_partitions=2)
        await fill(broker, "orders", [[b"v"]], 1)
        topics: Any = broker.storage.topics
        original = topics.partition_of

        async def partition_of(record: TopicRecord, index: int) -> MemoryPartitionLog:
            if index == 0:
                raise StorageError("the broker is away")
            return await original(record, index)

        topics.partition_of = partition_of
        body = fetch_body([("orders", 0, 0, 1 << 20), ("orders", 1, 0, 1 << 20)])
        response = await broker.call(ApiKey.FETCH, 12, body)
        partitions = response["responses"][0]["partitions"]
        assert partitions[0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert partitions[1]["error_code"] == ErrorCode.NONE
        assert fetched(partitions[1]) == [(0, b"v")]

    asyncio.run(scenario())


class _Stream:
    """A reader over fixed messages; it hands nothing out until `go` is set."""

    def __init__(self, messages: list[StoredMessage], go: asyncio.Event) -> None:
        self.messages = messages
        self.go = go

    async def read_batch(self, limit: int, **_: Any) -> list[StoredMessage]:
        await self.go.wait()
        batch, self.messages = self.messages[:limit], self.messages[limit:]
        return batch

    async def close(self) -> None:
        pass


class _Backend:
    def __init__(self, messages: list[StoredMessage]) -> None:
        self.go = asyncio.Event()
        self.stream = _Stream(messages, self.go)
        self.opened = 0

    async def open_log_reader(self, *_: Any, **__: Any) -> _Stream:
        self.opened += 1
        return self.stream


def _history_only() -> tuple[PartitionLog, _Backend]:
    """A log of 50 stored messages (one record each), none in its tail: reads go to history."""
    messages = [StoredMessage((1, i, -1), b"h" * 100, "", {}, 0, 1) for i in range(50)]
    backend = _Backend(messages)
    log = PartitionLog(backend, None, "t")  # type: ignore[arg-type]
    log.next_offset = 50
    return log, backend


def test_a_prepared_read_opens_its_reader_before_it_is_asked_and_the_read_uses_it() -> None:
    async def scenario() -> None:
        log, backend = _history_only()
        log.prepare_read(10, 100_000)
        log.prepare_read(10, 100_000)  # once per offset
        for _ in range(200):  # the reader is opened without a read asking
            if backend.opened:
                break
            await asyncio.sleep(0.01)
        assert backend.opened == 1
        backend.go.set()  # the broker sends
        entries = await log.read(10, 100_000)
        assert [entry.offset for entry in entries] == list(range(10, 50))
        assert backend.opened == 1  # the prepared reader, nothing opened again
        log.prepare_read(50, 100_000)  # the end of the log: nothing to prepare
        log.prepare_read(60, 100_000)  # past it: nothing either
        await asyncio.sleep(0)
        assert backend.opened == 1

    asyncio.run(scenario())


def test_a_log_closed_while_a_read_is_prepared_leaves_no_reader_open() -> None:
    async def scenario() -> None:
        opening = asyncio.Event()
        closed: list[bool] = []

        class Stream(_Stream):
            async def close(self) -> None:
                closed.append(True)

        class Backend:
            async def open_log_reader(self, *_: Any, **__: Any) -> Stream:
                opening.set()
                return Stream([], asyncio.Event())  # opened; never sends

        log = PartitionLog(Backend(), None, "t")  # type: ignore[arg-type]
        log.next_offset = 50
        log.prepare_read(0, 100_000)
        await asyncio.wait_for(opening.wait(), 5)
        await log.close()
        assert closed == [True]

    asyncio.run(scenario())


def _log_of(broker: Broker, partition: int) -> MemoryPartitionLog:
    topics: Any = broker.storage.topics
    (log,) = [log for name, log in topics.logs.items() if name.endswith(f"-partition-{partition}")]
    return log


def test_a_fetch_that_has_its_min_bytes_takes_no_partition_whose_entries_are_on_their_way() -> None:
    """Partition 1's entries are on their way from storage (and never come here): the Fetch
    answers with partition 0's record and none of partition 1's, instead of waiting for
    them (the first Fetch after a restart waited for every partition's reader)."""

    async def scenario() -> None:
        broker = Broker(default_partitions=2)
        for partition in range(2):
            await fill(broker, "orders", [[b"v%d" % partition]], partition)
        late = _log_of(broker, 1)
        late.arriving = asyncio.Event()
        body = fetch_body([("orders", 0, 0, 1 << 20), ("orders", 1, 0, 1 << 20)])
        response = await asyncio.wait_for(broker.call(ApiKey.FETCH, 12, body), 30)
        first, second = response["responses"][0]["partitions"]
        assert fetched(first) == [(0, b"v0")]
        assert fetched(second) == []
        assert (second["error_code"], second["high_watermark"]) == (ErrorCode.NONE, 1)

    asyncio.run(scenario())


def test_a_fetch_short_of_its_min_bytes_waits_for_entries_on_their_way() -> None:
    async def scenario() -> None:
        broker = Broker(default_partitions=2)
        for partition in range(2):
            await fill(broker, "orders", [[b"v%d" % partition]], partition)
        alone = await broker.call(ApiKey.FETCH, 12, fetch_body([("orders", 0, 0, 1 << 20)]))
        late = _log_of(broker, 1)
        late.arriving = asyncio.Event()
        body = fetch_body([("orders", 0, 0, 1 << 20), ("orders", 1, 0, 1 << 20)])
        body.update(min_bytes=sizes(alone)[0] + 1, max_wait_ms=60_000)
        call = asyncio.create_task(broker.call(ApiKey.FETCH, 12, body))
        for _ in range(100):
            await asyncio.sleep(0)
        assert not call.done()  # partition 0's record alone is short of min_bytes
        late.arriving.set()
        response = await asyncio.wait_for(call, 30)
        partitions = response["responses"][0]["partitions"]
        assert [fetched(p) for p in partitions] == [[(0, b"v0")], [(0, b"v1")]]

    asyncio.run(scenario())


def test_a_read_without_wait_leaves_entries_on_their_way_for_the_next_read() -> None:
    async def scenario() -> None:
        log, backend = _history_only()
        assert await log.read(10, 100_000, wait=False) == []  # and a reader is opened
        for _ in range(100):
            await asyncio.sleep(0)
        assert backend.opened == 1
        assert await log.read(10, 100_000, wait=False) == []  # still on its way
        backend.go.set()  # the broker sends
        entries = await log.read(10, 100_000)
        assert [entry.offset for entry in entries] == list(range(10, 50))
        assert backend.opened == 1  # the reader opened for the first read
        await log.close()

    asyncio.run(scenario())


class _Parts:
    """A reader handing out `first`, then `rest` only once `go` is set: a read with a
    timeout of 0 gets nothing before that."""

    def __init__(self, first: list[StoredMessage], rest: list[StoredMessage]) -> None:
        self.parts = [first, rest]
        self.go = asyncio.Event()

    async def read_batch(self, limit: int, timeout: float | None = None, **_: Any) -> Any:
        if len(self.parts) == 1 and not self.go.is_set():
            if timeout == 0:
                return []
            await self.go.wait()
        return self.parts.pop(0) if self.parts else []

    async def close(self) -> None:
        pass


def test_a_read_without_wait_never_ends_inside_a_batch() -> None:
    """Messages 0-1 are one record batch each, 2-3 one batch; 3 comes later: a read that
    takes what is at hand still waits for it rather than hand out part of a batch."""

    async def scenario() -> None:
        stamps = ["0", "1", "2" + MORE, "3"]
        messages = [
            StoredMessage((1, i, -1), b"v", "", {SEQ: stamp}, 0, 1, "gw-a.b")
            for i, stamp in enumerate(stamps)
        ]
        stream = _Parts(messages[:3], messages[3:])

        class Backend:
            async def open_log_reader(self, *_: Any, **__: Any) -> _Parts:
                return stream

        log = PartitionLog(Backend(), None, "t")  # type: ignore[arg-type]
        log.next_offset = 4
        log.prepare_read(0, 100_000)
        for _ in range(100):  # the prepared reader reads ahead what is at hand
            await asyncio.sleep(0)
        read = asyncio.create_task(log.read(0, 100_000, wait=False))
        for _ in range(100):
            await asyncio.sleep(0)
        assert not read.done()  # waiting for the batch's rest
        stream.go.set()
        assert [entry.offset for entry in await read] == [0, 1, 2, 3]
        await log.close()

    asyncio.run(scenario())
