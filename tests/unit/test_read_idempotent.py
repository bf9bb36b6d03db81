"""An idempotent producer's entries read from storage as ONE Kafka batch too (issue 32: fetch
after a restart; storage/kafka/read_batches.py). Java clients 3.0+ are idempotent by
default, so every message of most producers' entries carries the producer's stamp
(`producer_state.PRODUCER`, a send's first also `FROM`), and such an entry was read message
by message (bench/cold_fetch.py --idempotent: 10-15 µs of gateway CPU a record, 0.2-0.3x a
pulsar-client reader of the same data).

Read whole, the records are the message path's, the batch carries the producer id, epoch
and base sequence they were produced with (as the tail serves the produced batch before the
restart), the messages it stands for are those stored, and the producer state the tailer
rebuilds from it is the one the messages give: a retry after a restart is still known. A
transactional producer's entries too: a transactional batch, its transaction (and its abort)
known as the messages make it known."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from harness.split_entries import PRODUCER as PRODUCER_NAME
from harness.split_entries import PUBLISHED, split_entry
from pulsar_gateway.gateway.backend.native_writer import entries, prebuilt_entry
from pulsar_gateway.gateway.backend.wire.batch import BatchBuilder
from pulsar_gateway.gateway.messages import (
    RECORDS,
    SEQ,
    LogEntry,
    MessageKey,
    OutMessage,
    RecordMessages,
    StoredMessage,
)
from pulsar_gateway.handlers.kafka.port import ProducerBatch, ProducerSnapshot, ProducerStamp
from pulsar_gateway.kafka_codec import compression as codecs
from pulsar_gateway.kafka_codec.control_batch import TXN, mark_transactional, marker_message
from pulsar_gateway.kafka_codec.entry_format import encode_entries
from pulsar_gateway.kafka_codec.record_batch import HEADER_SIZE, decode_batches, encode_batch
from pulsar_gateway.kafka_codec.record_entry import record_messages
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from pulsar_gateway.storage.kafka.producer_state import (
    FROM,
    PRODUCER,
    SEQUENCE_WRAP,
    ProducerStateIndex,
    produced,
    stamp,
)
from pulsar_gateway.storage.kafka.read_batches import is_read_batch, kafka_batch, messages_of
from pulsar_gateway.storage.kafka.transaction_index import TransactionIndex
from tests.unit.test_read_batches import (
    _Backend,
    _Metadata,
    _one_by_one,
    _served,
    _TailedStream,
    headered_records,
    plain_records,
    repeating_records,
)

producers = st.builds(
    ProducerStamp,
    st.sampled_from([0, 42, 2**63 - 1]),
    st.sampled_from([0, 3, 2**15 - 1]),
    st.sampled_from([0, 100, SEQUENCE_WRAP - 3]),
    st.just(0),
)


def _producer_state(messages: list[StoredMessage], offset: int) -> tuple[dict, dict]:
    """What the tailer's producer state and transaction index make of `messages` numbered
    from `offset`."""
    producers = ProducerStateIndex()
    transactions = TransactionIndex()
    for message in messages:
        producers.observe(message, offset)
        transactions.observe(message, offset)
        offset += int(message.properties.get(RECORDS, 1))
    return producers.snapshot(), transactions.snapshot()


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(plain_records | repeating_records | headered_records, min_size=1, max_size=30),
    producers,
    st.none() | st.integers(0, 4),
    st.sampled_from([1 << 22, 400, 1_500]),
    st.booleans(),
)
def test_an_idempotent_entry_read_whole_serves_what_message_by_message_serves(
    records: list[OutMessage],
    producer: ProducerStamp,
    since: int | None,
    limit: int,
    transactional: bool,
) -> None:
    """A send's records as the Produce path stamps them (`stamp`, after `mark_transactional`
    for a `transactional` producer; `since`: records of the batch before them, a retry
    resuming a batch cut short; None: no `FROM`, as on the rest of a send), in one entry or
    cut by the entry size (`limit`), written `whole` as the partition log writes a Kafka
    batch: the parts that hold its start (`FROM`) or its end read whole."""
    count = len(records)
    if transactional:
        records = [dataclasses.replace(r) for r in records]
        mark_transactional(records, producer.producer_id, producer.epoch)
    skip = since or 0
    last = (producer.first_sequence + skip + count - 1) % SEQUENCE_WRAP
    producer = dataclasses.replace(producer, last_sequence=last)
    padding = [OutMessage(b"before", None, None, 1)] * skip
    stamped = list(stamp(padding + records, producer, skip))
    if since is None:
        first_properties = dict(stamped[0].properties or {})
        del first_properties[FROM]
        stamped[0] = dataclasses.replace(stamped[0], properties=first_properties)
    at = 0
    for entry in entries(stamped, 500, True, limit):
        first_index, n = at, entry.num_messages
        at += n
        if not entry.batched:
            continue
        made = kafka_batch((3, 4, 0), entry.payload, n, PUBLISHED, PRODUCER_NAME)
        one_by_one = split_entry((3, 4, 0), entry.payload, n)
        # the sequences told by `FROM` on the entry's first message, or by the batch's end
        assert (made is not None) == ((first_index == 0 and since is not None) or at == count)
        if made is None:
            continue
        assert _served(made, 50) == _one_by_one(one_by_one, 50)
        assert messages_of(made) == one_by_one
        [batch] = decode_batches(made.payload or b"")
        base = (producer.first_sequence + skip + first_index) % SEQUENCE_WRAP
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
            producer.producer_id,
            producer.epoch,
            base,
        )
        assert batch.is_transactional == transactional
        assert _producer_state([made], 50) == _producer_state(one_by_one, 50)


def test_stamps_of_no_one_send_are_read_message_by_message() -> None:
    """Stamps that do not say one send's sequences: two producers' (or batches') stamps,
    `FROM` on a later message or without a stamp, neither `FROM` nor the batch's end, a stamp
    that does not parse or that the count contradicts, a transaction's stamp that is not
    its producer's. The message path reads what they are."""

    def entry(*properties: dict[str, str]) -> tuple[bytes, int]:
        messages = [OutMessage(b"v%d" % i, "k", p, 5 + i) for i, p in enumerate(properties)]
        [built] = entries(messages, 0, True, 1 << 20)
        return built.payload, len(messages)

    builder = BatchBuilder()  # the batch's stamps all say "more follows"
    for index in range(3):
        builder.add_message(b"v", "k", {SEQ: f"{3 + index}+", PRODUCER: "9:0:0:8"}, 5)
    middle = (builder.build().payload, 3)
    a = {PRODUCER: "9:0:0:2"}
    odd = [
        entry({**a, FROM: "0"}, a, {PRODUCER: "9:0:3:5"}),  # two batches' stamps
        entry({**a, FROM: "0"}, a, {PRODUCER: "8:0:0:2"}),  # two producers'
        entry({**a, FROM: "0"}, {}, a),  # a message without it
        entry({**a, FROM: "0"}, {**a, FROM: "0"}, a),  # `FROM` on a later message
        middle,  # no `FROM` and more to follow: the middle of a batch cut in three
        entry({FROM: "0"}, {}, {}),  # `FROM` without a stamp
        entry({PRODUCER: "9:0:x:2", FROM: "0"}, *[{PRODUCER: "9:0:x:2"}] * 2),
        entry({PRODUCER: "9:0:0:9", FROM: "0"}, *[{PRODUCER: "9:0:0:9"}] * 2),  # 3, not 10
        entry({PRODUCER: "9:99999:0:2", FROM: "0"}, *[{PRODUCER: "9:99999:0:2"}] * 2),
        # a transaction's stamp not its producer's, or without one
        entry(*[{TXN: "8:0", **a, **({FROM: "0"} if i == 0 else {})} for i in range(3)]),
        entry(*[{TXN: "9:0"}] * 3),
    ]
    for payload, count in odd:
        assert kafka_batch((1, 1, 0), payload, count, PUBLISHED, PRODUCER_NAME) is None
        assert len(split_entry((1, 1, 0), payload, count)) == count


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(plain_records | headered_records, min_size=2, max_size=10), st.data())
def test_a_damaged_idempotent_entry_is_never_read_wrong(
    records: list[OutMessage], data: st.DataObject
) -> None:
    """Flipped or cut bytes in an idempotent producer's entry: None, or where the damage
    left a well-formed entry, the records and producer state the message path gives.
    (A middle message's `__gw.seq` is not read: the first and last tell, as without a
    producer, test_read_batches.py.)"""
    stamped = stamp(records, ProducerStamp(42, 3, 100, 99 + len(records)))
    payload = bytearray(entries(stamped, 0, True, 1 << 20)[0].payload)
    if data.draw(st.booleans()):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    else:
        del payload[data.draw(st.integers(0, len(payload) - 1)) :]
    made = kafka_batch((1, 1, 0), bytes(payload), len(records), PUBLISHED, PRODUCER_NAME)
    if made is None:
        return
    one_by_one = split_entry((1, 1, 0), bytes(payload), len(records))
    assert _producer_state([made], 0) == _producer_state(one_by_one, 0)
    try:
        expected = _one_by_one(one_by_one, 0)
    except UnicodeEncodeError:  # a key the message path cannot serve (as in test_read_batches)
        return
    assert _served(made, 0) == expected


