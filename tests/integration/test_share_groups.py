"""Share groups (KIP-932) with a real share consumer (confluent-kafka 2.16's ShareConsumer,
librdkafka's): consumers of one partition split its records, a record not acknowledged comes
back after its lock, RELEASE redelivers and REJECT does not, the delivery count limit holds,
and nothing acknowledged or unacknowledged is lost across a gateway kill -9."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from harness import kafka_wire
from harness.gateway_process import GatewayProcess, set_flags
from harness.group_configs import set_group_config
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

LOCK_MS = 1000
LIMIT = 3
SETTINGS = {
    "kafka.share_record_lock_duration_ms": LOCK_MS,
    "kafka.share_delivery_count_limit": LIMIT,
    "kafka.share_auto_offset_reset": "earliest",
    "kafka.share_partition_max_record_locks": 100,
    "kafka.group_consumer_heartbeat_interval_ms": 500,
    "embedded.log_level": "info",  # wait_for_mirror reads the broker's log
}
MIRROR_PREFIX = "__kafka.group."  # kafka.group_subscription_prefix


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path_factory.mktemp("share") / "gw", extra=set_flags(SETTINGS))
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def new_topic(bootstrap: str, values: list[bytes], partitions: int = 1) -> str:
    topic = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    return topic


def share_consumer(
    bootstrap: str, group: str, topic: str, explicit: bool = False, **extra: object
) -> ShareConsumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, **extra}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    return consumer


def poll_until(
    consumers: list[ShareConsumer],
    done: Callable[[], bool],
    handle: Callable[[int, object], None],
    timeout: float = 60,
) -> None:
    """Poll each consumer in turn, handing every record to `handle`, until `done`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "share consumers did not get there in time"
        for number, consumer in enumerate(consumers):
            for message in consumer.poll(0.2):
                assert message.error() is None, message.error()
                handle(number, message)


def test_two_share_consumers_split_one_partition(gateway: GatewayProcess) -> None:
    total = 400
    topic = new_topic(gateway.bootstrap, [b"%04d" % i for i in range(total)])
    group = f"g-{uuid.uuid4().hex[:6]}"
    # a few records per fetch (ShareFetch's MaxRecords), so that neither holds them all
    consumers = [
        share_consumer(gateway.bootstrap, group, topic, **{"max.poll.records": 10})
        for _ in range(2)
    ]
    seen: dict[bytes, int] = {}
    duplicates: list[bytes] = []

    def handle(number: int, message: object) -> None:
        value = message.value()
        if value in seen:
            duplicates.append(value)
        seen[value] = number

    try:
        poll_until(consumers, lambda: len(seen) == total, handle)
    finally:
        for consumer in consumers:
            consumer.close()
    assert duplicates == []
    per_consumer = [sum(1 for n in seen.values() if n == who) for who in (0, 1)]
    assert min(per_consumer) > 0, per_consumer  # both took records of the one partition
    assert gateway.metric("gateway_records_out_total", topic=topic) >= total


def test_an_unacknowledged_record_is_redelivered_after_its_lock(gateway: GatewayProcess) -> None:
    topic = new_topic(gateway.bootstrap, [b"only"])
    group = f"g-{uuid.uuid4().hex[:6]}"
    holder = share_consumer(gateway.bootstrap, group, topic, explicit=True)
    taken: list[object] = []
    try:
        poll_until([holder], lambda: bool(taken), lambda _n, m: taken.append(m))
        assert taken[0].delivery_count() == 1
        started = time.monotonic()
        other = share_consumer(gateway.bootstrap, group, topic)
        again: list[object] = []
        try:
            poll_until([other], lambda: bool(again), lambda _n, m: again.append(m), 30)
        finally:
            other.close()
        assert again[0].value() == b"only" and again[0].delivery_count() == 2
        assert time.monotonic() - started >= LOCK_MS / 1000 * 0.5
    finally:
        holder.close()


def test_release_redelivers_reject_does_not_and_the_limit_archives(
    gateway: GatewayProcess,
) -> None:
    topic = new_topic(gateway.bootstrap, [b"release-me", b"reject-me", b"accept-me"])
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = share_consumer(gateway.bootstrap, group, topic, explicit=True)
    deliveries: list[tuple[bytes, int]] = []
    kinds = {
        b"release-me": AcknowledgeType.RELEASE,
        b"reject-me": AcknowledgeType.REJECT,
        b"accept-me": AcknowledgeType.ACCEPT,
    }

    def handle(_number: int, message: object) -> None:
        deliveries.append((message.value(), message.delivery_count()))
        consumer.acknowledge(message, kinds[message.value()])

    try:
        poll_until([consumer], lambda: (b"release-me", LIMIT) in deliveries, handle, timeout=60)
        consumer.commit_sync(10)
        # past the limit the released record is archived: nothing more comes
        end = time.monotonic() + 2 * LOCK_MS / 1000
        while time.monotonic() < end:
            for message in consumer.poll(0.2):
                deliveries.append((message.value(), message.delivery_count()))
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
    finally:
        consumer.close()
    assert deliveries.count((b"reject-me", 1)) == 1
    assert [v for v, _ in deliveries].count(b"reject-me") == 1
    assert [v for v, _ in deliveries].count(b"accept-me") == 1
    assert [c for v, c in deliveries if v == b"release-me"] == list(range(1, LIMIT + 1))


