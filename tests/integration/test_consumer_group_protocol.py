"""KIP-848 consumer groups with a real client (confluent-kafka, `group.protocol=consumer`):
the coordinator assigns, members share the partitions, commits hold, a member that leaves
hands its partitions over, and every record is read exactly once by the group."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness import kafka_wire
from harness.gateway_process import GatewayProcess
from harness.waiting import wait_until

PARTITIONS = 6
CONSUMER_GROUP_DESCRIBE = 69


def consumer(bootstrap: str, group: str, name: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def test_consumers_share_a_topic_by_the_consumer_protocol_and_read_each_record_once(
    tmp_path,
) -> None:
    gw = GatewayProcess(
        tmp_path / "gw", extra=["--set", "kafka.group_consumer_heartbeat_interval_ms=500"]
    ).start()
    members: list[Consumer] = []
    try:
        topic, group = f"kip848-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        produce(gw.bootstrap, topic, [b"first-%03d" % i for i in range(120)])
        members = [consumer(gw.bootstrap, group, f"c{n}") for n in range(2)]
        for member in members:
            member.subscribe([topic])
        seen: dict[bytes, str] = {}
        duplicates: list[bytes] = []

        def poll_all() -> None:
            for member in members:
                message = member.poll(0.2)
                if message is None or message.error():
                    continue
                if message.value() in seen:
                    duplicates.append(message.value())
                seen[message.value()] = member.memberid()
                member.commit(message, asynchronous=False)

        def shared() -> bool:
            poll_all()
            assignments = [m.assignment() for m in members]
            return all(len(a) == PARTITIONS // 2 for a in assignments)

        wait_until(shared, 60, 0, "both members to hold half the partitions")
        wait_until(lambda: poll_all() or len(seen) == 120, 60, 0, "all first records")
        assert duplicates == []
        assert len(set(seen.values())) == 2  # both members read
        described = kafka_wire.call(
            gw.kafka_port,
            CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [group], "include_authorized_operations": False},
        )["groups"][0]
        assert described["group_state"] == "Stable" and len(described["members"]) == 2

        leaving = members.pop()
        leaving.close()  # leaves the group (member epoch -1): its partitions move
        produce(gw.bootstrap, topic, [b"second-%03d" % i for i in range(60)])
        wait_until(lambda: poll_all() or len(seen) == 180, 60, 0, "the survivor to read the rest")
        assert duplicates == []
        assert len(members[0].assignment()) == PARTITIONS
    finally:
        for member in members:
            member.close()
        gw.stop()

    # the commits are the group's: a new member starts where the group left off
    gw.start()
    try:
        late = consumer(gw.bootstrap, group, "late")
        late.subscribe([topic])
        produce(gw.bootstrap, topic, [b"third-%03d" % i for i in range(12)])
        got: list[bytes] = []

        def read() -> bool:
            message = late.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
            return len(got) >= 12

        wait_until(read, 60, 0, "the late member to read the new records")
        assert sorted(got) == sorted(b"third-%03d" % i for i in range(12)), got[:5]
        late.close()
    finally:
        gw.stop()


def test_members_that_ask_for_the_range_assignor_get_contiguous_ranges(gateway) -> None:
    """confluent-kafka's `group.remote.assignor=range`: the coordinator assigns with Kafka's
    range server assignor (it used to answer UNSUPPORTED_ASSIGNOR), and ConsumerGroupDescribe
    names it."""
    topic, group = f"range-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    members = [
        Consumer(
            {
                "bootstrap.servers": gateway.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "group.remote.assignor": "range",
                "client.id": f"r{n}",
            }
        )
        for n in range(2)
    ]
    try:
        for member in members:
            member.subscribe([topic])

        def split() -> bool:
            for member in members:
                member.poll(0.1)
            return all(len(m.assignment()) == PARTITIONS // 2 for m in members)

        wait_until(split, 60, 0, "both members to hold three partitions")
        held = sorted(sorted(tp.partition for tp in m.assignment()) for m in members)
        assert held == [[0, 1, 2], [3, 4, 5]]  # uniform would deal 0, 2, 4 and 1, 3, 5
        described = kafka_wire.call(
            gateway.kafka_port,
            CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [group], "include_authorized_operations": False},
        )["groups"][0]
        assert described["assignor_name"] == "range"
    finally:
        for member in members:
            member.close()


def test_a_regex_subscription_takes_matching_topics_even_later_ones(gateway) -> None:
    """confluent-kafka subscribing by pattern in a consumer group: the coordinator matches
    the regex (ConsumerGroupHeartbeat's subscribed_topic_regex) against the topics, and
    a topic created later that matches is assigned too."""
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    for name in (f"{prefix}-a", f"{prefix}-b", f"other{prefix}"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    member = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"g-{prefix}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        member.subscribe([f"^{prefix}-.*"])

        def holds(*names: str) -> bool:
            member.poll(0.2)
            return sorted(tp.topic for tp in member.assignment()) == sorted(names)

        wait_until(lambda: holds(f"{prefix}-a", f"{prefix}-b"), 60, 0, "the matching topics")
        admin.create_topics([NewTopic(f"{prefix}-c", 1, 1)])[f"{prefix}-c"].result(30)
        wait_until(
            lambda: holds(f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"), 60, 0, "the new topic"
        )
    finally:
        member.close()
