"""Fetch's byte limits as Kafka applies them, on the in-memory store: the response within
`max_bytes` (capped by `kafka.fetch_max_bytes`), each partition within its
`partition_max_bytes`, whole batches only, and KIP-74's exception (the first batch of the first
partition with data comes back even when larger) for both entry formats; a partition named
twice is INVALID_REQUEST; history reads stop at their byte budget and resume where they left."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.backend.resend_filter import stamp_text
from pulsar_gateway.gateway.messages import SEQ, LogEntry, StoredMessage
from pulsar_gateway.kafka_codec.entry_format import PULSAR, encode_entries
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import (
    Record,
    decode_batches,
    encode_batch,
    truncate_batch,
)
from pulsar_gateway.storage.kafka.partition_log import PartitionLog
from tests.unit.test_kafka_apis import Broker, fetched, run


def fetch_body(
    partitions: list[tuple[str, int, int, int]], max_bytes: int = 1 << 30
) -> dict[str, Any]:
    """A Fetch v12 asking for (topic, partition, offset, partition_max_bytes) in that order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index, offset, partition_max in partitions:
        topics.setdefault(topic, []).append(
            {
                "partition": index,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max,
            }
        )
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def fill(broker: Broker, topic: str, batches: list[list[bytes]], partition: int = 0) -> None:
    for values in batches:
        answer = await broker.produce(topic, values, partition=partition)
        assert answer["error_code"] == ErrorCode.NONE


def sizes(response: dict[str, Any]) -> list[int]:
    return [len(p["records"] or b"") for t in response["responses"] for p in t["partitions"]]


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_partition_max_bytes_bounds_each_partition_but_the_first_batch_always_comes(
    entry_format: str,
) -> None:
    async def scenario() -> None:
        broker = Broker(entry_format=entry_format, default_partitions=2)
        await fill(broker, "orders", [[b"x" * 1000] * 3 for _ in range(5)])
        await fill(broker, "orders", [[b"y" * 50_000]], partition=1)
        # each partition 4 kB: the first returns what fits whole, never more
        small = await broker.call(
            ApiKey.FETCH, 12, fetch_body([("orders", 0, 0, 4000), ("orders", 1, 0, 4000)])
        )
        first, second = sizes(small)
        assert 0 < first <= 4000
        # the second partition's first batch (50 kB) does not fit, and it is not the first
        # partition with data: nothing of it (Kafka returns it only when it comes first)
        assert second == 0
        assert small["responses"][0]["partitions"][1]["high_watermark"] == 1
        # the big one first: KIP-74 returns it whole although 50 kB > 4 kB
        flipped = await broker.call(
            ApiKey.FETCH, 12, fetch_body([("orders", 1, 0, 4000), ("orders", 0, 0, 4000)])
        )
        big, after = sizes(flipped)
        assert big > 50_000 and 0 < after <= 4000
        values = [v for _, v in fetched(flipped["responses"][0]["partitions"][0])]
        assert values == [b"y" * 50_000]

    run(scenario)


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_max_bytes_bounds_the_whole_response(entry_format: str) -> None:
    async def scenario() -> None:
        broker = Broker(entry_format=entry_format, default_partitions=3)
        for index in range(3):
            await fill(broker, "orders", [[b"z" * 900] * 2 for _ in range(10)], partition=index)
        wanted = [("orders", index, 0, 1 << 20) for index in range(3)]
        response = await broker.call(ApiKey.FETCH, 12, fetch_body(wanted, max_bytes=25_000))
        got = sizes(response)
        assert sum(got) <= 25_000 and got[0] > 15_000 and got[1] > 0 and got[2] == 0
        # offsets stay dense and whole: every record returned is one that was stored
        for partition in response["responses"][0]["partitions"][:2]:
            offsets = [offset for offset, _ in fetched(partition)]
            assert offsets == list(range(len(offsets)))

    run(scenario)


def test_fetch_max_bytes_setting_caps_whatever_the_request_asks() -> None:
    async def scenario() -> None:
        broker = Broker(fetch_max_bytes=10_000)
        await fill(broker, "orders", [[b"q" * 1000] * 5 for _ in range(10)])
        response = await broker.call(
            ApiKey.FETCH, 12, fetch_body([("orders", 0, 0, 1 << 30)], max_bytes=1 << 30)
        )
        assert 0 < sizes(response)[0] <= 10_000

    run(scenario)


def test_a_partition_named_twice_is_an_invalid_request() -> None:
    async def scenario() -> None:
        broker = Broker()
        await fill(broker, "orders", [[b"a"]])
        twice = fetch_body([("orders", 0, 0, 1000)])
        twice["topics"].append(dict(twice["topics"][0]))  # the same topic and partition again
        response = await broker.call(ApiKey.FETCH, 12, twice)
        assert response["error_code"] == ErrorCode.INVALID_REQUEST
        codes = [p["error_code"] for t in response["responses"] for p in t["partitions"]]
        assert codes and set(codes) == {ErrorCode.INVALID_REQUEST}
        assert sizes(response) == [0] * len(codes)
        old = await broker.call(ApiKey.FETCH, 4, twice)  # no top-level code before v7
        assert {p["error_code"] for p in old["responses"][0]["partitions"]} == {
            ErrorCode.INVALID_REQUEST
        }

    run(scenario)


