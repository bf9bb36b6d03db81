"""External mode: with `pulsar.service_url` set the gateway starts no broker of its own and
fronts the one it is given (here a separately started pulsar-lite; it has no admin API, so
no `admin_url`)."""

from __future__ import annotations

import asyncio
import subprocess

from confluent_kafka import Consumer, Producer, TopicPartition

from harness.gateway_process import GatewayProcess
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker


def test_gateway_fronts_a_given_pulsar(tmp_path, topic_name) -> None:
    loop = asyncio.new_event_loop()
    broker = EmbeddedBroker(tmp_path / "cluster")
    loop.run_until_complete(broker.start())
    try:
        gw = GatewayProcess(tmp_path / "gw", extra=["--pulsar-url", broker.service_url])
        gw.start()
        try:
            children = subprocess.run(
                ["pgrep", "-P", str(gw.process.pid)], capture_output=True, text=True
            ).stdout.split()
            assert children == [], "external mode must not start an embedded broker"
            assert gw.health()["embedded"] is False
            producer = Producer({"bootstrap.servers": gw.bootstrap})
            producer.produce(topic_name, b"to the cluster", b"k")
            assert producer.flush(30) == 0
            consumer = Consumer(
                {"bootstrap.servers": gw.bootstrap, "group.id": "ext", "enable.auto.commit": False}
            )
            consumer.assign([TopicPartition(topic_name, 0, 0)])
            msg = None
            for _ in range(30):
                msg = consumer.poll(1)
                if msg is not None and not msg.error():
                    break
            consumer.close()
            assert msg is not None and msg.value() == b"to the cluster"
        finally:
            assert gw.stop() == 0
    finally:
        loop.run_until_complete(broker.stop())
        loop.close()
