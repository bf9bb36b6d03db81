"""The native partition reader (gateway/backend/native_reader.py) against pulsar-client's
(`ReaderStream`), on the real embedded broker: messages written by pulsar-client itself
(batched, unbatched, a null value, a chunked 6 MiB one) read back as the same
`StoredMessage`s, id for id, from the start and from inside a batch, across reads cut by
their limit; `has_more` says whether anything is left."""

from __future__ import annotations

import asyncio
import uuid

import pulsar

from pulsar_gateway.gateway.backend.native_reader import NativeReaderStream
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.wire import Client


def _write(url: str, topic: str) -> int:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=7)
    single = client.create_producer(topic, batching_enabled=False)
    chunked = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    count = 0
    for round_number in range(3):
        for i in range(20):
            batched.send_async(
                b"v%d-%d" % (round_number, i),
                None,
                partition_key=f"k{i % 4}" if i % 3 else None,
                properties={"h": str(i)} if i % 2 else None,
                event_timestamp=1_700_000_000_000 + i if i % 5 else None,
            )
            count += 1
        batched.flush()
        single.send(b"alone-%d" % round_number, partition_key="solo")
        count += 1
    chunked.send(b"c" * (6 << 20), partition_key="big")
    single.send(b"last")
    count += 2
    client.close()
    return count


def _plain(messages: list) -> list[tuple]:
    return [tuple(m) for m in messages]


async def _read_all(stream, count: int, limit: int = 1000) -> list:
    out: list = []
    while len(out) < count:
        got = await stream.read_batch(limit, timeout=10)
        assert got, f"stopped at {len(out)} of {count}"
        out += got
    return out


def test_the_native_reader_reads_what_pulsar_client_reads(broker_url) -> None:
    topic = f"persistent://public/default/native-reader-{uuid.uuid4().hex[:8]}"
    count = _write(broker_url, topic)

    async def scenario() -> None:
        backend = PulsarBackend(broker_url)
        await backend.start()
        client = Client(broker_url)
        try:
            reference_stream = await backend.open_reader(topic)
            reference = await _read_all(reference_stream, count)
            await reference_stream.close()
            native = NativeReaderStream(client, topic)
            await native.open()
            got = await _read_all(native, count, limit=3)
            assert _plain(got) == _plain(reference)
            assert not await native.has_more()
            await native.close()
            # from inside a batch: the messages before it are not passed on
            inside = next(m.id for m in reference if m.id[2] == 2)
            at = [m.id for m in reference].index(inside)
            native = NativeReaderStream(client, topic, inside)
            await native.open()
            assert await native.has_more()
            rest = await _read_all(native, count - at)
            assert _plain(rest) == _plain(reference[at:])
            await native.close()
        finally:
            await client.close()
            await backend.close()

    asyncio.run(scenario())
