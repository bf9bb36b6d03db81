"""DeleteTopics deletes at once for every API (docs/pulsar-mapping.md, 'Deleting topics').

- The embedded broker has no admin API and cannot delete stored messages: the topic is
  retired in the metadata store, so Metadata, Produce and Fetch answer for it as for an
  unknown topic, its groups' offsets go, and a topic created again under the name is a new
  incarnation on fresh Pulsar topics (`<topic>=<n>`) that starts empty at offset 0. The old
  Pulsar topics are listed by `pulsar-gateway topics pending-deletion`.
- With `pulsar.admin_url` (here a stand-in admin API in front of a separate broker) the
  topic is deleted through the admin API, and the gateway's record of it, its offset-index
  checkpoints and every group's committed offsets on it go too.
- In a cluster every member follows the metadata store: a topic deleted through one member
  is gone on the other.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonPartition
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonTopic

from harness import kafka_wire
from harness.gateway_process import GatewayProcess, cluster_member
from harness.group_configs import set_group_config
from harness.kafka_python_group import group_consumer
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.tools.gateway_link import discover

DELETE_TOPICS = 20
METADATA = 3


def _create_and_fill(bootstrap: str, topic: str, group: str, partitions: int) -> None:
    """`partitions` partitions of three records each, and `group` committed at 2 on each."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(3 * partitions):
        producer.produce(topic, str(number).encode(), partition=number % partitions)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = [TopicPartition(topic, index, 2) for index in range(partitions)]
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()