@pytest.mark.parametrize("log_append_time", [False, True])
def test_a_topic_codec_or_log_append_time_keeps_the_producer(log_append_time: bool) -> None:
    records = [OutMessage(b"v" * 50, "k", None, 1_000 + i) for i in range(4)]
    stamped = stamp(records, ProducerStamp(42, 3, 100, 103))
    [entry] = entries(stamped, 0, True, 1 << 20)
    made = kafka_batch((1, 1, 0), entry.payload, 4, PUBLISHED, PRODUCER_NAME)
    assert made is not None
    data, count = encode_entries(
        [LogEntry(8, made)], codec=codecs.GZIP, log_append_time=log_append_time
    )
    [batch] = decode_batches(data)
    assert count == 4 and batch.base_offset == 8 and batch.attributes & 0x07 == codecs.GZIP
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 100)


# ---- after a restart, through a partition log ------------------------------------------------

BATCHES = 4  # Kafka batches of 10 records, producer 42 at epoch 3, sequences from 100


def _produced_entries() -> list[tuple[MessageKey, bytes, int]]:
    """The entries the Produce path writes for an idempotent producer's batches: each
    batch's bytes prebuilt into an entry (record_entry.py) and stamped (`stamp`), as
    `native_writer.prebuilt_entry` sends them."""
    raw = []
    for n in range(BATCHES):
        records = [
            (i, 1_700_000_000_000 + i, b"k%d" % (i % 3), b"v%d" % (n * 10 + i), [])
            for i in range(10)
        ]
        kafka = bytes(
            encode_batch(0, records, producer_id=42, producer_epoch=3, base_sequence=100 + 10 * n)
        )
        lazy = record_messages(kafka, 10, 1_700_000_000_000, 0, HEADER_SIZE)
        messages = stamp(lazy, ProducerStamp(42, 3, 100 + 10 * n, 109 + 10 * n))
        assert isinstance(messages, RecordMessages)  # noted, not made: the one pass
        prebuilt = messages.take_prebuilt()
        assert prebuilt is not None
        batch = produced(messages, kafka)
        entry = prebuilt_entry(prebuilt, messages, 1_000 + 10 * n, True, 1 << 20, batch)
        assert entry is not None
        raw.append(((7, n, 0), bytes(entry.payload), 10))
    return raw


