"""A kafka-python group consumer that knows its topic's partitions before it joins.

kafka-python 3.0.12 has a race in its group join: a leader that assigned before its first
metadata answer since it subscribed rejoins once that answer arrives, and when that rejoin
ends after the `poll` that started it returned, the member never takes its assignment nor
heartbeats again (docs/compatibility.md, "Clients' own faults"). The gateway answers a
group's first join at once (`kafka.group_initial_rebalance_delay_ms` 0), so a consumer that
polls right after subscribing often joins before that answer. Fetching the metadata between
subscribing and the first poll, as an application that checks its topic does, keeps the
tests off that race.
"""

from __future__ import annotations

from typing import Any


def group_consumer(topic: str, **config: Any) -> Any:
    """A `kafka.KafkaConsumer(**config)` subscribed to `topic`, with the metadata answer its
    group leader compares its assignment with already in (`topics()` always asks)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(**config)
    consumer.subscribe([topic])
    consumer.topics()
    return consumer
