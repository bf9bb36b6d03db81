"""Kafka's SSL principal (kafka.tls_certificate_users, docs/security.md): on the TLS listener
with client certificates and no SASL, the certificate's common name is the connection's
user, which must be in the users store; removing the user ends its sessions."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.certificates import make_certificates_with_clients, make_client_certificate
from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.waiting import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates_with_clients(
        tmp_path_factory.mktemp("kafka-certs"), "carla", "stranger"
    )


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[GatewayProcess]:
    settings = {
        "kafka.tls_cert_file": certs["cert"],
        "kafka.tls_key_file": certs["key"],
        "kafka.tls_ca_file": certs["ca"],
        "kafka.tls_certificate_users": "true",
        "authorization.superusers": "carla,dora",  # rights: test_authorization.py
    }
    process = GatewayProcess(tmp_path_factory.mktemp("gw"), extra=set_flags(settings)).start()
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "carla"]
    command += ["--gateway-health", f"http://127.0.0.1:{process.metrics_port}"]
    subprocess.run(command, input="unused pw\n", text=True, check=True, cwd=REPO, timeout=60)
    yield process
    assert process.stop() == 0, process.log_tail()


def _config(gateway: GatewayProcess, certs: dict[str, Path], name: str) -> dict[str, object]:
    return {
        "bootstrap.servers": f"localhost:{gateway.kafka_port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs["ca"]),
        "ssl.certificate.location": str(certs[f"{name}.pem"]),
        "ssl.key.location": str(certs[f"{name}.key"]),
    }


def test_the_certificate_names_the_user(gateway: GatewayProcess, certs: dict[str, Path]) -> None:
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    producer = Producer(_config(gateway, certs, "carla"))
    producer.produce(topic, b"by certificate")
    assert producer.flush(30) == 0
    consumer = Consumer({**_config(gateway, certs, "carla"), "group.id": "mtls"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    message = None
    for _ in range(30):
        message = consumer.poll(1)
        if message is not None and not message.error():
            break
    consumer.close()
    assert message is not None and message.value() == b"by certificate"
    log = gateway.log_path.read_text()
    assert "Kafka user 'carla' authenticated" in log and "by client certificate" in log
    assert gateway.metric(
        "gateway_authentications_total", protocol="kafka", mechanism="SSL", outcome="success"
    )


def test_a_certificate_of_an_unknown_user_is_refused(
    gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    producer = Producer({**_config(gateway, certs, "stranger"), "message.timeout.ms": 3000})
    outcome: list[object] = []
    producer.produce(
        f"mtls-{uuid.uuid4().hex[:8]}", b"x", on_delivery=lambda e, m: outcome.append(e)
    )
    producer.flush(15)
    assert len(outcome) == 1 and outcome[0] is not None  # never stored
    assert "user 'stranger' is not in the users store" in gateway.log_path.read_text()


def test_removing_the_user_ends_its_certificate_sessions(
    gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "dora"]
    command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    where = certs["ca"].parent
    certs["dora.pem"], certs["dora.key"] = make_client_certificate(where, "dora")
    subprocess.run(command, input="unused pw\n", text=True, check=True, cwd=REPO, timeout=60)
    producer = Producer({**_config(gateway, certs, "dora"), "message.timeout.ms": 5000})
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    producer.produce(topic, b"before")
    assert producer.flush(30) == 0
    remove = [sys.executable, "-m", "pulsar_gateway.cli", "users", "remove", "dora"]
    remove += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    subprocess.run(remove, check=True, cwd=REPO, timeout=60, capture_output=True)

    def closed() -> bool:
        producer.produce(topic, b"after")
        producer.poll(0.5)
        return "'dora' was removed or its password changed" in gateway.log_path.read_text()

    wait_until(closed, timeout=30, interval=0, message="dora's session closed")
    producer.flush(10)