def test_nothing_is_lost_across_a_gateway_kill(tmp_path) -> None:
    gw = GatewayProcess(tmp_path / "gw", extra=set_flags(SETTINGS)).start()
    try:
        total = 60
        topic = new_topic(gw.bootstrap, [b"%03d" % i for i in range(total)])
        group = f"g-{uuid.uuid4().hex[:6]}"
        consumer = share_consumer(gw.bootstrap, group, topic, explicit=True)
        accepted: set[bytes] = set()
        held: set[bytes] = set()
        try:

            def first_half(_number: int, message: object) -> None:
                if len(accepted) < total // 2:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    accepted.add(message.value())
                else:  # held, never acknowledged: their locks die with the gateway
                    held.add(message.value())

            poll_until([consumer], lambda: len(accepted) >= total // 2, first_half)
            consumer.commit_sync(10)
        finally:
            gw.kill()
            consumer.close()
        gw.start()
        after: list[bytes] = []
        counts: dict[bytes, int] = {}

        def rest(_number: int, message: object) -> None:
            after.append(message.value())
            counts[message.value()] = message.delivery_count()

        again = share_consumer(gw.bootstrap, group, topic)
        try:
            poll_until([again], lambda: len(set(after) | accepted) == total, rest)
        finally:
            again.close()
        assert not (set(after) & accepted), "an accepted record came back after the kill"
        assert set(after) | accepted == {b"%03d" % i for i in range(total)}
        # the deliveries before the kill were counted durably
        assert held and all(counts[value] == 2 for value in held), (held, counts)
    finally:
        gw.stop()


def share_offsets(gateway: GatewayProcess, group: str, topic: str) -> list[tuple[int, int]]:
    """(start offset, lag) of each partition of `topic` the share group has read
    (DescribeShareGroupOffsets v1)."""
    body = {"groups": [{"group_id": group, "topics": None}]}
    answer = kafka_wire.call(gateway.kafka_port, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, body)
    (described,) = answer["groups"]
    assert described["error_code"] == 0, described
    return [
        (part["start_offset"], part["lag"])
        for entry in described["topics"]
        if entry["topic_name"] == topic
        for part in entry["partitions"]
    ]


def test_two_consumers_splitting_a_partition_lose_nothing_across_a_kill(tmp_path) -> None:
    """Two share consumers split one partition, accepting what they get; each ends by holding
    one fetched batch unacknowledged (librdkafka's explicit mode wants a batch settled before
    the next poll, so a holder stops polling), the second once half the partition is
    accepted, and then the gateway (and its broker) is killed -9. After a restart on the
    same data directory two new consumers of the group finish the partition: no record
    whose acceptance the gateway confirmed comes again, every held record comes again with
    its delivery count one higher than before the kill (the count was stored), and every
    record is delivered. The lock (30 s) outlives the first half, so the held records were
    delivered exactly once before the kill."""
    settings = {**SETTINGS, "kafka.share_record_lock_duration_ms": 30000}
    gw = GatewayProcess(tmp_path / "gw", extra=set_flags(settings)).start()
    try:
        total = 200
        everything = {b"%03d" % i for i in range(total)}
        topic = new_topic(gw.bootstrap, sorted(everything))
        group = f"g-{uuid.uuid4().hex[:6]}"
        consumers = [
            share_consumer(gw.bootstrap, group, topic, explicit=True, **{"max.poll.records": 10})
            for _ in range(2)
        ]
        confirmed: set[bytes] = set()  # accepted, and the gateway answered the commit
        unconfirmed: set[bytes] = set()  # accepted when the kill came: either way is right
        held: dict[bytes, int] = {}  # never acknowledged: value -> delivery count seen
        holding: set[int] = set()  # consumers that hold a batch and poll no more
        taken_by = [0, 0]
        try:
            deadline = time.monotonic() + 60
            while len(holding) < 2:
                assert time.monotonic() < deadline, "the first half was not read in time"
                for number, consumer in enumerate(consumers):
                    if number in holding:
                        continue
                    batch = consumer.poll(0.2)
                    assert all(message.error() is None for message in batch)
                    taken_by[number] += len(batch)
                    hold_now = len(confirmed) >= total // (4 if number else 2)
                    if batch and hold_now:
                        holding.add(number)
                        held.update((m.value(), m.delivery_count()) for m in batch)
                        continue
                    if not batch:
                        continue
                    for message in batch:
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    accepted = {message.value() for message in batch}
                    unconfirmed |= accepted
                    results = consumer.commit_sync(10)
                    if results and all(error is None for error in results.values()):
                        confirmed |= accepted
                        unconfirmed -= accepted
            before = share_offsets(gw, group, topic)  # (start, lag) with both holding
        finally:
            gw.kill()  # both consumers mid-session, each holding a batch
            for consumer in consumers:
                consumer.close()
        assert min(taken_by) > 0, taken_by  # both took records of the one partition
        assert held and all(count == 1 for count in held.values()), held

        gw.start()
        # the start and what is settled above it survived: the same start, the same lag
        assert share_offsets(gw, group, topic) == before and before[0][0] > 0, before
        counts: dict[bytes, list[int]] = {}

        def rest(_number: int, message: object) -> None:
            counts.setdefault(message.value(), []).append(message.delivery_count())

        again = [share_consumer(gw.bootstrap, group, topic) for _ in range(2)]
        try:
            poll_until(again, lambda: confirmed | set(counts) == everything, rest)
        finally:
            for consumer in again:
                consumer.close()
        assert not (set(counts) & confirmed), "a record accepted before the kill came back"
        assert set(held) <= set(counts), "a held record was lost"
        assert all(counts[value][0] == 2 for value in held), {v: counts[v] for v in held}
        assert confirmed | unconfirmed | set(counts) == everything
    finally:
        gw.stop()


def test_the_share_groups_subscription_sits_at_its_first_unsettled_record(
    gateway: GatewayProcess,
) -> None:
    """A Pulsar consumer on the share group's subscription starts where the share group has
    settled everything before: Pulsar's backlog is what the group still has to deliver."""
    topic = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for number in range(20):  # one send, so one Pulsar entry, per record: exact positions
        producer.produce(topic, str(number).encode(), partition=0)
        producer.flush(10)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = share_consumer(gateway.bootstrap, group, topic, explicit=True)
    accepted: list[int] = []

    def first_seven(_number: int, message: object) -> None:
        if message.offset() < 7:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            accepted.append(message.offset())

    try:
        poll_until([consumer], lambda: len(accepted) == 7, first_seven)
        consumer.commit_sync(10)
    finally:
        consumer.close()  # releases what it still holds: 7 on stay unsettled
    full = f"persistent://public/default/{topic}-partition-0"
    gateway.wait_for_mirror(full, MIRROR_PREFIX + group)
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}", operation_timeout_seconds=5)
    try:
        reader = client.subscribe(
            full, MIRROR_PREFIX + group, consumer_type=pulsar.ConsumerType.Exclusive
        )
        got = []
        try:
            while True:
                got.append(reader.receive(1500).data().decode())
        except pulsar.Timeout:
            pass
        reader.close()
    finally:
        client.close()
    assert got == [str(n) for n in range(7, 20)]


