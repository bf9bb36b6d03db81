"""Which entry format a partition log writes: the topic's own `pulsar.entry.format`, else the
gateway's `kafka.entry_format`. A `kafka`-format log writes each stored batch as an entry of
its own, without the producer's batching delay (tests/integration/test_entry_format.py
checks the entries)."""

from __future__ import annotations

from pulsar_gateway.handlers.kafka.port import TopicRecord
from pulsar_gateway.storage.kafka.topics import TopicService


def _record(**configs: str) -> TopicRecord:
    return TopicRecord("persistent://public/default/t", 1, dict(configs))


def test_a_topic_without_its_own_format_takes_the_gateways() -> None:
    kafka_default = TopicService(None, None, default_entry_format="kafka")  # type: ignore[arg-type]
    assert kafka_default.entry_format_of(_record()) == "kafka"
    assert kafka_default.entry_format_of(_record(**{"pulsar.entry.format": "pulsar"})) == "pulsar"
    plain = TopicService(None, None)  # type: ignore[arg-type]
    assert plain.entry_format_of(_record()) == "pulsar"
    assert plain.entry_format_of(_record(**{"pulsar.entry.format": "kafka"})) == "kafka"
