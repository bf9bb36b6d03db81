"""Fetch of a `pulsar`-format topic serves its records compressed as the topic's
`compression.type` says (issue 14), as a Kafka broker does: the producer's codec by
default, remembered per record, or the codec the topic names."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.record_batch import ATTR_CODEC_MASK, decode_batches
from tests.unit.test_kafka_admin_apis import SET, incremental
from tests.unit.test_kafka_apis import TOPIC, Broker, fetched, run

CODECS = {
    "gzip": compression.GZIP,
    "snappy": compression.SNAPPY,
    "lz4": compression.LZ4,
    "zstd": compression.ZSTD,
    "uncompressed": compression.NONE,
}


def codecs_of(partition: dict) -> list[int]:
    batches = decode_batches(bytes(partition["records"] or b""))
    return [batch.attributes & ATTR_CODEC_MASK for batch in batches]


def test_producer_codec_is_kept_per_record_by_default() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1)
        await broker.produce("orders", [b"a" * 50, b"b" * 50], compression_type=compression.GZIP)
        await broker.produce("orders", [b"plain"])
        await broker.produce("orders", [b"c" * 50], compression_type=compression.ZSTD)
        partition = await broker.fetch("orders", 0)
        assert codecs_of(partition) == [compression.GZIP, compression.NONE, compression.ZSTD]
        assert fetched(partition) == [(0, b"a" * 50), (1, b"b" * 50), (2, b"plain"), (3, b"c" * 50)]

    run(scenario)


def test_a_topic_codec_compresses_every_fetched_batch() -> None:
    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1)
        await broker.produce("orders", [b"x" * 100, b"y"], compression_type=compression.SNAPPY)
        await broker.produce("orders", [b"z" * 100])
        for name, codec in CODECS.items():
            assert (await incremental(broker, [("compression.type", SET, name)]))["error_code"] == 0
            partition = await broker.fetch("orders", 0)
            assert codecs_of(partition) == [codec], name
            assert fetched(partition) == [(0, b"x" * 100), (1, b"y"), (2, b"z" * 100)], name

    run(scenario)


@settings(max_examples=examples(25), deadline=None)
@given(
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    budget=st.integers(min_value=1, max_value=4000),
    codec=st.sampled_from(sorted(CODECS.values())),
)
def test_compressed_fetch_stays_within_the_byte_budget(
    values: list[bytes], budget: int, codec: int
) -> None:
    """Whole records within partition_max_bytes (the first always: KIP-74), in order."""

    async def scenario() -> None:
        broker = Broker()
        await broker.storage.topics.create(TOPIC, 1)
        await broker.produce("orders", values, compression_type=codec)
        partition = await broker.fetch("orders", 0, partition_max_bytes=budget)
        records = fetched(partition)
        assert records and records == list(enumerate(values))[: len(records)]
        assert len(records) == 1 or len(partition["records"]) <= budget + 64

    run(scenario)
