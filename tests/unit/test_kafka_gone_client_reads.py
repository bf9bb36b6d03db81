"""A read whose client has gone is dropped, not worked through (issue 33, "budgets that
always come back").

A Metadata naming 99,999 topics takes its turns on the loop for seconds on a loaded machine
and holds ~26 MB of the listener's budget meanwhile; when its client left, it was still
worked through and answered into a closed socket, holding that budget to the end. Now a
connection that ends drops its reads still under way (Metadata that may not create
topics, ListOffsets, OffsetFetch, DescribeConfigs, as it always dropped Fetches): here
the budget comes back and the Metadata is never answered (gateway_requests_total).
"""

from __future__ import annotations

import asyncio

from harness.kafka_memory_store import memory_storage
from harness.waiting import async_wait_until
from pulsar_gateway.gateway import metrics
from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.requests import droppable
from pulsar_gateway.handlers.kafka.server import KafkaServer
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.unit.test_kafka_budgets_come_back import abort, request

TOPICS = 99_999


def _metadata_answered() -> float:
    return metrics.REQUESTS.labels("kafka", "Metadata", "none")._value.get()


def test_a_gone_clients_metadata_is_dropped() -> None:
    names = [{"name": f"t{i}"} for i in range(TOPICS)]
    huge = request(3, 9, 1, {"topics": names, "allow_auto_topic_creation": False})

    async def scenario() -> None:
        server = KafkaServer(KafkaSection(port=0), memory_storage())
        await server.start()
        try:
            answered = _metadata_answered()
            _, writer = await asyncio.open_connection(*server.address)
            writer.write(huge)
            # its decoded entries charged: the request is read and under way
            await async_wait_until(
                lambda: server.queued.used > TOPICS * 100, 30, message="the request read"
            )
            abort(writer)
            await async_wait_until(
                lambda: server.queued.used == 0, 30, message="the budget given back"
            )
            await asyncio.sleep(0)  # a response about to be counted would be by now
            assert _metadata_answered() == answered, "the gone client's Metadata was answered"
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_only_reads_are_dropped() -> None:
    assert droppable(ApiKey.METADATA, {"allow_auto_topic_creation": False})
    assert not droppable(ApiKey.METADATA, {"allow_auto_topic_creation": True})
    assert not droppable(ApiKey.METADATA, {})  # v0-3: may create topics
    assert droppable(ApiKey.LIST_OFFSETS, {})
    assert not droppable(ApiKey.PRODUCE, {})
    assert not droppable(ApiKey.OFFSET_COMMIT, {})