def test_a_chunk_sized_record_still_comes_back_first() -> None:
    """Records Pulsar stores chunked (over 5 MiB) read back as one message: KIP-74 applies."""

    async def scenario() -> None:
        broker = Broker(message_max_bytes=20_000_000)
        big = b"c" * (6 * 1024 * 1024)
        await fill(broker, "orders", [[big], [b"after"]])
        response = await broker.call(ApiKey.FETCH, 12, fetch_body([("orders", 0, 0, 100_000)]))
        assert [v for _, v in fetched(response["responses"][0]["partitions"][0])] == [big]

    run(scenario)


# ---- the pieces -------------------------------------------------------------------------------


def test_truncate_batch_keeps_whole_records_with_a_valid_header() -> None:
    records = [Record(i, 5000 + i * 7, b"k", b"v" * (i + 1) * 10, []) for i in range(6)]
    out = bytearray(b"prefix")
    encode_batch(40, records, out=out)
    whole = len(out)
    kept = truncate_batch(out, 6, whole - 1)
    assert kept == 5
    [batch] = decode_batches(bytes(out[6:]))  # CRC, length and count all rewritten
    assert batch.record_count == 5 and batch.last_offset_delta == 4
    assert batch.max_timestamp == 5000 + 4 * 7
    assert [r.value for r in batch.records] == [r.value for r in records[:5]]
    assert truncate_batch(out, 6, 10) == 0 and out == bytearray(b"prefix")
    out2 = bytearray()
    encode_batch(0, records[5:], out=out2)
    assert truncate_batch(out2, 0, 10, keep_one=True) == 1 and len(out2) > 10


def test_encode_entries_keeps_whole_records_within_the_limit() -> None:
    entries = [LogEntry(i, _stored(PULSAR.encode(_decoded(b"r" * 100))[0], i)) for i in range(50)]
    data, count = encode_entries(entries, 1000, min_one=False)
    assert len(data) <= 1000 and count == sum(b.record_count for b in decode_batches(data))
    assert 5 <= count < 10
    assert encode_entries(entries, 50, min_one=False) == (bytearray(), 0)
    one, count = encode_entries(entries, 50, min_one=True)
    assert count == 1 and len(one) > 50


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=10),
    st.integers(1, 3000),
    st.booleans(),
    st.sampled_from([None, 1]),  # as stored, or gzip for every batch
)
def test_encode_entries_hands_out_a_stamped_batch_whole_or_not_at_all(
    sizes: list[int], limit: int, min_one: bool, codec: int | None
) -> None:
    """Records of Kafka batches the gateway stored one message per record (stamped "more
    follows" but the last) come back up to a batch's end, never part of one; the first
    batch whole even over the limit with `min_one` (KIP-74)."""
    entries = []
    for size in sizes:
        for position in range(size):
            stored = _stored(PULSAR.encode(_decoded(b"r" * 90))[0], len(entries))
            stored.properties[SEQ] = stamp_text(len(entries) + 1, more=position < size - 1)
            entries.append(LogEntry(len(entries), stored))
    ends = {0} | {sum(sizes[: i + 1]) for i in range(len(sizes))}
    data, count = encode_entries(entries, limit, min_one=min_one, codec=codec)
    assert count in ends
    assert count == sum(b.record_count for b in decode_batches(data))
    if min_one:
        assert count >= sizes[0]
    if count > sizes[0]:
        assert len(data) <= limit


def _decoded(value: bytes) -> Any:
    [batch] = decode_batches(encode_batch(0, [Record(0, 7, b"k", value, [])]))
    return batch


def _stored(out: Any, index: int) -> StoredMessage:
    return StoredMessage(
        (1, index, -1), out.payload, out.key or "", dict(out.properties or {}), 7, 9
    )


class _Stream:
    """A reader over fixed messages, handing out up to 1,000 per read as pulsar-lite does."""

    def __init__(self, messages: list[StoredMessage]) -> None:
        self.messages = messages
        self.reads = 0

    async def read_batch(self, limit: int, **_: Any) -> list[StoredMessage]:
        self.reads += 1
        batch, self.messages = self.messages[:limit], self.messages[limit:]
        return batch

    async def close(self) -> None:
        pass


class _Backend:
    def __init__(self, messages: list[StoredMessage]) -> None:
        self.stream = _Stream(messages)
        self.opened = 0

    async def open_log_reader(self, *_: Any, **__: Any) -> _Stream:
        self.opened += 1
        return self.stream


def test_history_reads_stop_at_their_budget_and_resume_where_they_stopped() -> None:
    """A history read used to take a whole 1,000-message read from Pulsar whatever its
    budget: 1,000 records of 500 kB made a 500 MB Fetch response."""

    async def scenario() -> None:
        messages = [StoredMessage((1, i, -1), b"h" * 10_000, "", {}, 0, 1) for i in range(1500)]
        backend = _Backend(messages)
        log = PartitionLog(backend, None, "t")  # type: ignore[arg-type]
        log.next_offset = 1500  # nothing in the tail: every read below goes to history
        offset = 0
        while offset < 1500:
            entries = await log.read(offset, 100_000)
            assert entries and entries[0].offset == offset
            assert sum(e.message.size for e in entries) <= 100_000
            offset = entries[-1].offset + 1
        assert backend.opened == 1  # one cursor, carried from read to read
        # the two reads that held the messages, and one read ahead that found no more
        assert backend.stream.reads == 3

    asyncio.run(scenario())
