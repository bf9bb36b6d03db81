"""Topic incarnations' Pulsar names (gateway/topic_names.py; docs/pulsar-mapping.md,
'Deleting topics'): `<topic>=<n>` round-trips, and no Kafka topic's name is taken for
another topic's incarnation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.gateway.topic_names import (
    incarnation_topic,
    logical_topic,
    partition_topic,
    pulsar_topic,
    split_partition_topic,
    validate_kafka_name,
)
from pulsar_gateway.handlers.kafka.port import TopicRecord

KAFKA_NAMES = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"),
    min_size=1,
    max_size=60,
).filter(lambda name: name not in (".", ".."))


@given(KAFKA_NAMES, st.integers(min_value=0, max_value=10**9), st.integers(0, 10_000))
def test_a_stored_partition_name_gives_back_its_topic_incarnation_and_index(
    name: str, incarnation: int, index: int
) -> None:
    full = pulsar_topic(name, "public", "default")
    stored = partition_topic(incarnation_topic(full, incarnation), index)
    topic, found_index = split_partition_topic(stored)
    assert found_index == index
    assert logical_topic(topic) == (full, incarnation)


@given(KAFKA_NAMES)
def test_no_kafka_topic_name_reads_as_an_incarnation(name: str) -> None:
    try:
        validate_kafka_name(name)
    except ValueError:
        return
    full = pulsar_topic(name, "public", "default")
    assert logical_topic(full) == (full, 0)


def test_the_first_incarnation_keeps_the_plain_name() -> None:
    record = TopicRecord("persistent://public/default/orders", 2)
    assert record.stored_name == "persistent://public/default/orders"
    record.incarnation = 3
    assert record.stored_name == "persistent://public/default/orders=3"
