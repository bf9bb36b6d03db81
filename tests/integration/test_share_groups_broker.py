"""Share groups dispatched by the broker (`kafka.share_dispatch = "broker"`,
docs/share-groups.md, "The broker dispatches"): the gateway holds one Shared consumer of
the group's Pulsar subscription per partition, and share consumers acquire only what the
broker handed it. So a Pulsar Shared consumer of the same subscription (pulsar-client) and
a Kafka share consumer (confluent-kafka 2.16's ShareConsumer) split one partition, a
record whose lock lapses goes back to the broker and comes again with its delivery count
up, a released one can reach the Pulsar consumer, and nothing is lost across a gateway
kill -9."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import GatewayProcess, set_flags
from tests.integration import test_share_groups as protocol

LOCK_MS = 1000
LIMIT = 3
SETTINGS = {
    "kafka.share_dispatch": "broker",
    "kafka.share_record_lock_duration_ms": LOCK_MS,
    "kafka.share_delivery_count_limit": LIMIT,
    "kafka.share_auto_offset_reset": "earliest",
    "kafka.group_consumer_heartbeat_interval_ms": 500,
    "kafka.group_consumer_session_timeout_ms": 3000,
}
PREFIX = "__kafka.group."  # kafka.group_subscription_prefix


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path_factory.mktemp("share-broker") / "gw", extra=set_flags(SETTINGS))
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def new_topic(bootstrap: str, values: list[bytes]) -> str:
    """A topic of one partition holding `values`, one Kafka batch (one Pulsar entry) each:
    the broker dispatches entries, so records split one by one."""
    topic = f"shareb-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for value in values:
        producer.produce(topic, value, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    return topic


def share_consumer(bootstrap: str, group: str, topic: str, **extra: object) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})
    consumer.subscribe([topic])
    return consumer


def pulsar_consumer(gateway: GatewayProcess, topic: str, group: str) -> tuple[object, object]:
    """(client, Shared consumer) on the share group's subscription of partition 0."""
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{gateway.broker_port}", operation_timeout_seconds=10
    )
    consumer = client.subscribe(
        f"persistent://public/default/{topic}-partition-0",
        PREFIX + group,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=5,
    )
    return client, consumer


def test_a_pulsar_consumer_and_a_share_consumer_split_one_partition(
    gateway: GatewayProcess,
) -> None:
    """Both take records of the one partition, and the two together get each exactly once."""
    total = 200
    values = {b"%04d" % i for i in range(total)}
    topic = new_topic(gateway.bootstrap, sorted(values))
    group = f"g-{uuid.uuid4().hex[:6]}"
    share = share_consumer(gateway.bootstrap, group, topic, **{"max.poll.records": 5})
    client, native = pulsar_consumer(gateway, topic, group)
    by_share: list[bytes] = []
    by_pulsar: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(set(by_share) | set(by_pulsar)) < total:
            assert time.monotonic() < deadline, (len(by_share), len(by_pulsar))
            for message in share.poll(0.1):
                assert message.error() is None, message.error()
                by_share.append(message.value())
            for _ in range(5):
                try:
                    message = native.receive(20)
                except pulsar.Timeout:
                    break
                by_pulsar.append(message.data())
                native.acknowledge(message)
        # what either still gets now would be a duplicate
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            by_share.extend(message.value() for message in share.poll(0.1))
            try:
                message = native.receive(50)
                by_pulsar.append(message.data())
                native.acknowledge(message)
            except pulsar.Timeout:
                pass
    finally:
        share.close()
        client.close()
    assert sorted(by_share + by_pulsar) == sorted(values), "a record was lost or came twice"
    print(f"split: share {len(by_share)}, pulsar {len(by_pulsar)}")
    assert by_share and by_pulsar, (len(by_share), len(by_pulsar))


def test_a_record_whose_lock_lapses_comes_again_with_its_delivery_count_up(
    gateway: GatewayProcess,
) -> None:
    """The holder never acknowledges: after the lock the gateway gives the entry back to
    the broker, which hands it out again; the next share consumer gets it with delivery
    count 2. Then it is rejected and never comes again (its entry is acknowledged)."""
    topic = new_topic(gateway.bootstrap, [b"only"])
    group = f"g-{uuid.uuid4().hex[:6]}"
    given_back = gateway.metric("gateway_share_entries_total", outcome="given_back")
    holder = share_consumer(
        gateway.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"}
    )
    taken: list[object] = []
    try:
        deadline = time.monotonic() + 30
        while not taken:
            assert time.monotonic() < deadline
            taken.extend(holder.poll(0.2))
        assert taken[0].value() == b"only" and taken[0].delivery_count() == 1
        started = time.monotonic()
        other = share_consumer(
            gateway.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"}
        )
        again: list[object] = []
        try:
            deadline = time.monotonic() + 30
            while not again:
                assert time.monotonic() < deadline, "the record did not come again"
                again.extend(other.poll(0.2))
            assert again[0].value() == b"only" and again[0].delivery_count() == 2
            assert time.monotonic() - started >= LOCK_MS / 1000 * 0.5
            # it came again through the broker: the gateway gave its entry back
            now = gateway.metric("gateway_share_entries_total", outcome="given_back")
            assert now >= given_back + 1
            other.acknowledge(again[0], AcknowledgeType.REJECT)
            other.commit_sync(10)
            late = time.monotonic() + 2.5  # past another lock: a rejected record stays put
            while time.monotonic() < late:
                assert list(other.poll(0.2)) == []
        finally:
            other.close()
    finally:
        holder.close()


