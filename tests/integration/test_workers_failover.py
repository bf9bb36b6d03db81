"""Issue 12's failover test on one host (docs/cluster.md, "Failover"): `run --workers 3`,
an idempotent confluent-kafka producer (acks=all) on 12 partitions, a consumer group of
three different clients, AMQP publishers with confirms and pika consumers on two vhosts;
one worker (the owner of an AMQP vhost) is killed with SIGKILL mid-stream and started
again by the supervisor. Every acknowledged record is in the log exactly once, at the
offset it was acknowledged with, offsets dense (read back with kcat); the group's commits
survive and reach the end; every confirmed AMQP message is delivered."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pika
import pika.exceptions
import pulsar
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kcat import run_kcat
from harness.waiting import wait_until
from harness.workers_process import WorkersProcess
from pulsar_gateway.storage.amqp.vhost_names import namespace_of
from tests.integration.test_consumer_groups import Member

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 12
GROUP = "orders-group"
VHOSTS = ("/", "shop")


class KafkaLoad:
    """An idempotent producer (acks=all) writing numbered records round robin."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        # value -> (partition, offset); the offset is None where librdkafka acked a record
        # by implication: its own request was lost with the killed worker, and a later
        # request's success says the broker has it (rd_kafka_dr_implicit_ack)
        self.acked: dict[str, tuple[int, int | None]] = {}
        self.failed: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: object, message: object) -> None:
        value = message.value().decode()  # type: ignore[attr-defined]
        if error is None:
            self.acked[value] = (message.partition(), message.offset())  # type: ignore[attr-defined]
        else:
            self.failed.append(f"{value}: {error}")

    def _run(self) -> None:
        while not self.stop.is_set():
            value = str(self.sent)
            self.producer.produce(
                TOPIC, value.encode(), partition=self.sent % PARTITIONS, on_delivery=self._delivered
            )
            self.sent += 1
            self.producer.poll(0.01)
        assert self.producer.flush(120) == 0


def _params(port: int, vhost: str) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "127.0.0.1",
        port,
        vhost,
        pika.PlainCredentials("guest", "guest"),
        heartbeat=5,
        blocked_connection_timeout=30,
    )


AMQP_ERRORS = (pika.exceptions.AMQPError, OSError)


class AmqpLoad:
    """One publisher with confirms and one consumer per vhost; both reconnect after a
    connection is lost or closed with 320 (their vhost moved)."""

    def __init__(self, port: int, vhost: str) -> None:
        self.port, self.vhost = port, vhost
        self.confirmed: set[str] = set()
        self.received: set[str] = set()
        self.reconnects = 0
        self.stop_publishing = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads = [
            threading.Thread(target=self._publish, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def _publish(self) -> None:
        number = 0
        while not self.stop_publishing.is_set():
            try:
                connection = pika.BlockingConnection(_params(self.port, self.vhost))
                channel = connection.channel()
                channel.confirm_delivery()
                channel.queue_declare("orders", durable=True)
                while not self.stop_publishing.is_set():
                    body = f"{self.vhost}:{number}"
                    # returns once confirmed; raises if nacked, unroutable or the link broke
                    channel.basic_publish(
                        "", "orders", body.encode(), pika.BasicProperties(delivery_mode=2), True
                    )
                    self.confirmed.add(body)
                    number += 1
                    time.sleep(0.01)
                connection.close()
            except AMQP_ERRORS:
                self.reconnects += 1  # the same number is published again: at least once
                time.sleep(0.2)

    def _consume(self) -> None:
        while not self.stop_consuming.is_set():
            try:
                connection = pika.BlockingConnection(_params(self.port, self.vhost))
                channel = connection.channel()
                channel.queue_declare("orders", durable=True)
                channel.basic_qos(prefetch_count=100)
                for method, _, body in channel.consume("orders", inactivity_timeout=0.3):
                    if self.stop_consuming.is_set():
                        break
                    if method is None:
                        continue
                    self.received.add(body.decode())
                    channel.basic_ack(method.delivery_tag)
                connection.close()
            except AMQP_ERRORS:
                self.reconnects += 1
                time.sleep(0.2)


def _stored_copies(workers: WorkersProcess, vhost: str, bodies: set[str]) -> str:
    """Where undelivered messages are: how often each is in the queue's Pulsar topic (0:
    the confirm came without a store) and what the workers logged about the queue, so a
    failure says whether the message was lost on the way in or stuck on the way out."""
    wanted = sorted(bodies)[:5]
    topic = f"persistent://public/{namespace_of(vhost)}/orders"
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{workers.broker_port}", operation_timeout_seconds=10
    )
    copies = {body: 0 for body in wanted}
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        while True:
            try:
                message = reader.read_next(2000)
            except pulsar.Timeout:
                break
            body = message.data().decode(errors="replace")
            if body in copies:
                copies[body] += 1
    except Exception as exc:  # noqa: BLE001 - a diagnosis must not hide the failure
        return f"topic {topic} unreadable: {exc}"
    finally:
        client.close()
    lines = [
        line
        for line in workers.tail(100_000).splitlines()
        if "orders" in line or "vhost" in line or "nudg" in line
    ]
    return f"copies in {topic}: {copies}; log: " + " | ".join(lines[-40:])


def _settled(members: list[Member]) -> bool:
    owned = sorted(p for m in members for p in m.assigned)
    return owned == list(range(PARTITIONS)) and all(m.assigned for m in members)


def _committed(admin: AdminClient) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)]).values()
    return {tp.partition: tp.offset for tp in future.result(30).topic_partitions}


