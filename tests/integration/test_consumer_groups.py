"""Kafka consumer groups against a real gateway: confluent-kafka, kafka-python and
aiokafka members (each in its own process, so that one can be SIGKILLed), committed
offsets across gateway and broker restarts, offsets mirrored onto durable Pulsar
subscriptions, the admin view, and Kafka's error codes for bad group requests."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway_process import REPO, GatewayProcess
from harness.kafka_python_group import group_consumer
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol

PARTITIONS = 6
MIRROR_PREFIX = "__kafka.group."  # kafka.group_subscription_prefix: the gateway's subscriptions
SETTINGS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}


def _create_topic(gateway: GatewayProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def _produce(gateway: GatewayProcess, topic: str, first: int, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5})
    for number in range(first, first + count):
        producer.produce(topic, str(number).encode(), partition=number % partitions)
    assert producer.flush(30) == 0


class Member:
    """A group member process and what it reported."""

    def __init__(self, client: str, gateway: GatewayProcess, topic: str, group: str) -> None:
        self.client = client
        # the client's own log (kafka-python's group coordinator at DEBUG): a member that
        # goes silent says what it was waiting for
        self.log_path = gateway.data_dir / f"member-{uuid.uuid4().hex[:8]}.log"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.group_member", client]
                + [gateway.bootstrap, topic, group],
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=REPO,
                text=True,
            )
        self.assigned: list[int] = []
        self.records: list[tuple[int, int, str]] = []
        self.committed: dict[int, int] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self.lock:
                if "assigned" in event:
                    self.assigned = event["assigned"]
                if "records" in event:
                    self.records.extend(tuple(r) for r in event["records"])
                    for partition, offset in event["committed"].items():
                        self.committed[int(partition)] = offset

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


def _settled(members: list[Member]) -> bool:
    """Each partition owned by exactly one member; every member owns at least one."""
    owned = [p for m in members for p in m.assigned]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assigned for m in members)


def _group_state(gateway: GatewayProcess, group: str, members: list[Member]) -> str:
    """What each member reported and what the gateway logged about the group: a group that
    does not settle says why (a member that never rejoined, one that exited, a loop)."""
    reported = [(m.client, m.assigned, m.process.poll()) for m in members]
    lines = [line for line in gateway.log_tail(5000).splitlines() if group in line]
    # every member's: a stuck one may still report the partitions of an old generation
    logs = [f"{m.client} member log: " + " | ".join(_member_log(m)[-40:]) for m in members]
    return (
        f"members (client, assigned, exit code) {reported}; log: "
        + " | ".join(lines[-30:])
        + "; "
        + "; ".join(logs)
    )


def _member_log(member: Member) -> list[str]:
    """The member's last coordinator lines, without kafka-python's repeated rejoin checks
    (one per poll: they would push out the lines that say what happened)."""
    lines = member.log_path.read_text().splitlines()
    return [line for line in lines if "need_rejoin" not in line][-80:]


def _seen(members: list[Member]) -> set[str]:
    return {value for m in members for _, _, value in m.records}


def _run_group(gateway: GatewayProcess, topic_name: str, clients: list[str]) -> None:
    """Three members; one leaves, one is SIGKILLed; no loss, no re-read past a commit."""
    _create_topic(gateway, topic_name, PARTITIONS)
    group = f"group-{topic_name}"
    members = [Member(client, gateway, topic_name, group) for client in clients]
    try:
        wait_until(
            lambda: _settled(members),
            60,
            message=lambda: (
                "three members to share the partitions: " + _group_state(gateway, group, members)
            ),
        )
        _produce(gateway, topic_name, 0, 300, PARTITIONS)
        wait_until(lambda: len(_seen(members)) == 300, 60, message="the first 300 records")

        leaving, killed, survivor = members
        leaving.stop()  # LeaveGroup
        wait_until(
            lambda: _settled([killed, survivor]), 30, message="the leaver's partitions to move"
        )
        _produce(gateway, topic_name, 300, 300, PARTITIONS)
        wait_until(lambda: len(_seen(members)) == 600, 60, message="records after the leave")

        killed.kill()  # no LeaveGroup: the session timeout removes it
        _produce(gateway, topic_name, 600, 300, PARTITIONS)
        wait_until(
            lambda: _settled([survivor]), 45, message="the killed member's partitions to move"
        )
        wait_until(lambda: len(_seen(members)) == 900, 60, message="records after the kill")
    finally:
        for member in members:
            if member.process.poll() is None:
                member.stop()

    assert _seen(members) == {str(n) for n in range(900)}
    reads: dict[tuple[int, int], list[Member]] = defaultdict(list)
    for member in members:
        for partition, offset, _ in member.records:
            reads[(partition, offset)].append(member)
    for (partition, offset), readers in reads.items():
        if len(readers) > 1:
            # only what the killed member read but had not committed may be read again
            first = readers[0]
            assert first is killed, (partition, offset, [m.client for m in readers])
            assert offset >= killed.committed.get(partition, 0), (partition, offset)


@pytest.mark.parametrize(
    "clients",
    [
        ["confluent"] * 3,
        ["kafka-python"] * 3,
        ["aiokafka"] * 3,
        ["confluent", "kafka-python", "aiokafka"],
    ],
    ids=["confluent", "kafka-python", "aiokafka", "mixed"],
)
def test_group_members_share_and_move_partitions(gateway, topic_name, clients) -> None:
    _run_group(gateway, topic_name, clients)  # how fast members join: bench/kafka_groups.py


# ---- committed offsets across restarts ---------------------------------------------------

OFFSETS = {0: 3, 1: 5, 2: 7}


def _confluent_commit(bootstrap: str, topic: str, group: str) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        | {"enable.auto.commit": False, **SETTINGS}
    )
    consumer.subscribe([topic])
    deadline = time.time() + 30
    while not consumer.assignment() and time.time() < deadline:
        consumer.poll(0.2)
    consumer.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in OFFSETS.items()], asynchronous=False
    )
    consumer.close()


def _confluent_first(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        | {"enable.auto.commit": False, **SETTINGS}
    )
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.time() + 60
    while len(first) < len(OFFSETS) and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            first.setdefault(message.partition(), message.offset())
    consumer.close()
    return first


def _kafka_python_commit(bootstrap: str, topic: str, group: str) -> None:
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    consumer = group_consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    deadline = time.time() + 30
    while not consumer.assignment() and time.time() < deadline:
        consumer.poll(timeout_ms=200)
    consumer.commit({KTP(topic, p): OffsetAndMetadata(o, "kp", -1) for p, o in OFFSETS.items()})
    consumer.close()


def _kafka_python_first(bootstrap: str, topic: str, group: str) -> dict[int, int]:

    consumer = group_consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    first: dict[int, int] = {}
    deadline = time.time() + 60
    while len(first) < len(OFFSETS) and time.time() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            first.setdefault(tp.partition, records[0].offset)
    consumer.close()
    return first


async def _aiokafka_commit(bootstrap: str, topic: str, group: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    await consumer.start()
    deadline = time.time() + 30
    while not consumer.assignment() and time.time() < deadline:
        await consumer.getmany(timeout_ms=200)
    await consumer.commit({ATP(topic, p): o for p, o in OFFSETS.items()})
    await consumer.stop()


async def _aiokafka_first(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    await consumer.start()
    first: dict[int, int] = {}
    deadline = time.time() + 60
    while len(first) < len(OFFSETS) and time.time() < deadline:
        for tp, records in (await consumer.getmany(timeout_ms=500)).items():
            first.setdefault(tp.partition, records[0].offset)
    await consumer.stop()
    return first


def test_commits_survive_gateway_and_broker_restarts(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw").start()
    try:
        topic = "restart-topic"
        _create_topic(gateway, topic, len(OFFSETS))
        _produce(gateway, topic, 0, 60, len(OFFSETS))
        _confluent_commit(gateway.bootstrap, topic, "g-confluent")
        _kafka_python_commit(gateway.bootstrap, topic, "g-kafka-python")
        asyncio.run(_aiokafka_commit(gateway.bootstrap, topic, "g-aiokafka"))

        assert gateway.stop() == 0
        gateway.start()
        gateway.kill_broker()
        assert _confluent_first(gateway.bootstrap, topic, "g-confluent") == OFFSETS
        assert _kafka_python_first(gateway.bootstrap, topic, "g-kafka-python") == OFFSETS
        assert asyncio.run(_aiokafka_first(gateway.bootstrap, topic, "g-aiokafka")) == OFFSETS
    finally:
        gateway.stop()


def test_generation_does_not_go_backwards_after_restart(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw").start()
    try:
        generations = []
        for _ in range(2):
            with _RawClient(gateway) as raw:
                member = raw.join("gen-group")
                generations.append(member["generation_id"])
                raw.call(13, 1, {"group_id": "gen-group", "member_id": member["member_id"]})
            assert gateway.stop() == 0
            gateway.start()
        assert generations[1] > generations[0]
    finally:
        gateway.stop()


# ---- mirroring onto Pulsar subscriptions -------------------------------------------------


def _commit_simple(bootstrap: str, topic: str, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **SETTINGS})
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()


def _pulsar_receive(client: Any, topic: str, subscription: str, **kwargs: Any) -> list[str]:
    consumer = client.subscribe(
        topic, subscription, consumer_type=pulsar.ConsumerType.Exclusive, **kwargs
    )
    values = []
    try:
        while True:
            values.append(consumer.receive(1500).data().decode())
    except pulsar.Timeout:
        pass
    consumer.close()
    return values


def test_commit_is_mirrored_onto_the_pulsar_subscription(gateway, topic_name) -> None:
    _create_topic(gateway, topic_name, 1)
    full = f"persistent://public/default/{topic_name}-partition-0"
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}", operation_timeout_seconds=5)
    try:
        other = client.subscribe(
            full, "native-app", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = Producer({"bootstrap.servers": gateway.bootstrap})
        for number in range(20):  # one send, so one Pulsar entry, per record: exact positions
            producer.produce(topic_name, str(number).encode(), partition=0)
            producer.flush(10)
        group = f"mirror-{topic_name}"
        mirrored = MIRROR_PREFIX + group
        _commit_simple(gateway.bootstrap, topic_name, group, 7)
        gateway.wait_for_mirror(full, mirrored)
        assert _pulsar_receive(client, full, mirrored) == [str(n) for n in range(7, 20)]

        # commits while a Pulsar consumer holds the subscription: skipped, nothing breaks
        holder = client.subscribe(full, mirrored, consumer_type=pulsar.ConsumerType.Exclusive)
        _commit_simple(gateway.bootstrap, topic_name, group, 12)
        held_back = f"subscription {mirrored} on {full} is held by a Pulsar consumer"
        wait_until(
            lambda: held_back in gateway.log_tail(400),
            30,
            message="the mirror to find the subscription held and back off",
        )
        producer.produce(topic_name, b"20", partition=0)
        producer.flush(10)
        held = []
        try:
            while True:
                held.append(holder.receive(3000).data().decode())
        except pulsar.Timeout:
            pass
        assert held == [str(n) for n in range(7, 21)]  # nothing acked, nothing moved under it
        holder.close()

        # the other subscription saw everything, untouched by the group's commits
        got = []
        try:
            while True:
                message = other.receive(1500)
                got.append(message.data().decode())
                other.acknowledge(message)
        except pulsar.Timeout:
            pass
        assert got == [str(n) for n in range(21)]
    finally:
        client.close()


def test_mirror_inside_a_batch_never_skips_records(gateway, topic_name) -> None:
    """A commit in the middle of a Pulsar batch entry: the subscription sits at the start of
    that entry (pulsar-lite acknowledges whole entries), so nothing from N on is missed."""
    _create_topic(gateway, topic_name, 1)
    full = f"persistent://public/default/{topic_name}-partition-0"
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 50})
    for number in range(10):
        producer.produce(topic_name, str(number).encode(), partition=0)
    producer.flush(10)
    for number in range(10, 20):
        producer.produce(topic_name, str(number).encode(), partition=0)
    producer.flush(10)
    group = f"mirror-{topic_name}"
    _commit_simple(gateway.bootstrap, topic_name, group, 15)
    gateway.wait_for_mirror(full, MIRROR_PREFIX + group)
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}", operation_timeout_seconds=5)
    try:
        got = _pulsar_receive(client, full, MIRROR_PREFIX + group)
    finally:
        client.close()
    assert got[-5:] == [str(n) for n in range(15, 20)]
    assert got == [str(n) for n in range(int(got[0]), 20)]
    assert int(got[0]) >= 10  # the second batch's entry, not the first


# ---- admin view and lag ------------------------------------------------------------------


def test_admin_lists_groups_offsets_and_lag(gateway, topic_name) -> None:
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP

    _create_topic(gateway, topic_name, 3)
    _produce(gateway, topic_name, 0, 90, 3)
    group = f"admin-{topic_name}"
    consumer = group_consumer(
        topic_name,
        bootstrap_servers=gateway.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    deadline = time.time() + 30
    read = 0
    while read < 40 and time.time() < deadline:
        read += sum(len(rs) for rs in consumer.poll(timeout_ms=300, max_records=40 - read).values())
    consumer.commit()
    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        listed = admin.list_groups()
        assert any(g["group_id"] == group and g["protocol_type"] == "consumer" for g in listed)
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Stable"
        assert len(described["members"]) == 1
        committed = admin.list_group_offsets(group)[group]
        assert sum(meta.offset for meta in committed.values()) == 40
        latest = consumer.end_offsets([KTP(topic_name, p) for p in range(3)])
        lag = {tp.partition: latest[tp] - committed[tp].offset for tp in committed}
        assert sum(lag.values()) == 50
        assert all(v >= 0 for v in lag.values())
        consumer.close()
        assert admin.describe_groups([group])[group]["group_state"] == "Empty"
        assert admin.delete_groups([group]) == {group: "OK"}
        assert all(g["group_id"] != group for g in admin.list_groups())
    finally:
        admin.close()


# ---- bad input: Kafka's error codes ------------------------------------------------------


class _RawClient:
    def __init__(self, gateway: GatewayProcess) -> None:
        self.sock = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=30)
        self.correlation = 0

    def __enter__(self) -> _RawClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation += 1
        self.sock.sendall(protocol.encode_request(api_key, version, self.correlation, "raw", body))
        size = struct.unpack(">i", self._read(4))[0]
        return protocol.decode_response(api_key, version, memoryview(self._read(size)))

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    def join(
        self, group: str, member_id: str = "", protocol_type: str = "consumer"
    ) -> dict[str, Any]:
        body = {
            "group_id": group,
            "session_timeout_ms": 6000,
            "rebalance_timeout_ms": 6000,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
        }
        response = self.call(11, 5, body)
        if response["error_code"] == 79:  # MEMBER_ID_REQUIRED: rejoin with the given id
            body["member_id"] = response["member_id"]
            response = self.call(11, 5, body)
        return response


def test_bad_group_requests_get_kafka_error_codes(gateway, topic_name) -> None:
    group = f"bad-{topic_name}"
    with _RawClient(gateway) as raw:
        first = raw.join(group)
        assert first["error_code"] == 0
        member, generation = first["member_id"], first["generation_id"]
        sync = raw.call(
            14,
            3,
            {
                "group_id": group,
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
                "assignments": [{"member_id": member, "assignment": b""}],
            },
        )
        assert sync["error_code"] == 0
        # a different protocol type than the group's
        assert raw.join(group, protocol_type="connect")["error_code"] == 23
        # stale generation, unknown member
        hb = {"group_id": group, "member_id": member, "group_instance_id": None}
        assert raw.call(12, 3, {**hb, "generation_id": generation - 1})["error_code"] == 22
        assert raw.call(12, 3, {**hb, "generation_id": generation})["error_code"] == 0
        unknown = {**hb, "generation_id": generation, "member_id": "nobody"}
        assert raw.call(12, 3, unknown)["error_code"] == 25
        assert raw.join(group, member_id="nobody")["error_code"] == 25
        # an empty group id
        assert raw.call(12, 3, {**hb, "group_id": "", "generation_id": 1})["error_code"] == 24
        # a commit for a topic that does not exist, and a stale-generation commit
        commit = {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": "no-such-topic-anywhere",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                    ],
                }
            ],
        }
        answer = raw.call(8, 7, commit)
        assert answer["topics"][0]["partitions"][0]["error_code"] == 3
        stale = {**commit, "generation_id_or_member_epoch": generation + 5}
        assert raw.call(8, 7, stale)["topics"][0]["partitions"][0]["error_code"] == 22
        # deleting a group with members; deleting one that does not exist
        results = raw.call(42, 1, {"groups_names": [group, "never-was-a-group"]})["results"]
        assert [r["error_code"] for r in results] == [68, 69]
        left = raw.call(13, 3, {"group_id": group, "members": [{"member_id": member}]})
        assert left["error_code"] == 0 and left["members"][0]["error_code"] == 0
        # FindCoordinator v4 batched keys point at this gateway
        found = raw.call(10, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [c["port"] for c in found["coordinators"]] == [gateway.kafka_port] * 2