EXPECTED_STATE = ProducerSnapshot(
    3, tuple(ProducerBatch(100 + 10 * n, 109 + 10 * n, 10 * n) for n in range(BATCHES))
)


EXPECTED_BATCHES = [(10 * n, 10, 42, 3, 100 + 10 * n) for n in range(BATCHES)]


def test_after_a_restart_the_tailer_serves_an_idempotent_batch_whole_and_knows_its_producer() -> (
    None
):
    """A restarted partition's tailer re-reads the producer's entries: each is one item in
    the tail, a fetch gets each as the batch produced (producer id, epoch and base
    sequence), and the producer state is what the messages give, so a retry of the last
    batch is still answered its base offset. Read message by message, the fetch got one
    batch of all 40 records and no producer."""

    async def scenario() -> None:
        log = PartitionLog(_Backend([]), _Metadata(), "t")  # type: ignore[arg-type]
        log._stream = _TailedStream(_produced_entries())  # type: ignore[assignment]
        task = asyncio.create_task(log._tail_loop())
        try:
            for _ in range(200):
                if log.next_offset == 10 * BATCHES:
                    break
                await asyncio.sleep(0.01)
            assert log.next_offset == 10 * BATCHES and log.tail_start == 0
            items = log._tail.read(0, 1 << 20)
            assert [e.offset for e in items if is_read_batch(e.message)] == [0, 10, 20, 30]
            data, count = encode_entries(await log.read(0, 1 << 20))
            assert count == 10 * BATCHES
            served = [
                (b.base_offset, len(b.records), b.producer_id, b.producer_epoch, b.base_sequence)
                for b in decode_batches(data)
            ]
            assert served == EXPECTED_BATCHES
            assert log.producer_state(42) == EXPECTED_STATE
            assert log._producers.stored(ProducerStamp(42, 3, 130, 139)) == 30
        finally:
            task.cancel()

    asyncio.run(scenario())


