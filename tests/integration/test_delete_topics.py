"""DeleteTopics deletes for real or not at all (docs/pulsar-mapping.md, 'Deleting topics').

- The embedded broker has no admin API and cannot delete stored messages: DeleteTopics
  answers TOPIC_DELETION_DISABLED with the reason, and the topic, its data and its groups'
  offsets stay exactly as they were (it used to answer success while the data stayed
  readable through Pulsar and the offsets carried over into a re-created topic).
- With `pulsar.admin_url` (here a stand-in admin API in front of a separate broker) the
  topic is deleted through the admin API, and the gateway's record of it, its offset-index
  checkpoints and every group's committed offsets on it go too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.kafka_codec.errors import ErrorCode
from tests.support import kafka_wire
from tests.support.gateway_process import GatewayProcess
from tests.support.waiting import wait_until

DELETE_TOPICS = 20


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


def test_embedded_broker_refuses_and_keeps_everything(gateway, topic_name) -> None:
    group = f"g-{topic_name}"
    _create_and_fill(gateway.bootstrap, topic_name, group, 1)
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics([topic_name])[topic_name].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_DELETION_DISABLED
    # the reason is in the answer (error_message, v5), which librdkafka does not show
    answer = kafka_wire.call(
        gateway.kafka_port, DELETE_TOPICS, 5, {"topic_names": [topic_name], "timeout_ms": 1000}
    )["responses"][0]
    assert answer["error_code"] == ErrorCode.TOPIC_DELETION_DISABLED
    assert "not deleted" in answer["error_message"]
    assert "readable through Pulsar" in answer["error_message"]
    assert "pulsar.admin_url" in answer["error_message"]

    # nothing changed: the topic, its records and the group's offset are all still there
    assert topic_name in admin.list_topics(timeout=10).topics
    assert _committed(gateway.bootstrap, topic_name, group, 1) == [2]
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": f"r-{topic_name}"})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    values: list[bytes] = []

    def read_all() -> bool:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
        return len(values) == 3

    wait_until(read_all, 30, 0, "the three records")
    consumer.close()
    assert values == [b"0", b"1", b"2"]


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


def _metadata_keys(service_url: str) -> list[str]:
    """Every key of the gateway's metadata store, as a gateway starting now would load it."""

    async def load() -> list[str]:
        backend = PulsarBackend(service_url)
        await backend.start()
        try:
            store = MetadataStore(backend, DEFAULT_METADATA_NAMESPACE)
            await store.load()
            keys = [key for key, _ in store.items("")]
            await store.close()
            return keys
        finally:
            await backend.close()

    return asyncio.run(load())


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