def test_a_group_config_sets_where_the_share_group_starts(gateway: GatewayProcess) -> None:
    """share.auto.offset.reset=latest on the group (AdminClient's IncrementalAlterConfigs on
    a GROUP resource) wins over the gateway's earliest: records from before never come."""
    topic = new_topic(gateway.bootstrap, [b"old-%d" % i for i in range(5)])
    group = f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    set_group_config(admin, group, "share.auto.offset.reset", "latest")
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    configs = next(iter(described.values())).result(30)
    assert configs["share.auto.offset.reset"].value == "latest"
    consumer = share_consumer(gateway.bootstrap, group, topic)
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        number = 0
        while not got:  # new records until the group, started at the end, sees one
            assert time.monotonic() < deadline, "no new record reached the share group"
            producer.produce(topic, b"new-%d" % number, partition=0)
            producer.flush(10)
            number += 1
            got += [message.value() for message in consumer.poll(0.5)]
    finally:
        consumer.close()
    assert all(value.startswith(b"new-") for value in got), got


@pytest.mark.parametrize("entry_format", ["kafka", "pulsar"])
def test_part_of_a_batch_is_redelivered_alone(gateway: GatewayProcess, entry_format: str) -> None:
    """The odd records of one produced batch released, the even ones accepted; only the odd
    ones come back: from a batch stored whole (`pulsar.entry.format=kafka`), served whole
    with the acquired offset ranges, and from one stored a message per record (`pulsar`),
    served as batches with gaps in their offsets."""
    topic = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    new = NewTopic(topic, 1, 1, config={"pulsar.entry.format": entry_format})
    admin.create_topics([new])[topic].result(30)
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 100})
    for number in range(20):
        producer.produce(topic, b"%02d" % number, partition=0)
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = share_consumer(gateway.bootstrap, group, topic, explicit=True)
    first: dict[int, int] = {}
    again: list[tuple[int, int]] = []

    def handle(_number: int, message: object) -> None:
        number = int(message.value())
        if number in first:
            again.append((number, message.delivery_count()))
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            return
        first[number] = message.delivery_count()
        kind = AcknowledgeType.RELEASE if number % 2 else AcknowledgeType.ACCEPT
        consumer.acknowledge(message, kind)

    try:
        poll_until([consumer], lambda: len(first) == 20 and len(again) >= 10, handle)
        consumer.commit_sync(10)
        end = time.monotonic() + 2 * LOCK_MS / 1000
        while time.monotonic() < end:  # nothing more comes
            for message in consumer.poll(0.2):
                again.append((int(message.value()), message.delivery_count()))
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
    finally:
        consumer.close()
    assert set(first.values()) == {1}
    assert sorted(again) == [(n, 2) for n in range(1, 20, 2)]