def test_a_released_record_reaches_the_pulsar_consumer(gateway: GatewayProcess) -> None:
    """A share consumer releases the one record it got and leaves: the gateway gives its
    entry back and, its share partition idle, closes its consumer; the broker hands the
    record to the Pulsar consumer of the subscription, counting the redelivery."""
    topic = new_topic(gateway.bootstrap, [b"x"])
    group = f"g-{uuid.uuid4().hex[:6]}"
    share = share_consumer(
        gateway.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"}
    )
    client = None
    try:
        taken: list[object] = []
        deadline = time.monotonic() + 30
        while not taken:
            assert time.monotonic() < deadline
            taken.extend(share.poll(0.2))
        client, native = pulsar_consumer(gateway, topic, group)
        share.acknowledge(taken[0], AcknowledgeType.RELEASE)
        share.commit_sync(10)
        share.close()
        message = native.receive(20_000)
        assert message.data() == b"x"
        assert message.redelivery_count() >= 1
        native.acknowledge(message)
    finally:
        if client is not None:
            client.close()


def test_nothing_is_lost_across_a_gateway_kill(tmp_path) -> None:
    """A share consumer accepts half of a partition and holds some more; the gateway and its
    broker are killed -9. After the restart a share consumer and a Pulsar consumer of the
    subscription finish the partition: no accepted record comes again, none is lost, and a
    held record that the share consumer gets again comes with delivery count 2."""
    gw = GatewayProcess(tmp_path / "gw", extra=set_flags(SETTINGS)).start()
    total = 60
    try:
        values = {b"%03d" % i for i in range(total)}
        topic = new_topic(gw.bootstrap, sorted(values))
        group = f"g-{uuid.uuid4().hex[:6]}"
        consumer = share_consumer(
            gw.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"}
        )
        accepted: set[bytes] = set()
        held: set[bytes] = set()
        try:
            deadline = time.monotonic() + 60
            while len(accepted) < total // 2:
                assert time.monotonic() < deadline
                for message in consumer.poll(0.2):
                    if len(accepted) < total // 2:
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                        accepted.add(message.value())
                    else:
                        held.add(message.value())
            consumer.commit_sync(10)
        finally:
            gw.kill()
            consumer.close()
        gw.start()
        counts: dict[bytes, int] = {}
        by_share: list[bytes] = []
        by_pulsar: list[bytes] = []
        # the Pulsar consumer first: the broker hands it some of what the gateway held,
        # which the restarted gateway must then not hand its share consumer
        client, native = pulsar_consumer(gw, topic, group)
        first = native.receive(30_000)
        by_pulsar.append(first.data())
        native.acknowledge(first)
        again = share_consumer(gw.bootstrap, group, topic, **{"max.poll.records": 5})
        try:
            deadline = time.monotonic() + 60
            while (set(by_share) | set(by_pulsar) | accepted) != values:
                assert time.monotonic() < deadline, (len(by_share), len(by_pulsar))
                for message in again.poll(0.1):
                    by_share.append(message.value())
                    counts[message.value()] = message.delivery_count()
                try:
                    message = native.receive(20)
                    by_pulsar.append(message.data())
                    native.acknowledge(message)
                except pulsar.Timeout:
                    pass
        finally:
            again.close()
            client.close()
        assert not (set(by_share + by_pulsar) & accepted), "an accepted record came back"
        assert len(by_share + by_pulsar) == len(set(by_share + by_pulsar)), "one came twice"
        assert held and all(counts[value] == 2 for value in held & set(by_share)), counts
    finally:
        gw.stop()


# The share-group protocol tests of test_share_groups.py, on the broker's dispatch: the
# same behaviour whoever hands out the records (not collected there under these names).
def test_release_reject_and_the_limit(gateway: GatewayProcess) -> None:
    protocol.test_release_redelivers_reject_does_not_and_the_limit_archives(gateway)


@pytest.mark.parametrize("entry_format", ["kafka", "pulsar"])
def test_part_of_a_batch_is_redelivered_alone(gateway: GatewayProcess, entry_format: str) -> None:
    """A record released from a batch whose others were accepted stays with the share
    consumers (the broker would give back the whole entry) and comes again alone."""
    protocol.test_part_of_a_batch_is_redelivered_alone(gateway, entry_format)


def test_read_committed(gateway: GatewayProcess) -> None:
    protocol.test_read_committed_share_group_skips_aborted_and_open_transactions(gateway)


def test_share_group_offsets(gateway: GatewayProcess) -> None:
    """AlterShareGroupOffsets holds on this path too: the broker hands back the entries
    below the new start (the subscription is not moved) and they are acknowledged."""
    protocol.test_share_group_offsets_are_described_altered_and_deleted_on_the_wire(gateway)


def test_nothing_is_lost_across_a_broker_kill(gateway: GatewayProcess) -> None:
    """The broker is killed -9 while a share consumer and a Pulsar consumer split a
    partition: the gateway's consumer subscribes again and the broker hands out again what
    was not acknowledged, so the two together still get every record (an acknowledgement
    the kill lost may bring a record twice: at least once)."""
    total = 100
    values = {b"%03d" % i for i in range(total)}
    topic = new_topic(gateway.bootstrap, sorted(values))
    group = f"g-{uuid.uuid4().hex[:6]}"
    share = share_consumer(gateway.bootstrap, group, topic, **{"max.poll.records": 5})
    client, native = pulsar_consumer(gateway, topic, group)
    got: set[bytes] = set()
    killed = False
    deadline = time.monotonic() + 90
    try:
        while got != values:
            assert time.monotonic() < deadline, f"{len(got)} of {total}"
            if not killed and len(got) >= total // 2:
                gateway.kill_broker()
                killed = True
            for message in share.poll(0.1):
                got.add(message.value())
            try:
                message = native.receive(20)
                got.add(message.data())
                native.acknowledge(message)
            except pulsar.Timeout:
                pass
    finally:
        share.close()
        client.close()
    assert killed