def test_a_history_read_serves_an_idempotent_batch_whole_with_its_producer() -> None:
    """Below the tail (a fetch after a restart reading history): the same batches."""

    async def scenario() -> None:
        backend = _Backend(_produced_entries(), per_read=2)
        log = PartitionLog(backend, None, "t")  # type: ignore[arg-type]
        log.next_offset = 10 * BATCHES
        read = await log.read(0, 1 << 20)
        assert all(is_read_batch(e.message) for e in read)
        data, count = encode_entries(read)
        served = [
            (b.base_offset, len(b.records), b.producer_id, b.producer_epoch, b.base_sequence)
            for b in decode_batches(data)
        ]
        assert count == 10 * BATCHES and served == EXPECTED_BATCHES
        await log.close()

    asyncio.run(scenario())


def test_after_a_restart_a_transaction_s_batches_are_served_whole_and_its_abort_known() -> None:
    """A transactional producer's entries (`TXN` on every record too), then its abort
    marker: after a restart each entry is one transactional batch with its producer, and
    the transaction index gives the aborted transaction the messages give (a read_committed
    consumer leaves out the same records)."""

    async def scenario() -> None:
        raw = []
        for n in range(2):
            records = [OutMessage(b"v%d" % i, "k", None, 1_000 + i) for i in range(10)]
            mark_transactional(records, 42, 3)
            stamped = stamp(records, ProducerStamp(42, 3, 10 * n, 10 * n + 9))
            [entry] = entries(stamped, 10 * n, True, 1 << 20)
            raw.append(((7, n, 0), bytes(entry.payload), 10))
        [marker] = entries([marker_message(42, 3, False, 2_000)], 20, True, 1 << 20)
        raw.append(((7, 2, 0), bytes(marker.payload), 1))
        log = PartitionLog(_Backend([]), _Metadata(), "t")  # type: ignore[arg-type]
        log._stream = _TailedStream(raw)  # type: ignore[assignment]
        task = asyncio.create_task(log._tail_loop())
        try:
            for _ in range(200):
                if log.next_offset == 21:
                    break
                await asyncio.sleep(0.01)
            assert log.next_offset == 21 and log.last_stable_offset == 21
            assert log.aborted_transactions(0, 21) == [(42, 0)]
            read = await log.read(0, 1 << 20)
            assert [is_read_batch(e.message) for e in read] == [True, True, False]
            data, count = encode_entries(read[:2])
            served = [
                (
                    b.base_offset,
                    b.is_transactional,
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                )
                for b in decode_batches(data)
            ]
            assert count == 20 and served == [(0, True, 42, 3, 0), (10, True, 42, 3, 10)]
        finally:
            task.cancel()

    asyncio.run(scenario())
