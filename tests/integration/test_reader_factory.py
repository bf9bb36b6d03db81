"""Readers opened through gateway/backend/reader_factory.py read as the library's do, fail
as they do, and are not kept alive once closed (the library's asyncio create_reader kept
every reader: a reference cycle through its C++ callback)."""

from __future__ import annotations

import asyncio
import gc

import pulsar
import pulsar.asyncio as pulsar_asyncio
import pytest

from pulsar_gateway.gateway.backend.reader_factory import create_reader


def _futures() -> int:
    gc.collect()
    return sum(1 for thing in gc.get_objects() if isinstance(thing, asyncio.Future))


def test_readers_read_fail_and_go_once_closed(broker_url: str) -> None:
    sync = pulsar.Client(broker_url)
    topic = "persistent://public/default/reader-factory"
    producer = sync.create_producer(topic)
    producer.send(b"first")
    producer.send(b"second")
    producer.close()

    async def scenario() -> None:
        client = pulsar_asyncio.Client(broker_url)
        try:
            raw = await create_reader(client, topic, pulsar.MessageId.earliest)
            reader = pulsar_asyncio.Reader(raw, pulsar.schema.BytesSchema())
            assert (await reader.read_next()).data() == b"first"
            await reader.close()
            with pytest.raises(pulsar_asyncio.PulsarException):
                await create_reader(client, "not a topic name //", pulsar.MessageId.earliest)
            before = _futures()
            for _ in range(50):
                raw = await create_reader(client, topic, pulsar.MessageId.earliest)
                await pulsar_asyncio.Reader(raw, pulsar.schema.BytesSchema()).close()
                del raw
            # the library's create_reader left one future (and its reader) per call
            assert _futures() - before < 10
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
    finally:
        sync.close()
