"""Each AMQP vhost is a Pulsar namespace of its own: `/` and `default`, which used to share
`public/default` (and so share queues), now hold separate queues in separate namespaces
(docs/pulsar-mapping.md, 'Vhosts and namespaces')."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator

import pika
import pulsar

from harness.gateway_process import GatewayProcess

METADATA_TOPIC = "persistent://public/__gateway/metadata"

VHOST_TOPICS = {
    "/": "persistent://public/default/{queue}",
    "default": "persistent://public/=64efault/{queue}",
    "a/b": "persistent://public/a=2Fb/{queue}",
}


def _channel(gateway, vhost: str) -> tuple[pika.BlockingConnection, object]:
    params = pika.ConnectionParameters(
        "127.0.0.1", gateway.amqp_port, vhost, pika.PlainCredentials("guest", "guest")
    )
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.confirm_delivery()
    return connection, channel


@contextlib.contextmanager
def _broker_client(gateway) -> Iterator[pulsar.Client]:
    client = pulsar.Client(f"pulsar://127.0.0.1:{gateway.broker_port}")
    try:
        yield client
    finally:
        client.close()


def test_each_vhost_keeps_its_own_queues(gateway) -> None:
    queue = f"q-{uuid.uuid4().hex[:10]}"
    opened = {vhost: _channel(gateway, vhost) for vhost in VHOST_TOPICS}
    try:
        for vhost, (_, channel) in opened.items():
            channel.queue_declare(queue, durable=True)
            channel.basic_publish("", queue, f"for {vhost}".encode())
        for vhost, (_, channel) in opened.items():
            declared = channel.queue_declare(queue, passive=True)
            assert declared.method.message_count == 1, vhost
            _, _, body = channel.basic_get(queue, auto_ack=True)
            assert body == f"for {vhost}".encode()
    finally:
        for connection, _ in opened.values():
            connection.close()

    # and each vhost's messages are in its own namespace, where Pulsar clients find them
    with _broker_client(gateway) as client:
        for vhost, pattern in VHOST_TOPICS.items():
            reader = client.create_reader(pattern.format(queue=queue), pulsar.MessageId.earliest)
            assert reader.read_next(10000).data() == f"for {vhost}".encode()
            assert not reader.has_message_available()
            reader.close()


def test_vhost_default_of_an_earlier_version_moves_with_its_counts_dropped(tmp_path) -> None:
    """An earlier version recorded vhost `default` in namespace `public/default` (shared with
    `/`) and saved a count for its queue; the count counted the old topic, so it goes."""
    gateway = GatewayProcess(tmp_path / "gw").start()
    try:
        earlier = {
            "amqp/vhosts/default": {"name": "default", "namespace": "public/default"},
            "amqp/default/queues/jobs": {"name": "jobs", "auto_delete": False, "arguments": ""},
            "amqp/default/counts/jobs": 5,
        }
        with _broker_client(gateway) as client:
            producer = client.create_producer(METADATA_TOPIC, batching_enabled=False)
            for key, value in earlier.items():
                producer.send(json.dumps(value).encode(), partition_key=key)
        assert gateway.stop() == 0
        gateway.start()  # loads what the earlier version left
        connection, channel = _channel(gateway, "default")
        try:
            declared = channel.queue_declare("jobs", durable=True, passive=True)
            assert declared.method.message_count == 0
        finally:
            connection.close()
        assert "vhost 'default' now maps to namespace public/=64efault" in gateway.log_tail(200)
    finally:
        gateway.stop()
