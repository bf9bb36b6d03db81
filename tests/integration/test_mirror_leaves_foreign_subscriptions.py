"""The group-offset mirror moves only the gateway's own subscriptions (`<prefix><group>`,
`kafka.group_subscription_prefix`), never a Pulsar application's subscription that happens
to carry the group's name: one commit once cost an offline Exclusive subscriber all its
unread messages."""

from __future__ import annotations

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_until

PREFIX = "__kafka.group."  # the default kafka.group_subscription_prefix


def test_a_native_subscription_named_like_the_group_keeps_its_messages(gateway, topic_name) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    partition = f"persistent://public/default/{topic_name}-partition-0"
    group = f"app-{topic_name}"
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}", operation_timeout_seconds=5)
    try:
        # a Pulsar application's durable Exclusive subscription, offline while data arrives
        client.subscribe(
            partition,
            group,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
        producer = Producer({"bootstrap.servers": gateway.bootstrap})
        for number in range(10):
            producer.produce(topic_name, str(number).encode(), partition=0)
        assert producer.flush(30) == 0

        # a Kafka group of the same name commits past all ten
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(topic_name, 0, 10)], asynchronous=False)
        consumer.close()

        # the mirror acts on the commit (an earlier version: on the application's subscription)
        # and lets go of the subscription again
        def acted_on() -> str | None:
            log = gateway.broker_log()
            for name in (PREFIX + group, group):
                if f"Message acknowledged for topic {partition} subscription {name}:" in log:
                    return name
            return None

        moved = wait_until(acted_on, 30, 0.1, "the mirror to act on the group's commit")
        gateway.wait_for_mirror(partition, moved)

        # the application, back online, still gets every unread message...
        native = client.subscribe(partition, group, consumer_type=pulsar.ConsumerType.Exclusive)
        got = []
        try:
            while True:
                message = native.receive(3000)
                got.append(message.data().decode())
                native.acknowledge(message)
        except pulsar.Timeout:
            pass
        native.close()
        assert got == [str(number) for number in range(10)]

        # ...because the mirror moved the gateway's own subscription, now past all ten
        assert moved == PREFIX + group
        mirrored = client.subscribe(partition, moved)
        with pytest.raises(pulsar.Timeout):
            mirrored.receive(1000)
        mirrored.close()
    finally:
        client.close()
