"""`amqp.batched_queue_entries = true`, the default (docs/backend.md, "AMQP queue messages
in batched entries"; set here all the same): queues written as batched entries through the
gateway's own Pulsar client keep RabbitMQ's queue semantics for a client: every confirmed
message once, in order, what a closed channel held comes again marked redelivered, and
what a client acknowledged inside an entry never comes again, across a restart, a vhost
handover and a kill."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pulsar
import pytest

from harness.gateway_process import (
    GatewayProcess,
    cluster_member,
    wait_until_members_see_each_other,
)
from harness.pika_waits import connect_when_served, drain
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until
from pulsar_gateway.gateway.cluster.view import score, vhost_key
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE

ACKED = {0, 1, 2, 5, 7}  # of ten messages in one entry


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path_factory.mktemp("batched"), extra=["--set", "amqp.batched_queue_entries=true"]
    )
    process.start()
    yield process
    assert process.stop() == 0, process.log_tail()


def _take(channel: Any, queue: str, count: int, ack_below: int) -> list[tuple[Any, bytes]]:
    """`count` deliveries; those of a body below `ack_below` acknowledged as they come."""
    got: list[tuple[Any, bytes]] = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=20):
        assert method is not None, f"only {len(got)} of {count} came"
        got.append((method, body))
        if int(body) < ack_below:
            channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    return got


def test_confirmed_messages_come_once_in_order_and_held_ones_come_again(
    batched: GatewayProcess,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(batched.amqp_url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = channel.queue_declare("batched-q", durable=True).method.queue
        for i in range(300):
            channel.basic_publish("", queue, str(i).encode())
        assert channel.queue_declare(queue, passive=True).method.message_count == 300
        reader = connection.channel()
        reader.basic_qos(prefetch_count=50)
        first = _take(reader, queue, 120, ack_below=100)  # 100-119 stay unacknowledged
        assert [int(body) for _, body in first] == list(range(120))
        reader.close()
        again = connection.channel()
        rest = _take(again, queue, 200, ack_below=300)
        assert [int(body) for _, body in rest] == list(range(100, 300))
        assert all(method.redelivered for method, _ in rest[:20])
        assert not any(method.redelivered for method, _ in rest[50:])
        again.cancel()
        assert again.queue_declare(queue, passive=True).method.message_count == 0
    finally:
        connection.close()


def _entries(service_url: str, queue: str, count: int) -> list[tuple[int, int]]:
    """The (ledger, entry) of the first `count` messages stored in the queue's topic (read
    by count: pulsar-lite's reader inside the last batch says none is left)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=10)
    try:
        reader = client.create_reader(
            f"persistent://public/default/{queue}", pulsar.MessageId.earliest
        )
        ids = [reader.read_next(10_000).message_id() for _ in range(count)]
        return [(mid.ledger_id(), mid.entry_id()) for mid in ids]
    finally:
        client.close()


def _ack_part_of_one_entry(connection: pika.BlockingConnection, service_url: str) -> str:
    """A durable queue holding ten messages in one entry (after a lone one: a batch must
    not open a ledger), all delivered and those in ACKED acknowledged; the name."""
    channel = connection.channel()
    queue = channel.queue_declare(f"kept-{uuid.uuid4().hex[:8]}", durable=True).method.queue
    channel.tx_select()
    channel.basic_publish("", queue, b"opener")
    channel.tx_commit()
    for i in range(10):
        channel.basic_publish("", queue, str(i).encode())
    channel.tx_commit()  # the ten go to the store together: one entry
    entries = _entries(service_url, queue, 11)
    assert len(set(entries[1:])) == 1, entries
    channel = connection.channel()  # not transactional: its acks count at once
    channel.basic_qos(prefetch_count=20)
    got = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=20):
        assert method is not None, f"only {got} came"
        got.append(body)
        if body == b"opener" or int(body) in ACKED:
            channel.basic_ack(method.delivery_tag)
        if len(got) == 11:
            break
    assert got == [b"opener"] + [str(i).encode() for i in range(10)]
    channel.queue_declare(queue, passive=True)  # synchronous: the acks before it are in
    return queue


def _the_rest(connection: pika.BlockingConnection, queue: str) -> None:
    """Only the unacknowledged messages of the entry come, once each, in order."""
    channel = connection.channel()
    rest = drain(channel, queue, quiet=3)
    assert rest == [str(i).encode() for i in range(10) if i not in ACKED]
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


@pytest.mark.parametrize("ending", ["stop", "kill -9"])
def test_messages_acknowledged_in_part_of_an_entry_stay_acknowledged_across_a_restart(
    tmp_path: Path, ending: str
) -> None:
    """Pulsar keeps acknowledgements per entry and pulsar-lite keeps no batch index
    acknowledgement (docs/backend.md, "Batch index acks lose messages"), so which messages
    of an entry a client acknowledged must outlive the gateway: after a restart the broker
    sends the entry again whole, and only its unacknowledged messages may be delivered,
    each once, in order. After kill -9 of the gateway and its broker too, once the record
    is stored (written within 0.1 s of the acknowledgements, as the acks themselves are
    grouped)."""
    gateway = GatewayProcess(tmp_path, extra=["--set", "amqp.batched_queue_entries=true"])
    gateway.start()
    try:
        service_url = f"pulsar://127.0.0.1:{gateway.broker_port}"
        connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
        queue = _ack_part_of_one_entry(connection, service_url)
        if ending == "stop":
            connection.close()
            assert gateway.stop() == 0, gateway.log_tail()
        else:
            wait_until(lambda: _kept_in_metadata(service_url, queue), 20, 0.1, "the kept record")
            gateway.kill()
        gateway.start()
        connection = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
        _the_rest(connection, queue)
        connection.close()
    finally:
        gateway.stop()


def _kept_in_metadata(service_url: str, queue: str) -> bool:
    """Whether the gateway's metadata log holds a record of the queue's messages
    acknowledged inside entries (written on its own, or among a group's changes)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=10)
    try:
        reader = client.create_reader(
            f"persistent://{DEFAULT_METADATA_NAMESPACE}/metadata", pulsar.MessageId.earliest
        )
        wanted = f"/acked/{queue}"
        while True:
            try:
                message = reader.read_next(500)
            except pulsar.Timeout:
                return False
            if wanted in message.partition_key() or wanted.encode() in message.data():
                return True
    finally:
        client.close()


def test_messages_acknowledged_in_part_of_an_entry_stay_acknowledged_across_a_handover(
    tmp_path: Path,
) -> None:
    """The same when the vhost moves to another cluster member (its owner stops): the
    member taking it over finds what the old owner's clients acknowledged."""
    broker = SharedBroker(tmp_path / "broker").start()
    members = [
        cluster_member(tmp_path / f"g{node}", broker.service_url, f"m{node}", node)
        for node in (1, 2)
    ]
    for member in members:
        member.extra += ["--set", "amqp.batched_queue_entries=true"]
    try:
        for member in members:
            member.start()
        wait_until_members_see_each_other(members)
        owner, heir = sorted(members, key=lambda m: -score(vhost_key("/"), m.cluster()["me"]))
        connection = connect_when_served(owner.amqp_port)
        queue = _ack_part_of_one_entry(connection, broker.service_url)
        connection.close()
        assert owner.stop() == 0, owner.log_tail()
        connection = connect_when_served(heir.amqp_port)
        _the_rest(connection, queue)
        connection.close()
    finally:
        for member in members:
            member.stop()
        broker.stop()
