"""Idempotent producer state that outlives the gateway (issue 10, item 3), and Produce's
timeout (item 1): on the memory store through the Produce handler, and the log-side index
the Pulsar partition log rebuilds the state with."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from harness.kafka_memory_store import MemoryPartitionLog
from pulsar_gateway.gateway.messages import RECORDS, OutMessage, StoredMessage
from pulsar_gateway.handlers.kafka.idempotence import ProducerSequences
from pulsar_gateway.handlers.kafka.port import ProducerBatch, ProducerSnapshot, ProducerStamp
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.storage.kafka.producer_state import ProducerStateIndex, stamp
from tests.unit.test_kafka_apis import TOPIC, Broker

PARTITION = TOPIC + "-partition-0"


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_a_retry_reaching_a_restarted_gateway_is_stored_once() -> None:
    async def scenario() -> None:
        broker = Broker()
        batch = {"producer_id": 7, "producer_epoch": 0}
        first = await broker.produce("orders", [b"a", b"b"], **batch, base_sequence=0)
        second = await broker.produce("orders", [b"c"], **batch, base_sequence=2)
        broker.context.sequences = ProducerSequences()  # restarted: nothing in memory
        again = await broker.produce("orders", [b"a", b"b"], **batch, base_sequence=0)
        assert again["error_code"] == ErrorCode.NONE
        assert again["base_offset"] == first["base_offset"] == 0
        assert (await broker.produce("orders", [b"c"], **batch, base_sequence=2))[
            "base_offset"
        ] == second["base_offset"]
        gap = await broker.produce("orders", [b"x"], **batch, base_sequence=9)
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        third = await broker.produce("orders", [b"d"], **batch, base_sequence=3)
        assert third["error_code"] == ErrorCode.NONE and third["base_offset"] == 3
        fenced = await broker.produce("orders", [b"y"], producer_id=7, producer_epoch=1)
        assert fenced["error_code"] == ErrorCode.NONE  # a new epoch starts at any sequence
        broker.context.sequences = ProducerSequences()
        old = await broker.produce("orders", [b"z"], **batch, base_sequence=4)
        assert old["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        log = broker.storage.topics.logs[PARTITION]  # type: ignore[attr-defined]
        assert [entry.message.payload for entry in log.entries] == [b"a", b"b", b"c", b"d", b"y"]

    run(scenario)


def test_a_new_owner_restores_a_producer_from_the_log_s_true_end() -> None:
    """Issue 31: a worker killed with -9, the partition's new owner restored an idempotent
    producer from a view of the log that lacked its last acknowledged batch (sequence 40):
    it answered the next batch OUT_OF_ORDER_SEQUENCE_NUMBER ("expected sequence 40") and
    would have stored a retry of batch 40 as new, so librdkafka's resend put a record in
    the log twice. The view here lags the log as that one did; the new owner must read the
    log to its end before it restores the producer, and only once."""

    async def scenario() -> None:
        broker = Broker()
        batch = {"producer_id": 1025, "producer_epoch": 0}
        for sequence in range(40):  # acknowledged by the old owner
            answer = await broker.produce(
                "orders", [b"%d" % sequence], **batch, base_sequence=sequence
            )
            assert answer["error_code"] == ErrorCode.NONE
        log = broker.storage.topics.logs[PARTITION]  # type: ignore[attr-defined]
        log.view_lags = True  # what is stored from now on the new owner's view lacks
        fortieth = await broker.produce("orders", [b"40"], **batch, base_sequence=40)
        assert fortieth["error_code"] == ErrorCode.NONE and fortieth["base_offset"] == 40
        assert log.producer_state(1025).batches[-1].last_sequence == 39  # the lag
        broker.context.sequences = ProducerSequences()  # the new owner: nothing live
        ends = log.ends_reached
        # librdkafka retries batch 40 (its answer was lost with the old owner) and goes on
        retried = await broker.produce("orders", [b"40"], **batch, base_sequence=40)
        assert retried["error_code"] == ErrorCode.NONE and retried["base_offset"] == 40
        after = await broker.produce("orders", [b"41"], **batch, base_sequence=41)
        assert after["error_code"] == ErrorCode.NONE and after["base_offset"] == 41
        values = [entry.message.payload for entry in log.entries]
        assert values == [b"%d" % n for n in range(42)], "a record stored twice"
        # one read to the end for the partition, none per produce once it is caught up
        more = await broker.produce("orders", [b"42"], **batch, base_sequence=42)
        assert more["error_code"] == ErrorCode.NONE
        other = await broker.produce("orders", [b"x"], producer_id=2049, producer_epoch=0)
        assert other["error_code"] == ErrorCode.NONE
        assert log.ends_reached == ends + 1

    run(scenario)


def test_a_next_batch_after_a_takeover_is_in_order() -> None:
    """The other half of issue 31: the first batch the new owner sees is the next one (41),
    and the lagging view said 40 was expected: OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to an
    idempotent producer's in-order promise."""

    async def scenario() -> None:
        broker = Broker()
        batch = {"producer_id": 1025, "producer_epoch": 0}
        log = None
        for sequence in range(41):
            if sequence == 40:
                log = broker.storage.topics.logs[PARTITION]  # type: ignore[attr-defined]
                log.view_lags = True
            await broker.produce("orders", [b"%d" % sequence], **batch, base_sequence=sequence)
        broker.context.sequences = ProducerSequences()
        after = await broker.produce("orders", [b"41"], **batch, base_sequence=41)
        assert after["error_code"] == ErrorCode.NONE and after["base_offset"] == 41
        assert log is not None and len(log.entries) == 42

    run(scenario)


