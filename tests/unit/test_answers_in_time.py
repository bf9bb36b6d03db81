"""A request that waits on storage is answered in time with the error its client retries,
and the work goes on (handlers/kafka/in_time.py): an OffsetCommit and an idempotent
InitProducerId behind a store that takes longer than kafka.coordinator_answer_seconds."""

from __future__ import annotations

import asyncio

from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.unit.test_kafka_apis import TOPIC, Broker, commit_body


def test_a_slow_offset_commit_is_answered_busy_and_still_lands() -> None:
    async def scenario() -> None:
        broker = Broker(coordinator_answer_seconds=0.05)
        await broker.storage.topics.create(TOPIC, 1)
        broker.storage.offsets.delay = lambda: 0.3  # type: ignore[attr-defined]
        response = await broker.call(ApiKey.OFFSET_COMMIT, 8, commit_body("g", -1, "", 42))
        code = response["topics"][0]["partitions"][0]["error_code"]
        assert code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        for _ in range(100):
            if broker.storage.offsets.offsets("g"):  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.01)
        committed = broker.storage.offsets.offsets("g")  # type: ignore[attr-defined]
        assert [c.offset for c in committed.values()] == [42]

    asyncio.run(scenario())


def test_a_slow_producer_id_is_answered_busy() -> None:
    async def scenario() -> None:
        broker = Broker(coordinator_answer_seconds=0.05)
        slow = asyncio.Event()
        ids = broker.storage.producer_ids
        original = ids.next_id

        async def next_id() -> int:
            await slow.wait()
            return await original()

        ids.next_id = next_id  # type: ignore[method-assign]
        body = {"transactional_id": None, "transaction_timeout_ms": 60000}
        answer = await broker.call(
            ApiKey.INIT_PRODUCER_ID, 4, {**body, "producer_id": -1, "producer_epoch": -1}
        )
        assert answer["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        slow.set()
        ids.next_id = original  # type: ignore[method-assign]
        answer = await broker.call(
            ApiKey.INIT_PRODUCER_ID, 4, {**body, "producer_id": -1, "producer_epoch": -1}
        )
        assert answer["error_code"] == ErrorCode.NONE

    asyncio.run(scenario())
