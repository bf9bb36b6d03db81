"""A Kafka TLS listener beside the plaintext one (kafka.tls_port): both serve the same
topics and groups, and each advertises its own port in Metadata, so a client bootstrapped
on one stays on it."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from harness.certificates import make_certificates
from harness.gateway_process import GatewayProcess, free_port, set_flags
from harness.raw_kafka_socket import seconds_until_closed
from harness.waiting import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[GatewayProcess]:
    port = free_port()
    settings = {
        "kafka.tls_cert_file": certs["cert"],
        "kafka.tls_key_file": certs["key"],
        "kafka.tls_port": port,
        "kafka.frame_timeout_seconds": 2,  # also the TLS handshake's bound
    }
    extra = set_flags(settings)
    process = GatewayProcess(tmp_path_factory.mktemp("beside"), extra=extra).start()
    process.kafka_tls_port = port  # type: ignore[attr-defined]
    yield process
    assert process.stop() == 0, process.log_tail()


def test_plaintext_and_tls_side_by_side(gateway: GatewayProcess, certs: dict[str, Path]) -> None:
    tls = {
        "bootstrap.servers": f"127.0.0.1:{gateway.kafka_tls_port}",  # type: ignore[attr-defined]
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs["ca"]),
    }
    plain = {"bootstrap.servers": gateway.bootstrap}
    topic = f"both-{uuid.uuid4().hex[:8]}"
    # values over 64 KiB: each Produce is read straight into a buffer of its size
    # (handlers/kafka/body_reader.py), over TLS as over plaintext
    sent = [b"plain" * 30_000, b"tls" * 50_000]
    for config, value in zip((plain, tls), sent, strict=True):
        producer = Producer(config)
        producer.produce(topic, value)
        assert producer.flush(30) == 0
    # the TLS client learns the TLS port from Metadata, not the plaintext one
    brokers = Producer(tls).list_topics(timeout=10).brokers
    assert [b.port for b in brokers.values()] == [gateway.kafka_tls_port]  # type: ignore[attr-defined]
    brokers = Producer(plain).list_topics(timeout=10).brokers
    assert [b.port for b in brokers.values()] == [gateway.kafka_port]
    consumer = Consumer({**tls, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:

        def both() -> bool:
            message = consumer.poll(1)
            if message is not None and not message.error():
                seen.append(message.value())
            return len(seen) == 2

        wait_until(both, timeout=30, interval=0, message=lambda: f"consumed {seen}")
    finally:
        consumer.close()
    assert seen == sent
    listeners = (gateway.health() or {})["listeners"]
    assert listeners["kafkas"].endswith(f":{gateway.kafka_tls_port}")  # type: ignore[attr-defined]


def test_a_tls_handshake_that_never_comes_is_closed(gateway: GatewayProcess) -> None:
    port = gateway.kafka_tls_port  # type: ignore[attr-defined]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert seconds_until_closed(sock, 20) < 8  # 2 s, not asyncio's default 60 s
