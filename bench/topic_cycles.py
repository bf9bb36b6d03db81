"""Delete and recreate one Kafka topic in a loop, with a producer and a group on it, and
watch what grows (docs/pulsar-mapping.md, 'Deleting topics').

Each cycle: CreateTopics (2 partitions), a long-lived producer writes 10 records, a group
member (subscribe, confluent-kafka) reads them all from the new incarnation and commits,
DeleteTopics while the member is still in the group, the member leaves; with `--share`, a
share consumer (KIP-932) of a share group reads them too before the deletion. Checked every
cycle: the new incarnation starts at offset 0 holding only its own records. Measured: time
per cycle, the gateway's and pulsar-lite's RSS, and the metadata store as a gateway
starting now would load it (keys, JSON bytes, keys naming the topic).

    PYTHONPATH=. python -m bench.topic_cycles --cycles 300 [--share]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from bench.proc import rss_kib
from harness.gateway_process import GatewayProcess
from harness.group_configs import set_group_config
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.metadata_store import MetadataStore
from pulsar_gateway.tools.gateway_link import discover

RECORDS = 10


def metadata_size(service_url: str, topic: str) -> tuple[int, int, int]:
    """(keys, JSON bytes of all values, keys naming the topic) of the metadata store."""

    async def load() -> tuple[int, int, int]:
        backend = PulsarBackend(service_url)
        await backend.start()
        try:
            store = MetadataStore(backend, DEFAULT_METADATA_NAMESPACE)
            await store.load()
            table = dict(store.items(""))
            await store.close()
        finally:
            await backend.close()
        size = sum(len(key) + len(json.dumps(value)) for key, value in table.items())
        return len(table), size, sum(1 for key in table if topic in key)

    return asyncio.run(load())


def share_read(bootstrap: str, topic: str, n: int) -> None:
    """A share consumer of the topic's share group reads the incarnation's records."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-share"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < RECORDS and time.monotonic() < deadline:
            values += [m.value() for m in consumer.poll(0.2) if m.error() is None]
        consumer.commit_sync(10)
    finally:
        consumer.close()
    assert sorted(values) == sorted(f"{n}-{i}".encode() for i in range(RECORDS)), values


def cycle(
    admin: AdminClient, producer: Producer, bootstrap: str, topic: str, n: int, share: bool
) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    for number in range(RECORDS):
        producer.produce(topic, f"{n}-{number}".encode(), partition=number % 2)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            assert message.offset() < RECORDS, "a new incarnation starts at offset 0"
            values.append(message.value())
    assert sorted(values) == sorted(f"{n}-{i}".encode() for i in range(RECORDS)), values
    consumer.commit(asynchronous=False)
    if share:
        share_read(bootstrap, topic, n)
    admin.delete_topics([topic])[topic].result(30)
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--every", type=int, default=50, help="measure every N cycles")
    parser.add_argument("--share", action="store_true", help="a share group reads each cycle")
    args = parser.parse_args()
    gateway = GatewayProcess(Path(tempfile.mkdtemp(prefix="topic-cycles-")))
    gateway.start()
    try:
        service_url = discover(f"http://127.0.0.1:{gateway.metrics_port}").service_url
        topic = "cycled"
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 0})
        if args.share:  # the share group starts at each incarnation's first record
            set_group_config(admin, f"{topic}-share", "share.auto.offset.reset", "earliest")
        print("cycles  seconds  gateway_rss_mib  broker_rss_mib  md_keys  md_bytes  md_topic_keys")
        started = time.monotonic()
        for n in range(args.cycles + 1):
            if n % args.every == 0:
                keys, size, topic_keys = metadata_size(service_url, topic)
                print(
                    f"{n:6d}  {time.monotonic() - started:7.1f}"
                    f"  {rss_kib(gateway.process.pid) / 1024:15.1f}"
                    f"  {rss_kib(gateway.broker_pid()) / 1024:14.1f}"
                    f"  {keys:7d}  {size:8d}  {topic_keys:13d}",
                    flush=True,
                )
            if n < args.cycles:
                cycle(admin, producer, gateway.bootstrap, topic, n, args.share)
    finally:
        print("gateway exit", gateway.stop())


if __name__ == "__main__":
    main()