def test_read_committed_share_group_skips_aborted_and_open_transactions(
    gateway: GatewayProcess,
) -> None:
    """share.isolation.level=read_committed (a group config): records of an aborted
    transaction never come, those of an open one only once it commits."""
    topic = new_topic(gateway.bootstrap, [b"plain-0"])
    group = f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    set_group_config(admin, group, "share.isolation.level", "read_committed")
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": f"tx-{group}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number in range(3):
        producer.produce(topic, b"aborted-%d" % number, partition=0)
    producer.flush(30)  # stored before the abort (else the client drops them unsent)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed-0", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"later-0", partition=0)
    producer.flush(30)  # stored, not yet committed
    consumer = share_consumer(gateway.bootstrap, group, topic)
    got: list[bytes] = []
    try:
        poll_until([consumer], lambda: b"committed-0" in got, lambda _n, m: got.append(m.value()))
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # the open transaction's record does not come
            got += [m.value() for m in consumer.poll(0.2) if m.error() is None]
        assert b"later-0" not in got
        producer.commit_transaction(30)
        poll_until([consumer], lambda: b"later-0" in got, lambda _n, m: got.append(m.value()))
    finally:
        consumer.close()
    assert sorted(got) == [b"committed-0", b"later-0", b"plain-0"]


def once_empty(gateway: GatewayProcess, api: ApiKey, body: dict) -> dict:
    """The answer to an Alter/DeleteShareGroupOffsets request once the group is empty: a
    closed consumer's leave reaches the gateway with its close, and until then the group
    answers NON_EMPTY_GROUP."""
    answers: list[dict] = []

    def done() -> bool:
        answers.append(kafka_wire.call(gateway.kafka_port, api, 0, body))
        return answers[-1]["error_code"] != ErrorCode.NON_EMPTY_GROUP

    wait_until(done, 10, 0.1, "the share group to be empty")
    return answers[-1]


def test_share_group_offsets_are_described_altered_and_deleted_on_the_wire(
    gateway: GatewayProcess,
) -> None:
    """DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets (no
    Python client has them yet: raw requests) beside a ShareConsumer: the start and lag of
    what it settled, a new start that the next consumer of the group begins at, and the
    group's state dropped."""
    topic = new_topic(gateway.bootstrap, [b"%02d" % i for i in range(20)])
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = share_consumer(gateway.bootstrap, group, topic, explicit=True)
    accepted: list[int] = []

    def first_eight(_number: int, message: object) -> None:
        kind = AcknowledgeType.ACCEPT if message.offset() < 8 else AcknowledgeType.RELEASE
        consumer.acknowledge(message, kind)
        if kind == AcknowledgeType.ACCEPT:
            accepted.append(message.offset())

    try:
        poll_until([consumer], lambda: len(accepted) == 8, first_eight)
        consumer.commit_sync(10)
    finally:
        consumer.close()

    assert share_offsets(gateway, group, topic) == [(8, 12)]
    alter = {
        "group_id": group,
        "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 15}]}
        ],
    }
    answer = once_empty(gateway, ApiKey.ALTER_SHARE_GROUP_OFFSETS, alter)
    assert answer["error_code"] == 0 and answer["responses"][0]["partitions"][0]["error_code"] == 0
    assert share_offsets(gateway, group, topic) == [(15, 5)]
    after = share_consumer(gateway.bootstrap, group, topic)
    got: list[bytes] = []
    try:
        poll_until([after], lambda: len(got) >= 5, lambda _n, m: got.append(m.value()))
    finally:
        after.close()
    assert sorted(got) == [b"%02d" % i for i in range(15, 20)]
    delete = {"group_id": group, "topics": [{"topic_name": topic}]}
    deleted = once_empty(gateway, ApiKey.DELETE_SHARE_GROUP_OFFSETS, delete)
    assert deleted["error_code"] == 0 and deleted["responses"][0]["error_code"] == 0
    assert share_offsets(gateway, group, topic) == []
