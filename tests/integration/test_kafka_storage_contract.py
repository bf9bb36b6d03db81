"""The Kafka storage port's promises (handlers/kafka/port.py, docs/offsets.md), one set of
tests run against every engine (harness/storage_engines.py): the in-memory twin the unit
tests run the handlers on, and the Pulsar-backed storage through pulsar-client and through
the gateway's own wire client. The unit tests trust the twin to behave as the gateway does;
this suite is what makes that trust checked rather than copied by hand.

A Pulsar engine is reopened as a restarted gateway would be (a new backend and metadata
store, checkpoints every 10 offsets so that a reopened partition resumes from one), on one
embedded broker per module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from harness.storage_engines import ENGINES, StorageEngine
from pulsar_gateway.gateway.messages import RECORDS, OutMessage
from pulsar_gateway.gateway.topic_names import partition_topic
from pulsar_gateway.handlers.kafka.port import (
    CommittedOffset,
    InvalidPartitions,
    KafkaStorage,
    OffsetOutOfRange,
    ProducerBatch,
    ProducerSnapshot,
    ProducerStamp,
    TopicExists,
    TransactionState,
    UnknownTopic,
)
from pulsar_gateway.kafka_codec.entry_format import records_of
from pulsar_gateway.kafka_codec.record_batch import encode_batch
from pulsar_gateway.storage.kafka.subscription_position import message_id_at

ALL = 1 << 30  # a read's byte budget that holds everything these tests store

Scenario = Callable[[StorageEngine], Awaitable[None]]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> StorageEngine:
    if request.param == "memory":
        return StorageEngine(request.param, None)
    return StorageEngine(request.param, request.getfixturevalue("broker_url"))


def run(scenario: Scenario, engine: StorageEngine) -> None:
    asyncio.run(asyncio.wait_for(scenario(engine), 60))


def topic(engine: StorageEngine, label: str) -> str:
    return f"persistent://public/default/{label}-{engine.namespace.rsplit('-', 1)[1]}"


async def append_all(storage: KafkaStorage, name: str, payloads: list[list[bytes]]) -> list[int]:
    """Each inner list appended as one batch to partition 0, all called before any is
    awaited; their base offsets."""
    record = storage.topics.get(name)
    assert record is not None
    log = await storage.topics.partition_of(record, 0)
    pending = [log.append([OutMessage(p) for p in batch]) for batch in payloads]
    return list(await asyncio.gather(*pending))


async def read_all(storage: KafkaStorage, name: str, offset: int = 0) -> list[tuple[int, bytes]]:
    record = storage.topics.get(name)
    assert record is not None
    log = await storage.topics.partition_of(record, 0)
    out: list[tuple[int, bytes]] = []
    while offset < log.next_offset:
        entries = await log.read(offset, ALL)
        assert entries, f"nothing read at {offset} below {log.next_offset}"
        out += [(entry.offset, entry.message.payload or b"") for entry in entries]
        offset = entries[-1].offset + 1
    return out


def test_topics_are_created_grown_configured_and_deleted(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "topics")
        async with engine.open() as storage:
            topics = storage.topics
            created = await topics.create(name, 2, {"retention.ms": "1000"})
            assert (created.name, created.partitions, created.log_start) == (name, 2, [0, 0])
            with pytest.raises(TopicExists):
                await topics.create(name, 2)
            with pytest.raises(InvalidPartitions):
                await topics.create(topic(engine, "none"), 0)
            with pytest.raises(InvalidPartitions):
                await topics.add_partitions(name, 2)
            assert (await topics.add_partitions(name, 3)).partitions == 3
            await topics.replace_configs(name, {"cleanup.policy": "delete"})
            assert topics.total_partitions() == 3
        async with engine.open() as storage:  # a restart keeps all of it
            record = storage.topics.get(name)
            assert record is not None
            assert (record.partitions, record.topic_id) == (3, created.topic_id)
            assert record.configs == {"cleanup.policy": "delete"}
            assert [r.name for r in storage.topics.list()] == [name]
            await storage.topics.delete(name)
            assert storage.topics.get(name) is None
            assert storage.topics.list() == []
            assert storage.topics.total_partitions() == 0
            with pytest.raises(UnknownTopic):
                await storage.topics.delete(name)
            with pytest.raises(UnknownTopic):
                await storage.topics.add_partitions(name, 4)

    run(scenario, engine)


def test_offsets_are_dense_and_a_stored_batch_takes_one_per_record(
    engine: StorageEngine,
) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "dense")
        async with engine.open() as storage:
            record = await storage.topics.create(name, 1)
            log = await storage.topics.partition_of(record, 0)
            assert (log.log_start, log.next_offset) == (0, 0)
            assert await log.read(0, ALL) == []
            assert await log.append([OutMessage(b"a"), OutMessage(b"b"), OutMessage(b"c")]) == 0
            assert await log.append([OutMessage(b"d")]) == 3
            # one entry holding a whole Kafka batch of four records (the `kafka` entry format)
            held = OutMessage(b"four", properties={RECORDS: "4"})
            assert await log.append([held]) == 4
            assert await log.append([OutMessage(b"e")]) == 8
            assert log.next_offset == 9
            entries = await log.read(0, ALL)
            assert [(e.offset, e.message.payload) for e in entries] == [
                (0, b"a"),
                (1, b"b"),
                (2, b"c"),
                (3, b"d"),
                (4, b"four"),
                (8, b"e"),
            ]
            # a read from inside the batch starts at the entry that holds the offset
            inside = await log.read(6, 1)
            assert (inside[0].offset, inside[0].message.payload) == (4, b"four")
            assert await log.read(9, ALL) == []
            with pytest.raises(OffsetOutOfRange):
                await log.read(10, ALL)

    run(scenario, engine)


def test_appends_are_stored_whole_in_call_order_and_offsets_stay_after_a_restart(
    engine: StorageEngine,
) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "stable")
        batches = [[b"%d.%d" % (n, i) for i in range(n % 4 + 1)] for n in range(12)]
        flat = [payload for batch in batches for payload in batch]
        async with engine.open() as storage:
            await storage.topics.create(name, 1)
            bases = await append_all(storage, name, batches)
            # called one after another, so stored in that order, each batch whole
            assert bases == [sum(len(b) for b in batches[:n]) for n in range(len(batches))]
            before = await read_all(storage, name)
            assert before == list(enumerate(flat))
        async with engine.open() as storage:
            assert await read_all(storage, name) == before
            # a read in the middle, below any tail a reopened partition holds
            assert (await read_all(storage, name, 17))[0] == before[17]
            more = await append_all(storage, name, [[b"after"]])
            assert more == [len(flat)]
        async with engine.open() as storage:
            assert await read_all(storage, name) == [*before, (len(flat), b"after")]

    run(scenario, engine)


def test_a_long_poll_wakes_when_the_log_grows(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "wake")
        async with engine.open() as storage:
            record = await storage.topics.create(name, 1)
            log = await storage.topics.partition_of(record, 0)
            grown = log.data_future()
            await asyncio.sleep(0)
            assert not grown.done()
            await log.append([OutMessage(b"x")])
            await asyncio.wait_for(grown, 10)

    run(scenario, engine)


def test_delete_records_moves_the_log_start_up_only(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "start")
        async with engine.open() as storage:
            await storage.topics.create(name, 1)
            await append_all(storage, name, [[b"%d" % i for i in range(5)]])
            assert await storage.topics.delete_records(name, 0, 3) == 3
            assert await storage.topics.delete_records(name, 0, 1) == 3  # never down
            record = storage.topics.get(name)
            assert record is not None and record.start_of(0) == 3
            log = await storage.topics.partition_of(record, 0)
            assert log.log_start == 3
            with pytest.raises(OffsetOutOfRange):
                await log.read(2, ALL)
            assert (await log.read(3, ALL))[0].offset == 3
        async with engine.open() as storage:
            record = storage.topics.get(name)
            assert record is not None and record.start_of(0) == 3
            assert await read_all(storage, name, 3) == [(3, b"3"), (4, b"4")]

    run(scenario, engine)


def test_an_idempotent_producers_batches_are_kept_with_the_log(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "producer")
        async with engine.open() as storage:
            record = await storage.topics.create(name, 1)
            log = await storage.topics.partition_of(record, 0)
            await log.append([OutMessage(b"plain")])
            first = ProducerStamp(producer_id=7, epoch=2, first_sequence=0, last_sequence=2)
            base = await log.append([OutMessage(b"p%d" % i) for i in range(3)], first)
            assert base == 1
            second = ProducerStamp(producer_id=7, epoch=2, first_sequence=3, last_sequence=3)
            assert await log.append([OutMessage(b"p3")], second) == 4
            expected = ProducerSnapshot(2, (ProducerBatch(0, 2, 1), ProducerBatch(3, 3, 4)))
            assert log.producer_ids() == [7]
            assert log.producer_state(7) == expected
            assert log.producer_state(8) is None
        async with engine.open() as storage:
            record = storage.topics.get(name)
            assert record is not None
            log = await storage.topics.partition_of(record, 0)
            assert log.producer_state(7) == expected

    run(scenario, engine)


def test_committed_offsets_are_durable_and_go_with_their_topic(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        name, other = topic(engine, "committed"), topic(engine, "kept")
        p0, p1, kept = partition_topic(name, 0), partition_topic(name, 1), partition_topic(other, 0)
        async with engine.open() as storage:
            await storage.topics.create(name, 2)
            await storage.topics.create(other, 1)
            offsets = storage.offsets
            assert offsets.get("g", p0) is None and not offsets.has_offsets("g")
            await offsets.commit("g", {p0: CommittedOffset(5, "m"), p1: CommittedOffset(7)})
            await offsets.commit("g", {p0: CommittedOffset(6, "n")})
            await offsets.commit("h", {kept: CommittedOffset(1)})
            await offsets.save_group_state("g", 3, "consumer")
        async with engine.open() as storage:
            offsets = storage.offsets
            got = offsets.get("g", p0)
            assert got is not None and (got.offset, got.metadata) == (6, "n")
            assert {t: c.offset for t, c in offsets.offsets("g").items()} == {p0: 6, p1: 7}
            assert sorted(offsets.groups_with_offsets()) == ["g", "h"]
            assert offsets.group_state("g") == (3, "consumer")
            await offsets.delete("g", [p1])
            assert list(offsets.offsets("g")) == [p0]
            # a deleted topic takes its partitions' offsets along, in every group
            await storage.topics.delete(name)
            assert offsets.offsets("g") == {} and not offsets.has_offsets("g")
            assert list(offsets.offsets("h")) == [kept]
            await offsets.delete_group("h")
            assert offsets.groups_with_offsets() == []
        async with engine.open() as storage:
            assert storage.offsets.groups_with_offsets() == []

    run(scenario, engine)


def test_producer_ids_are_never_handed_out_twice(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        async with engine.open() as storage:
            first = [await storage.producer_ids.next_id() for _ in range(3)]
        async with engine.open() as storage:
            later = [await storage.producer_ids.next_id() for _ in range(3)]
        handed = first + later
        assert len(set(handed)) == 6 and all(i >= 0 for i in handed)
        assert first == sorted(first) and later == sorted(later)

    run(scenario, engine)


def test_transaction_state_is_durable_and_saved_as_it_was(engine: StorageEngine) -> None:
    async def scenario(engine: StorageEngine) -> None:
        async with engine.open() as storage:
            transactions = storage.transactions
            assert transactions is not None and transactions.get("tx") is None
            state = TransactionState("tx", 11, 0, 60_000, "Ongoing", 1234, [("t-partition-0", 0)])
            await transactions.save(state)
            state.state = "PrepareCommit"  # not saved: the store keeps what `save` was given
            saved = transactions.get("tx")
            assert saved is not None and saved.state == "Ongoing"
        async with engine.open() as storage:
            assert storage.transactions is not None
            saved = storage.transactions.get("tx")
            assert saved is not None
            assert (saved.producer_id, saved.state, saved.start_ms) == (11, "Ongoing", 1234)
            assert [tuple(p) for p in saved.partitions] == [("t-partition-0", 0)]
            assert [s.transactional_id for s in storage.transactions.all()] == ["tx"]

    run(scenario, engine)


async def records_from(log: Any, offset: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from `offset` on, whatever shape the log reads
    them in (a message per record, or a batch standing for several)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    while offset < log.next_offset:
        entries = await log.read(offset, ALL)
        assert entries, f"nothing read at {offset} below {log.next_offset}"
        for entry in entries:
            for stored in records_of(entry):
                if stored.offset >= offset:
                    out.append((stored.offset, stored.key, stored.value))
        offset = out[-1][0] + 1
    return out


def test_a_batch_appended_with_its_kafka_bytes_reads_the_same_after_a_restart(
    engine: StorageEngine,
) -> None:
    """An append handing over the Kafka batch its messages are (`encoded`, as Produce does
    for the `pulsar` format): through the wire client the tailer numbers such an entry as ONE
    item (docs/offsets.md, "A batch the gateway wrote is numbered as one"); a restarted
    partition reads the same entries from storage message by message. Both must give the
    same records at the same offsets, Pulsar ids and idempotent producer state."""

    async def scenario(engine: StorageEngine) -> None:
        name = topic(engine, "produced")
        sizes = [3, 1, 4, 2, 5, 3, 2, 4, 1, 3, 6, 2]

        def batch(n: int, size: int) -> tuple[list[OutMessage], memoryview]:
            pairs = [(b"k%d" % i, b"v%d.%d" % (n, i)) for i in range(size)]
            stamp = 1_700_000_000_000 + n
            raw = encode_batch(0, [(i, stamp, k, v, []) for i, (k, v) in enumerate(pairs)])
            return [OutMessage(v, k.decode(), None, stamp) for k, v in pairs], memoryview(raw)

        sequence = 0
        async with engine.open() as storage:
            record = await storage.topics.create(name, 1)
            log = await storage.topics.partition_of(record, 0)
            assert await log.append([OutMessage(b"lone", "k")]) == 0
            bases = []
            for n, size in enumerate(sizes[:6]):  # one at a time
                messages, raw = batch(n, size)
                producer = None
                if n % 2:
                    producer = ProducerStamp(5, 0, sequence, sequence + size - 1)
                    sequence += size
                bases.append(await log.append(messages, producer, raw))
            # the rest called before any is awaited: appends wait for the tailer together
            pending = [
                log.append(*batch(n, size)[:1], None, batch(n, size)[1])
                for n, size in enumerate(sizes[6:], 6)
            ]
            bases += list(await asyncio.gather(*pending))
            assert bases == [1 + sum(sizes[:n]) for n in range(len(sizes))]
            assert log.next_offset == 1 + sum(sizes)
            before = await records_from(log, 0)
            assert [offset for offset, _, _ in before] == list(range(log.next_offset))
            assert before[1 + 3] == (4, b"k0", b"v1.0")
            inside = await records_from(log, 6)  # from inside a batch: its records from there
            assert inside == before[6:]
            ids = []
            if engine.restarts:
                ids = [await message_id_at(log, o) for o in range(log.next_offset)]
                assert len(set(ids)) == len(ids) and ids == sorted(ids)
            state = log.producer_state(5)
            assert state is not None and [b.base_offset for b in state.batches] == [4, 9, 16]
        async with engine.open() as storage:
            record = storage.topics.get(name)
            assert record is not None
            log = await storage.topics.partition_of(record, 0)
            assert await records_from(log, 0) == before
            assert await records_from(log, 6) == before[6:]
            if engine.restarts:
                assert [await message_id_at(log, o) for o in range(log.next_offset)] == ids
            assert log.producer_state(5) == state

    run(scenario, engine)