def test_memory_store_keeps_the_last_five_batches_per_epoch() -> None:
    async def scenario() -> None:
        log = MemoryPartitionLog("p0")
        for sequence in range(7):
            await log.append([OutMessage(b"v")], ProducerStamp(3, 0, sequence, sequence))
        state = log.producer_state(3)
        assert state is not None and state.epoch == 0
        assert [b.first_sequence for b in state.batches] == [2, 3, 4, 5, 6]
        assert state.batches[-1] == ProducerBatch(6, 6, 6)
        await log.append([OutMessage(b"v")], ProducerStamp(3, 1, 0, 0))
        assert log.producer_state(3) == ProducerSnapshot(1, (ProducerBatch(0, 0, 7),))
        assert log.producer_state(4) is None

    run(scenario)


def test_a_timed_out_produce_is_not_stored_twice_by_its_retry() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.produce("orders", [b"before"])
        log = broker.storage.topics.logs[PARTITION]  # type: ignore[attr-defined]
        log.stall = asyncio.Event()  # the backend stops answering
        batch = {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0}
        started = asyncio.get_running_loop().time()
        timed_out = await broker.produce("orders", [b"a", b"b"], timeout_ms=200, **batch)
        assert timed_out["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        assert asyncio.get_running_loop().time() - started < 2
        retry = await broker.produce("orders", [b"a", b"b"], timeout_ms=200, **batch)
        assert retry["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        log.stall.set()  # it answers again: the first attempt completes
        last = await broker.produce("orders", [b"a", b"b"], **batch)
        assert last["error_code"] == ErrorCode.NONE and last["base_offset"] == 1
        assert [entry.message.payload for entry in log.entries] == [b"before", b"a", b"b"]

    run(scenario)


def _stored(message: OutMessage, index: int) -> StoredMessage:
    return StoredMessage((1, index, -1), message.payload, "", dict(message.properties or {}), 0, 0)


def _store(index: ProducerStateIndex, messages: list[OutMessage], offset: int) -> None:
    for position, message in enumerate(messages):
        index.observe(_stored(message, offset + position), offset + position)


def test_the_log_index_learns_batches_from_their_stamps() -> None:
    three = [OutMessage(b"%d" % i, properties={"h": "1"}) for i in range(3)]
    batch = ProducerStamp(5, 2, 10, 12)
    stamped = stamp(three, batch)
    assert three[0].properties == {"h": "1"}  # the caller's messages are left alone
    index = ProducerStateIndex()
    _store(index, stamped[:2], 100)  # cut short by a crash: not stored whole
    assert index.get(5) == ProducerSnapshot(2, ())
    assert index.resume_from(batch) == (100, 2) and index.stored(batch) is None
    restored = ProducerStateIndex(index.snapshot())  # from a checkpoint taken meanwhile
    for replayed in (index, restored):
        _store(replayed, stamp(three, batch, skip=2), 102)  # the retry: only what is missing
        assert replayed.get(5) == ProducerSnapshot(2, (ProducerBatch(10, 12, 100),))
        assert replayed.stored(batch) == 100 and replayed.resume_from(batch) is None
    # a batch sent again from its first record starts over (the prefix is abandoned)
    again = ProducerStateIndex()
    _store(again, stamped[:1], 200)
    _store(again, stamped, 201)
    assert again.get(5) == ProducerSnapshot(2, (ProducerBatch(10, 12, 201),))
    # a resume that does not start where the batch was left is not counted
    _store(again, stamp(three, ProducerStamp(5, 2, 13, 15), skip=1), 204)
    assert again.resume_from(ProducerStamp(5, 2, 13, 15)) is None
    # one message holding the whole batch (the kafka entry format)
    whole = [OutMessage(b"batch", properties={RECORDS: "8"})]
    _store(index, stamp(whole, ProducerStamp(5, 2, 13, 20)), 105)
    assert index.get(5).batches[-1] == ProducerBatch(13, 20, 105)
    # an older epoch's stamp is fenced off; a newer one starts afresh
    _store(index, stamp([OutMessage(b"old")], ProducerStamp(5, 1, 21, 21)), 113)
    assert len(index.get(5).batches) == 2
    _store(index, stamp([OutMessage(b"new")], ProducerStamp(5, 3, 0, 0)), 114)
    assert index.get(5) == ProducerSnapshot(3, (ProducerBatch(0, 0, 114),))
    assert ProducerStateIndex(index.snapshot()).get(5) == index.get(5)
