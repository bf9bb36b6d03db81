"""The wire client against the embedded broker, with pulsar-client 3.13 as the reference:
what our producer writes reads identically through pulsar-client, what pulsar-client writes
(batched or not, every codec, chunked) reads identically through our consumer, Shared
subscriptions acknowledge and redeliver, and TLS with a token works through a proxy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from harness.certificates import make_certificates
from harness.tls_proxy import TlsProxy
from pulsar_gateway.gateway.backend.wire import (
    EARLIEST,
    BatchBuilder,
    Client,
    CompressionType,
    MessageId,
    SubscriptionType,
    TokenAuthentication,
    single_entry,
)
from pulsar_gateway.gateway.backend.wire.batch import entry_messages

BIG = 6 * 1024 * 1024  # over pulsar-lite's 5 MiB: chunked


def _pulsar_client(url: str) -> pulsar.Client:
    return pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )


def _topic() -> str:
    return f"persistent://public/default/wire-{uuid.uuid4().hex[:12]}"


# (value, key, properties, event time): null values, no key, unicode, empty properties
RECORDS = [
    (b"v%d" % i if i % 7 else None, f"k{i % 5}" if i % 3 else None,
     {"h": f"{i}", "\u00e9t\u00e9": "\u2603"} if i % 2 else {}, 1_700_000_000_000 + i)
    for i in range(60)
]  # fmt: skip


def _expected(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(v, k, p, t) for v, k, p, t in records]


def test_what_we_write_reads_identically_through_pulsar_client(broker_url: str) -> None:
    topic = _topic()
    sent: list[tuple[MessageId, int, tuple[Any, ...]]] = []  # entry id, batch index, record

    async def write() -> None:
        client = Client(broker_url, operation_timeout=10)
        producer = await client.create_producer(topic)
        value, key, props, time = RECORDS[1]
        # a lone message first: a batch must not be entry 0 of a ledger for pulsar-client
        # readers (docs/backend.md, "A batch must not open a ledger")
        receipt = await producer.send(
            single_entry(value, key=key, properties=props, event_time=time)
        )
        sent.append((receipt, -1, RECORDS[1]))
        for start, compression in zip(range(0, 60, 12), CompressionType, strict=True):
            builder = BatchBuilder()
            chunk = RECORDS[start : start + 12]
            for value, key, props, time in chunk:
                ordering = key.encode() if key else None
                builder.add_message(value, key, props, time, ordering)
            receipt = await producer.send(builder.build(compression))
            sent.extend((receipt, index, record) for index, record in enumerate(chunk))
        for compression in (CompressionType.NONE, CompressionType.ZSTD):
            receipt = await producer.send(
                single_entry(b"alone", key="solo", properties={"x": "y"}, compression=compression)
            )
            sent.append((receipt, -1, (b"alone", "solo", {"x": "y"}, 0)))
        big = bytes(range(256)) * (BIG // 256)
        receipt = await producer.send(single_entry(big, key="big", properties={"size": "6M"}))
        sent.append((receipt, -1, (big, "big", {"size": "6M"}, 0)))
        await client.close()

    asyncio.run(write())
    client = _pulsar_client(broker_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(10_000) for _ in sent]
        with pytest.raises(pulsar.Timeout):
            reader.read_next(300)
    finally:
        client.close()
    for message, (receipt, index, (value, key, props, time)) in zip(got, sent, strict=True):
        mid = message.message_id()
        if index >= 0:  # (a chunked message's id on the reader is its first chunk's)
            assert (mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (*receipt.entry, index)
        assert message.has_null_value() == (value is None)
        assert message.data() == (value or b"")
        assert message.partition_key() == (key or "")
        assert message.properties() == props
        assert message.event_timestamp() == time


def _pulsar_client_writes(broker_url: str, topic: str) -> list[tuple[bytes, str, dict, int]]:
    """Every way pulsar-client writes: unbatched, batched with each codec, chunked."""
    written: list[tuple[bytes, str, dict, int]] = []
    client = _pulsar_client(broker_url)
    try:
        plain = client.create_producer(topic, batching_enabled=False)
        plain.send(b"first", partition_key="a", properties={"n": "0"}, event_timestamp=5)
        written.append((b"first", "a", {"n": "0"}, 5))
        plain.flush()
        for codec in ("NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"):
            producer = client.create_producer(
                topic,
                batching_enabled=True,
                batching_max_messages=25,
                batching_max_publish_delay_ms=50,
                compression_type=getattr(pulsar.CompressionType, codec),
            )
            for i in range(25):
                record = (f"{codec}-{i}".encode() * 20, f"k{i}", {"codec": codec}, 1000 + i)
                producer.send_async(
                    record[0], None, partition_key=record[1], properties=record[2],
                    event_timestamp=record[3],
                )  # fmt: skip
                written.append(record)
            producer.flush()
            producer.close()
        chunker = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        big = bytes(reversed(range(256))) * (BIG // 256)
        chunker.send(big, partition_key="big", properties={"chunked": "yes"})
        written.append((big, "big", {"chunked": "yes"}, 0))
        plain.send(b"last", partition_key="z")
        written.append((b"last", "z", {}, 0))
    finally:
        client.close()
    return written


def test_what_pulsar_client_writes_reads_identically_through_our_reader(broker_url: str) -> None:
    topic = _topic()
    written = _pulsar_client_writes(broker_url, topic)

    async def read() -> list[tuple[Any, ...]]:
        client = Client(broker_url, operation_timeout=10)
        reader = await client.create_reader(topic, EARLIEST, receiver_queue_size=50)
        got: list[tuple[Any, ...]] = []
        entries = []
        while len(got) < len(written):
            entry = await reader.receive(10)
            entries.append(entry)
            got += [(m.payload, m.key, m.properties, m.event_time) for m in entry.messages()]
        with pytest.raises(TimeoutError):
            await reader.receive(0.3)
        # batched entries came whole: one per pulsar-client batch
        assert sum(entry.batched for entry in entries) == 5
        assert [e.metadata.compression for e in entries if e.batched] == [0, 1, 2, 3, 4]
        assert any(len(entry.chunk_ids) > 0 for entry in entries)
        await client.close()
        return got

    assert asyncio.run(read()) == written


def test_shared_subscriptions_acknowledge_and_redeliver(broker_url: str) -> None:
    topic = _topic()

    async def scenario() -> None:
        client = Client(broker_url, operation_timeout=10)
        first = await client.subscribe(
            topic, "shared", subscription_type=SubscriptionType.SHARED, receiver_queue_size=100
        )
        producer = await client.create_producer(topic)
        for i in range(20):
            await producer.enqueue(single_entry(b"%d" % i))
        await producer.flush()
        taken = [await first.receive(5) for _ in range(20)]
        assert [entry.payload for entry in taken] == [b"%d" % i for i in range(20)]
        first.ack(taken[:10])  # the first ten are done
        first.redeliver(taken[10:12])  # these two back now
        again = [await first.receive(5) for _ in range(2)]
        assert sorted(entry.payload for entry in again) == [b"10", b"11"]
        assert all(entry.redelivery_count >= 1 for entry in again)
        first.ack(again)
        await first.close()  # 12..19 unacknowledged: they go to the next consumer
        second = await client.subscribe(
            topic, "shared", subscription_type=SubscriptionType.SHARED, receiver_queue_size=100
        )
        rest = [await second.receive(5) for _ in range(8)]
        assert sorted(entry.payload for entry in rest) == sorted(b"%d" % i for i in range(12, 20))
        second.ack(rest)
        with pytest.raises(TimeoutError):
            await second.receive(0.5)
        await client.close()

    asyncio.run(scenario())
    # pulsar-client joins the subscription and gets nothing: every message was acknowledged
    client = _pulsar_client(broker_url)
    try:
        consumer = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1000)
    finally:
        client.close()


def test_cumulative_acks_move_a_durable_subscription(broker_url: str) -> None:
    topic = _topic()

    async def scenario() -> None:
        client = Client(broker_url, operation_timeout=10)
        consumer = await client.subscribe(topic, "cursor")
        producer = await client.create_producer(topic)
        ids = [await producer.send(single_entry(b"%d" % i)) for i in range(10)]
        entries = [await consumer.receive(5) for _ in range(10)]
        assert [entry.id for entry in entries] == ids
        consumer.ack_cumulative(entries[5])
        await consumer.close()
        again = await client.subscribe(topic, "cursor")
        assert (await again.receive(5)).payload == b"6"
        last, _ = await again.get_last_message_id()
        assert last == ids[-1]
        await again.unsubscribe()
        await client.close()

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("wire-tls"))


@pytest.fixture
def proxy(broker_url: str, certificates: dict[str, Path]) -> Iterator[TlsProxy]:
    port = int(broker_url.rsplit(":", 1)[1])
    started = TlsProxy(port, certificates["cert"], certificates["key"]).start()
    yield started
    started.stop()


def test_tls_and_a_token_through_a_proxy(proxy: TlsProxy, certificates: dict[str, Path]) -> None:
    """The proxy answers lookups with proxy_through_service_url, as Pulsar's proxy does:
    the client keeps its bytes on the TLS service URL and names the broker in CONNECT."""
    import ssl

    token = "wire-" + uuid.uuid4().hex
    topic = _topic()

    async def scenario() -> None:
        context = ssl.create_default_context(cafile=str(certificates["ca"]))
        client = Client(
            f"pulsar+ssl://localhost:{proxy.port}",
            ssl_context=context,
            authentication=TokenAuthentication(lambda: token),
            operation_timeout=10,
        )
        producer = await client.create_producer(topic)
        receipt = await producer.send(single_entry(b"over tls", key="k"))
        reader = await client.create_reader(topic, receipt)
        entry = await reader.receive(5)
        assert (entry.id, entry.payload) == (receipt, b"over tls")
        await client.close()

    asyncio.run(scenario())
    assert proxy.first_bytes and all(token.encode() in first for first in proxy.first_bytes)


def test_a_shared_consumer_reads_batched_entries_whole(broker_url: str) -> None:
    """Two Shared consumers of the wire client split 2,000 messages published in batched
    entries of 10 while they consume: every message once, none twice. With permits counted
    per entry on pulsar-lite's Shared dispatcher each got 3 entries and then nothing
    (docs/pulsar-protocol.md, "Flow control")."""
    topic = _topic() + "-partition-0"
    count = 2000

    def publish() -> None:
        client = _pulsar_client(broker_url)
        try:
            producer = client.create_producer(
                topic,
                batching_enabled=True,
                batching_max_messages=10,
                batching_max_publish_delay_ms=5,
                block_if_queue_full=True,
            )
            for index in range(count):
                producer.send_async(b"%d" % index, None)
            producer.flush()
        finally:
            client.close()

    async def scenario() -> list[list[bytes]]:
        client = Client(broker_url, operation_timeout=10)
        consumers = [
            await client.subscribe(
                topic, "split", subscription_type=SubscriptionType.SHARED, receiver_queue_size=50
            )
            for _ in range(2)
        ]
        await asyncio.to_thread(publish)
        got: list[list[bytes]] = [[], []]
        deadline = asyncio.get_running_loop().time() + 30
        while sum(map(len, got)) < count and asyncio.get_running_loop().time() < deadline:
            for index, consumer in enumerate(consumers):
                for entry in await consumer.receive_many(20, timeout=0.05):
                    got[index] += [m.payload for m in entry_messages(entry.metadata, entry.payload)]
                    consumer.ack([entry])
        await client.close()
        return got

    got = asyncio.run(scenario())
    union = got[0] + got[1]
    assert sorted(union) == sorted(b"%d" % index for index in range(count))
    assert got[0] and got[1]  # split between the two