def _committed(bootstrap: str, topic: str, group: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        wanted = [TopicPartition(topic, index) for index in range(partitions)]
        return [tp.offset for tp in consumer.committed(wanted, timeout=30)]
    finally:
        consumer.close()


def _pulsar_values(service_url: str, pulsar_topic: str) -> list[bytes]:
    """Every message of a Pulsar topic, read by a plain Pulsar reader."""
    client = pulsar.Client(service_url)
    try:
        reader = client.create_reader(pulsar_topic, pulsar.MessageId.earliest)
        values = []
        while True:
            try:
                values.append(reader.read_next(1000).data())
            except pulsar.Timeout:
                return values
    finally:
        client.close()


def _metadata(service_url: str) -> dict[str, object]:
    """Every key of the gateway's metadata store with its value, as a gateway starting now
    would load it."""

    async def load() -> dict[str, object]:
        backend = PulsarBackend(service_url)
        await backend.start()
        try:
            store = MetadataStore(backend, DEFAULT_METADATA_NAMESPACE)
            await store.load()
            table = dict(store.items(""))
            await store.close()
            return table
        finally:
            await backend.close()

    return asyncio.run(load())


def _metadata_keys(service_url: str) -> list[str]:
    return list(_metadata(service_url))


def _pending_deletion(gateway: GatewayProcess) -> list[dict[str, object]]:
    answer = subprocess.run(
        [
            sys.executable,
            "-m",
            "pulsar_gateway.cli",
            "topics",
            "pending-deletion",
            "--gateway-health",
            f"http://127.0.0.1:{gateway.metrics_port}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(answer.stdout)


def test_deleted_topic_is_gone_at_once_and_comes_back_empty(gateway, topic_name) -> None:
    group = f"g-{topic_name}"
    _create_and_fill(gateway.bootstrap, topic_name, group, 2)
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.delete_topics([topic_name])[topic_name].result(30)

    # gone for every API at once: listed nowhere, unknown to Metadata (no auto-create),
    # to Fetch and to ListOffsets
    assert topic_name not in admin.list_topics(timeout=10).topics
    answer = kafka_wire.call(
        gateway.kafka_port,
        METADATA,
        9,
        {"topics": [{"name": topic_name}], "allow_auto_topic_creation": False},
    )["topics"][0]
    assert answer["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    deleted_again = kafka_wire.call(
        gateway.kafka_port, DELETE_TOPICS, 5, {"topic_names": [topic_name], "timeout_ms": 1000}
    )["responses"][0]
    assert deleted_again["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # a Produce auto-creates a NEW topic (the gateway's default: one partition) from offset 0
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    producer.produce(topic_name, b"new", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        partition = TopicPartition(topic_name, 0)
        assert consumer.get_watermark_offsets(partition, timeout=10) == (0, 1)
        # the group's offsets on the old topic went with it
        assert consumer.committed([partition], timeout=10)[0].offset == -1001
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        values: list[bytes] = []

        def read_one() -> bool:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
            return bool(values)

        wait_until(read_one, 30, 0, "the new topic's record")
    finally:
        consumer.close()
    assert values == [b"new"]

    # a Pulsar reader sees each incarnation on its own topics
    service_url = discover(f"http://127.0.0.1:{gateway.metrics_port}").service_url
    full = f"persistent://public/default/{topic_name}"
    assert _pulsar_values(service_url, f"{full}=1-partition-0") == [b"new"]
    assert _pulsar_values(service_url, f"{full}-partition-0") == [b"0", b"2", b"4"]
    waiting = [row for row in _pending_deletion(gateway) if row["kafka_topic"] == topic_name]
    assert [(row["pulsar_topics"], row["incarnations"], row["partitions"]) for row in waiting] == [
        ([full, full], [0, 0], 2)
    ]
    left = [key for key in _metadata_keys(service_url) if f"{topic_name}-partition-" in key]
    assert left == [], "no offsets or checkpoints of the old incarnation may stay"


def _kafka_python_cycle(bootstrap: str, topic: str, group: str, cycle: int) -> None:
    """One life of the topic: created, written by a producer, read and committed by a group
    member, deleted under the member's feet."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KafkaPythonTopic(topic, 2, 1)])
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for number in range(4):
            producer.send(topic, f"{cycle}-{number}".encode(), partition=number % 2)
        producer.flush(30)
        producer.close()
        consumer = group_consumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=200,
        )
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 4 and time.monotonic() < deadline:
            values += [record.value for record in consumer]
        # a new incarnation holds only its own records, from offset 0
        assert sorted(values) == [f"{cycle}-{number}".encode() for number in range(4)]
        consumer.commit()
        admin.delete_topics([topic])
        consumer.close(autocommit=False)
    finally:
        admin.close()


def test_delete_and_recreate_in_a_loop_leaves_no_trace(gateway, topic_name) -> None:
    """kafka-python creates, fills, consumes in a group and deletes the same name again and
    again: each incarnation starts at 0 with only its records, no offsets carry over, and
    the metadata store keeps two keys of constant size for the name (its last incarnation,
    and the run of incarnations waiting for reclamation), nothing else per cycle."""
    group = f"g-{topic_name}"
    service_url = discover(f"http://127.0.0.1:{gateway.metrics_port}").service_url
    cycles = 8
    for cycle in range(cycles):
        _kafka_python_cycle(gateway.bootstrap, topic_name, group, cycle)
    consumer = KafkaConsumer(bootstrap_servers=gateway.bootstrap, group_id=group)
    try:
        partition = KafkaPythonPartition(topic_name, 0)
        assert consumer.committed(partition) is None
    finally:
        consumer.close()
    table = _metadata(service_url)
    full = f"persistent://public/default/{topic_name}"
    kept = sorted(key for key in table if full in key)
    # two keys whatever the number of cycles: the last incarnation, and the old ones as one
    # run (0 to the last, two partitions each)
    assert kept == [f"kafka-topic-incarnation/{full}", f"kafka-topic-reclaim/{full}"]
    assert table[f"kafka-topic-incarnation/{full}"] == {"incarnation": cycles - 1}
    (run,) = table[f"kafka-topic-reclaim/{full}"]["runs"]
    assert run[:3] == [0, cycles - 1, 2]


def test_a_deleted_topic_leaves_no_share_group_state(gateway, topic_name) -> None:
    """A share group reads each incarnation of a topic deleted and created again: each time
    it gets exactly the new incarnation's records, and once the topic is deleted the
    metadata store keeps no share state of any incarnation (only the group's own entry),
    so delete/create cycles with share consumers do not grow the store."""
    group = f"sg-{topic_name}"
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    set_group_config(admin, group, "share.auto.offset.reset", "earliest")
    for cycle in range(3):
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
        producer = Producer({"bootstrap.servers": gateway.bootstrap})
        for number in range(3):
            producer.produce(topic_name, f"{cycle}-{number}".encode(), partition=0)
        assert producer.flush(30) == 0
        consumer = ShareConsumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
        consumer.subscribe([topic_name])
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 3:
                assert time.monotonic() < deadline, got
                got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
            consumer.commit_sync(10)
        finally:
            consumer.close()
        assert sorted(got) == [f"{cycle}-{number}".encode() for number in range(3)]
        admin.delete_topics([topic_name])[topic_name].result(30)
    service_url = discover(f"http://127.0.0.1:{gateway.metrics_port}").service_url
    kept = [
        key
        for key in _metadata(service_url)
        if key.startswith("kafka-share") and quote(group, safe="") in key
    ]
    assert kept == [f"kafka-share-groups/{quote(group, safe='')}"], kept


class _AdminStandIn(BaseHTTPRequestHandler):
    """Pulsar's admin REST API, as far as the gateway calls it: accepts, and remembers."""

    calls: list[tuple[str, str]]

    def _answer(self) -> None:
        self.calls.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(204)
        self.end_headers()

    do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


@pytest.fixture
def admin_api() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    calls: list[tuple[str, str]] = []
    handler = type("Handler", (_AdminStandIn,), {"calls": calls})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", calls
    finally:
        server.shutdown()
        server.server_close()


def test_with_an_admin_api_the_topic_and_all_it_left_go(
    tmp_path: Path, topic_name: str, admin_api: tuple[str, list[tuple[str, str]]]
) -> None:
    admin_url, calls = admin_api
    loop = asyncio.new_event_loop()
    broker = EmbeddedBroker(tmp_path / "cluster")
    loop.run_until_complete(broker.start())
    try:
        extra = ["--pulsar-url", broker.service_url, "--set", f"pulsar.admin_url={admin_url}"]
        gw = GatewayProcess(tmp_path / "gw", extra=[*extra, "--set", "kafka.index_interval=1"])
        gw.start()
        full = f"persistent://public/default/{topic_name}"
        group = f"g-{topic_name}"
        try:
            _create_and_fill(gw.bootstrap, topic_name, group, 2)
            assert ("PUT", f"/admin/v2/persistent/public/default/{topic_name}/partitions") in calls

            def checkpoints() -> list[str]:
                prefix = f"offset-index/{full}-partition-"
                return [key for key in _metadata_keys(broker.service_url) if key.startswith(prefix)]

            wait_until(checkpoints, 30, 0.2, "offset-index checkpoints of the topic")

            admin = AdminClient({"bootstrap.servers": gw.bootstrap})
            admin.delete_topics([topic_name])[topic_name].result(30)
            assert (
                "DELETE",
                f"/admin/v2/persistent/public/default/{topic_name}/partitions?force=true",
            ) in calls
            assert topic_name not in admin.list_topics(timeout=10).topics
            assert _committed(gw.bootstrap, topic_name, group, 2) == [-1001, -1001]
        finally:
            assert gw.stop() == 0, gw.log_tail()
        left = [key for key in _metadata_keys(broker.service_url) if topic_name in key]
        assert left == [], "the deleted topic's record, checkpoints and group offsets must go"
    finally:
        loop.run_until_complete(broker.stop())
        loop.close()


def test_a_cluster_member_sees_the_deletion_of_another(tmp_path: Path, topic_name: str) -> None:
    broker = SharedBroker(tmp_path / "broker").start()
    members: list[GatewayProcess] = []
    try:
        for node in (1, 2):
            member = cluster_member(tmp_path / f"g{node}", broker.service_url, f"m{node}", node)
            members.append(member.start())
        first, second = (member.bootstrap for member in members)
        group = f"g-{topic_name}"
        _create_and_fill(first, topic_name, group, 2)
        other = AdminClient({"bootstrap.servers": second})
        wait_until(
            lambda: topic_name in other.list_topics(timeout=10).topics,
            30,
            0.1,
            "the topic on the second member",
        )
        deleter = AdminClient({"bootstrap.servers": first})
        deleter.delete_topics([topic_name])[topic_name].result(30)
        wait_until(
            lambda: topic_name not in other.list_topics(timeout=10).topics,
            30,
            0.1,
            "the deletion on the second member",
        )
        assert _committed(second, topic_name, group, 2) == [-1001, -1001]
        # created again through the second member: empty, from 0, on both
        other.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
        for servers in (first, second):
            consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
            try:
                wait_until(
                    lambda consumer=consumer: (
                        consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
                        == (0, 0)
                    ),
                    30,
                    0.2,
                    f"an empty new incarnation through {servers}",
                )
            finally:
                consumer.close()
    finally:
        for member in members:
            member.stop()
        broker.stop()


def test_a_topic_an_earlier_version_marked_deleted_comes_back_as_a_new_incarnation(
    tmp_path: Path, topic_name: str
) -> None:
    """Upgrade path: earlier versions "deleted" on the embedded broker by marking the record
    deleted, the data staying. Created again, the name becomes incarnation 1 on fresh Pulsar
    topics (empty, from 0), and the old data is listed as waiting for reclamation."""
    broker = SharedBroker(tmp_path / "broker").start()
    full = f"persistent://public/default/{topic_name}"
    old = {"partitions": 1, "configs": {}, "log_start": [0], "deleted": True, "topic_id": "x"}

    async def leave_a_marked_record() -> None:
        backend = PulsarBackend(broker.service_url)
        await backend.start()
        try:
            store = MetadataStore(backend, DEFAULT_METADATA_NAMESPACE)
            await store.load()
            await store.put(f"kafka-topic/{full}", old)
            await store.close()
        finally:
            await backend.close()

    try:
        asyncio.run(leave_a_marked_record())
        client = pulsar.Client(broker.service_url)
        client.create_producer(f"{full}-partition-0").send(b"old data")
        client.close()
        gw = GatewayProcess(tmp_path / "gw", extra=["--pulsar-url", broker.service_url]).start()
        try:
            admin = AdminClient({"bootstrap.servers": gw.bootstrap})
            assert topic_name not in admin.list_topics(timeout=10).topics
            admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
            consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "g"})
            assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (
                0,
                0,
            )
            consumer.close()
            waiting = [row for row in _pending_deletion(gw) if row["kafka_topic"] == topic_name]
            assert [(row["incarnations"], row["partitions"]) for row in waiting] == [([0, 0], 1)]
        finally:
            assert gw.stop() == 0, gw.log_tail()
        assert _pulsar_values(broker.service_url, f"{full}-partition-0") == [b"old data"]
    finally:
        broker.stop()
