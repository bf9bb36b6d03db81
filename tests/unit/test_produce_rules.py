"""Produce under the topic's configs, on the in-memory store: MESSAGE_TOO_LARGE above
`max.message.bytes` (the gateway's `kafka.message_max_bytes` by default), KIP-467 record
errors for keyless records on compacted topics and for timestamps out of range,
LogAppendTime stamping, and one inflate budget per Produce request."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from harness.waiting import async_wait_until
from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.compression import InflateBudget
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.kafka_codec.record_batch import Record, decode_batches, encode_batch
from tests.unit.test_fetch_limits import fetch_body
from tests.unit.test_kafka_apis import TOPIC, Broker, run


def produce_body(partitions: list[tuple[str, int, bytes]]) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index, records in partitions:
        topics.setdefault(topic, []).append({"index": index, "records": records})
    return {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": t, "partition_data": p} for t, p in topics.items()],
    }


async def produce(broker: Broker, records: list[Record], version: int = 9, **batch: Any) -> Any:
    body = produce_body([("orders", 0, bytes(encode_batch(0, records, **batch)))])
    response = await broker.call(ApiKey.PRODUCE, version, body)
    return response["responses"][0]["partition_responses"][0]


def now() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_a_batch_over_max_message_bytes_is_message_too_large(entry_format: str) -> None:
    async def scenario() -> None:
        broker = Broker(entry_format=entry_format)
        big = [Record(0, now(), b"k", b"v" * 1_100_000, [])]
        refused = await produce(broker, big)
        assert refused["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert "1048588" in refused["error_message"]
        fits = await produce(broker, [Record(0, now(), b"k", b"v" * 1_000_000, [])])
        assert fits["error_code"] == ErrorCode.NONE
        # a topic that raises its own limit takes the big one (stored chunked by Pulsar)
        await broker.storage.topics.create(TOPIC + "-big", 1, {"max.message.bytes": "20000000"})
        body = produce_body([("orders-big", 0, bytes(encode_batch(0, big * 1)))])
        response = await broker.call(ApiKey.PRODUCE, 9, body)
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 0

    run(scenario)


def test_the_gateway_setting_is_the_default_limit() -> None:
    async def scenario() -> None:
        broker = Broker(message_max_bytes=5000)
        answer = await produce(broker, [Record(0, now(), b"k", b"v" * 6000, [])])
        assert answer["error_code"] == ErrorCode.MESSAGE_TOO_LARGE

    run(scenario)


def test_keyless_records_on_a_compacted_topic_fail_with_their_indexes() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1, {"cleanup.policy": "compact"})
        records = [
            Record(0, now(), b"a", b"1", []),
            Record(1, now(), None, b"2", []),
            Record(2, now(), b"c", b"3", []),
            Record(3, now(), None, b"4", []),
        ]
        answer = await produce(broker, records)
        assert answer["error_code"] == ErrorCode.INVALID_RECORD
        assert [e["batch_index"] for e in answer["record_errors"]] == [1, 3]
        assert "without key" in answer["record_errors"][0]["batch_index_error_message"]
        assert answer["error_message"].startswith("One or more records have been rejected")
        response = await broker.call(ApiKey.FETCH, 12, fetch_body([("orders", 0, 0, 1000)]))
        assert response["responses"][0]["partitions"][0]["high_watermark"] == 0  # none stored
        assert (await produce(broker, [records[0], records[2]._replace(offset_delta=1)]))[
            "error_code"
        ] == ErrorCode.NONE

    run(scenario)


@pytest.mark.parametrize(
    ("configs", "bad"),
    [
        ({"message.timestamp.difference.max.ms": "60000"}, [1, 2]),
        ({"message.timestamp.before.max.ms": "60000"}, [1]),
        ({"message.timestamp.after.max.ms": "60000"}, [2]),
        # before set explicitly wins over difference, which still bounds after (KIP-937)
        (
            {
                "message.timestamp.before.max.ms": "7200000",
                "message.timestamp.difference.max.ms": "60000",
            },
            [2],
        ),
    ],
)
def test_timestamps_out_of_range_fail_with_their_indexes(
    configs: dict[str, str], bad: list[int]
) -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1, configs)
        stamp = now()
        records = [
            Record(0, stamp, b"k", b"ok", []),
            Record(1, stamp - 3_600_000, b"k", b"an hour ago", []),
            Record(2, stamp + 3_600_000, b"k", b"an hour ahead", []),
        ]
        answer = await produce(broker, records)
        assert answer["error_code"] == ErrorCode.INVALID_TIMESTAMP
        assert [e["batch_index"] for e in answer["record_errors"]] == bad
        assert "is out of range" in answer["record_errors"][0]["batch_index_error_message"]
        assert (await produce(broker, records[:1]))["error_code"] == ErrorCode.NONE

    run(scenario)


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_log_append_time_topics_stamp_records_and_say_when(entry_format: str) -> None:
    async def scenario() -> None:
        broker = Broker(entry_format=entry_format)
        await broker.storage.topics.create(
            TOPIC,
            1,
            {
                "message.timestamp.type": "LogAppendTime",
                "message.timestamp.difference.max.ms": "1",  # not checked for LogAppendTime
            },
        )
        before = now()
        answer = await produce(broker, [Record(i, 1000 + i, b"k", b"v", []) for i in range(3)])
        assert answer["error_code"] == ErrorCode.NONE
        stamp = answer["log_append_time_ms"]
        assert before <= stamp <= now()
        response = await broker.call(ApiKey.FETCH, 12, fetch_body([("orders", 0, 0, 1 << 20)]))
        records = response["responses"][0]["partitions"][0]["records"]
        [batch] = decode_batches(bytes(records))
        assert batch.timestamp_type == 1 and batch.max_timestamp == stamp  # LogAppendTime
        plain = await broker.produce("plain", [b"x"])
        assert plain["log_append_time_ms"] == -1  # CreateTime topics: -1, as Kafka

    run(scenario)


def test_one_inflate_budget_for_the_whole_request() -> None:
    """Each batch under the per-batch ceiling, the request over its total: partitions past
    the budget are refused (a 14 kB zstd request used to write 384 MB)."""

    async def scenario() -> None:
        broker = Broker(max_produce_inflated_bytes=3 * 1024 * 1024, default_partitions=4)
        value = b"\0" * (1024 * 1024)  # compresses to almost nothing
        batch = bytes(encode_batch(0, [Record(0, now(), b"k", value, [])], compression.ZSTD))
        assert len(batch) < 1000
        body = produce_body([("orders", index, batch) for index in range(4)])
        response = await broker.call(ApiKey.PRODUCE, 9, body)
        codes = [p["error_code"] for p in response["responses"][0]["partition_responses"]]
        assert sorted(codes) == [0, 0, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.MESSAGE_TOO_LARGE]
        again = await broker.call(ApiKey.PRODUCE, 9, produce_body([("orders", 0, batch)]))
        assert again["responses"][0]["partition_responses"][0]["error_code"] == 0

    run(scenario)


def test_pipelined_requests_share_the_connection_inflate_budget() -> None:
    """A request waiting on storage holds what it inflated against its connection's budget
    (`kafka.max_connection_inflated_bytes`): a second request on the same connection gets
    only what is left, and the whole budget again once the first is answered. Before, each
    pipelined request could inflate its full per-request amount at the same time."""

    async def scenario() -> None:
        broker = Broker(
            max_produce_inflated_bytes=7 * 512 * 1024,  # three 1 MiB records and a little
            max_connection_inflated_bytes=9 * 512 * 1024,  # four of them and a little
            default_partitions=4,
        )
        connection = broker.context.inflated = InflateBudget(9 * 512 * 1024)
        value = b"\0" * (1024 * 1024)
        batch = bytes(encode_batch(0, [Record(0, now(), b"k", value, [])], compression.ZSTD))
        for index in range(4):  # every partition open, so each can be stalled
            await broker.produce("orders", [b"open it"], partition=index)
        log = broker.storage.topics.logs  # type: ignore[attr-defined]
        stall = asyncio.Event()
        for partition_log in log.values():
            partition_log.stall = stall
        first = asyncio.ensure_future(
            broker.call(ApiKey.PRODUCE, 9, produce_body([("orders", i, batch) for i in range(3)]))
        )
        await async_wait_until(lambda: connection.remaining < 2 * 1024 * 1024, 5)
        body = produce_body([("orders", index, batch) for index in range(2)])
        pending = asyncio.ensure_future(broker.call(ApiKey.PRODUCE, 9, body))
        await async_wait_until(lambda: connection.remaining < 1024 * 1024, 5)
        stall.set()
        answers = await pending
        codes = [p["error_code"] for p in answers["responses"][0]["partition_responses"]]
        assert sorted(codes) == [0, ErrorCode.MESSAGE_TOO_LARGE]
        await first
        assert connection.remaining == 9 * 512 * 1024 and connection.taken == 0
        for partition_log in log.values():
            partition_log.stall = None
        again = await broker.call(ApiKey.PRODUCE, 9, produce_body([("orders", 0, batch)]))
        assert again["responses"][0]["partition_responses"][0]["error_code"] == 0

    run(scenario)
