"""The Kafka listener stops reading instead of queueing without bound (issue 10, item 8).

A listener on the in-memory storage whose appends wait for a gate, so that every Produce
stays unanswered for as long as the test likes: a client pipelining 24 MiB of Produce
requests gets as many read as the connection's budget holds and no more (the rest waits in
the kernel and in the client), the listener's total budget bounds two such clients
together, and once the storage moves again every request is answered, in order, and the
budgets are empty.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from harness import kafka_memory_store
from harness.kafka_memory_store import memory_storage
from harness.waiting import async_wait_until
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.requests import ENTRY_BYTES
from pulsar_gateway.handlers.kafka.server import KafkaServer
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.record_batch import encode_batch

MIB = 1024 * 1024
FRAME_VALUE = 256 * 1024
REQUESTS = 96  # 24 MiB per client


def produce_frame(correlation: int) -> bytes:
    records = encode_batch(0, [(0, 1000, None, b"x" * FRAME_VALUE, [])])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "gated", "partition_data": [{"index": 0, "records": records}]}],
    }
    return protocol.encode_request(0, 9, correlation, "pipeliner", body)


async def read_response(reader: asyncio.StreamReader) -> dict:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    frame = memoryview(await reader.readexactly(size))
    return {"correlation": struct.unpack(">i", frame[:4])[0]}


def test_a_full_budget_stops_reading_and_answers_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = asyncio.Event()
    appends = 0
    append = kafka_memory_store.MemoryPartitionLog.append

    async def gated_append(self, *args, **kwargs):  # the port's signature, whatever it is
        nonlocal appends
        appends += 1
        await gate.wait()
        return await append(self, *args, **kwargs)

    monkeypatch.setattr(kafka_memory_store.MemoryPartitionLog, "append", gated_append)

    async def scenario() -> None:
        settings = KafkaSection(
            port=0,
            max_queued_request_bytes_per_connection=1 * MIB,
            max_queued_request_bytes=int(1.5 * MIB),
        )
        server = KafkaServer(settings, memory_storage())
        await server.start()
        try:
            host, port = server.address
            clients = [await asyncio.open_connection(host, port) for _ in range(2)]
            frames = [produce_frame(i) for i in range(REQUESTS)]
            for _, writer in clients:
                for frame in frames:
                    writer.write(frame)

            await async_wait_until(lambda: appends >= 2, 10, message="the first appends")
            # what was read stays within the budgets; the rest waits in the clients
            seen = [server.queued.used for _ in range(3)]
            for _ in range(20):
                await asyncio.sleep(0.05)
                seen.append(server.queued.used)
            one_request = len(frames[0]) + 10 * ENTRY_BYTES
            assert max(seen) <= settings.max_queued_request_bytes + one_request
            assert appends <= 1.5 * MIB // FRAME_VALUE + 1
            unsent = [writer.transport.get_write_buffer_size() for _, writer in clients]
            assert min(unsent) > 8 * MIB, f"the clients could send almost everything: {unsent}"

            gate.set()
            for reader, _ in clients:
                answered = [(await read_response(reader))["correlation"] for _ in frames]
                assert answered == list(range(REQUESTS))
            assert appends == 2 * REQUESTS
            await async_wait_until(
                lambda: server.queued.used == 0, 10, message="the budget to empty"
            )
            for _, writer in clients:
                writer.close()
        finally:
            await server.stop()

    asyncio.run(scenario())