def _log(bootstrap: str) -> list[tuple[int, int, str]]:
    """Every record of the topic, read with kcat from the beginning to the end."""
    result = run_kcat(
        ["-b", bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %o %s\\n"],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode()
    rows = []
    for line in result.stdout.decode().splitlines():
        partition, offset, value = line.split(" ", 2)
        rows.append((int(partition), int(offset), value))
    return rows


def test_kill_9_of_one_of_three_workers_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    workers = WorkersProcess(tmp_path / "gw", 3).start()
    members: list[Member] = []
    loads: list[AmqpLoad] = []
    kafka: KafkaLoad | None = None
    try:
        bootstrap = workers.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        workers.wait_topic(TOPIC, PARTITIONS)
        members = [
            Member(client, workers, TOPIC, GROUP)  # type: ignore[arg-type]
            for client in ("confluent", "kafka-python", "aiokafka")
        ]
        wait_until(lambda: _settled(members), 90, 0.2, "three members to share 12 partitions")
        kafka = KafkaLoad(bootstrap)
        kafka.thread.start()
        loads = [AmqpLoad(workers.amqp_port, vhost) for vhost in VHOSTS]
        for load in loads:
            for thread in load.threads:
                thread.start()
        wait_until(lambda: len(kafka.acked) >= 300, 90, 0.1, "300 acked records before the kill")
        wait_until(lambda: all(len(x.received) >= 50 for x in loads), 60, 0.1, "AMQP flowing")

        # the owner of vhost "shop": its AMQP clients must move, as must its partitions
        view = workers.cluster(0)
        assert view is not None
        victim_id = view["owners"]["vhosts"]["amqp/vhost/shop"]
        victim = next(m["node_id"] for m in view["members"] if m["member_id"] == victim_id)
        committed_before = _committed(admin)
        acked_before = len(kafka.acked)
        killed = workers.kill_worker(victim)
        wait_until(
            lambda: (workers.health(victim) or {}).get("pid") not in (None, killed),
            90,
            0.2,
            "the supervisor to start the killed worker again",
        )
        workers.wait_all_serving(90)
        wait_until(
            lambda: len(kafka.acked) >= acked_before + 600,
            120,
            0.2,
            lambda: f"600 more acked records (have {len(kafka.acked) - acked_before})",
        )
        kafka.stop.set()
        kafka.thread.join(150)
        for load in loads:
            load.stop_publishing.set()
        assert not kafka.failed, kafka.failed[:5]
        acked = dict(kafka.acked)

        def group_saw_everything() -> bool:
            seen = {value for m in members for _, _, value in m.records}
            return set(acked) <= seen

        wait_until(group_saw_everything, 120, 0.2, "the group to read every acked record")
        for load in loads:
            wait_until(
                lambda load=load: load.confirmed <= load.received,
                120,
                0.2,
                lambda load=load: (
                    f"{len(load.confirmed - load.received)} confirmed on "
                    f"{load.vhost!r} not delivered: {sorted(load.confirmed - load.received)[:5]}"
                    f" (published {len(load.confirmed)}, reconnects {load.reconnects}); "
                    + _stored_copies(workers, load.vhost, load.confirmed - load.received)
                ),
            )
        log = _log(bootstrap)
        ends = defaultdict(int)
        for partition, offset, _ in log:
            ends[partition] = max(ends[partition], offset + 1)
        wait_until(
            lambda: all(_committed(admin).get(p, -1) == ends[p] for p in range(PARTITIONS)),
            120,
            0.5,
            lambda: f"the group's commits to reach the end: {_committed(admin)} vs {dict(ends)}",
        )
        committed_after = _committed(admin)
    finally:
        if kafka is not None:
            kafka.stop.set()
        for load in loads:
            load.stop_publishing.set()
            load.stop_consuming.set()
        hung = []
        for member in members:
            if member.process.poll() is None:
                try:
                    member.stop()
                except subprocess.TimeoutExpired:
                    # killed, so that the gateways below are stopped all the same (a member
                    # left hanging here once kept the whole cluster running past the test)
                    member.kill()
                    hung.append(member.process.args)
        code = workers.stop()
    assert code == 0, workers.tail()
    assert not hung, f"group members that did not stop within 30 s of SIGTERM: {hung}"
    # every connection's tasks ended with it (a cancel lost on Python 3.11 left AMQP session
    # timers waiting forever, destroyed pending when the session was collected)
    destroyed = [line for line in workers.tail(10**6).splitlines() if "destroyed but" in line]
    assert not destroyed, destroyed[:3]

    # every acked record exactly once, at its acked offset; offsets dense per partition
    by_position = {(p, o): v for p, o, v in log}
    assert len(by_position) == len(log)
    values = [v for _, _, v in log]
    assert len(values) == len(set(values)), "a record is in the log twice"
    for value, position in acked.items():
        if position[1] is None:
            assert value in values, value
        else:
            assert by_position.get(position) == value, (value, position)
    per_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _ in log:
        per_partition[partition].append(offset)
    for partition, offsets in per_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"gap in partition {partition}"
    # commits made before the kill survived it, and the group went on from them
    for partition, offset in committed_before.items():
        assert committed_after[partition] >= offset, (partition, offset)
    assert sum(load.reconnects for load in loads) >= 1  # the victim's AMQP clients moved
