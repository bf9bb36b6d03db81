"""A kafka-python group consumer that knows its topic's partitions before it joins.

kafka-python 3.0.12 has a race in its group join: a leader that assigned before it knew
the topic's partitions rejoins once they arrive, and when that rejoin ends after the
`poll` that started it returned, the member never takes its assignment nor heartbeats
again (docs/compatibility.md, "Clients' own faults"). The gateway answers a group's first
join at once (`kafka.group_initial_rebalance_delay_ms` 0), so a consumer subscribed in its
constructor often joins before its first metadata answer. Reading the partitions first,
as an application that checks its topic does, keeps the tests off that race.
"""

from __future__ import annotations

from typing import Any


def group_consumer(topic: str, **config: Any) -> Any:
    """A `kafka.KafkaConsumer(**config)` subscribed to `topic` once its partitions are known."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(**config)
    consumer.partitions_for_topic(topic)
    consumer.subscribe([topic])
    return consumer
