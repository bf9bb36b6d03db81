"""AMQPS with client certificates (amqp.tls_ca_file): EXTERNAL logs in the certificate's
common name when that user exists; a client without a certificate is refused by TLS."""

from __future__ import annotations

import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from harness.certificates import make_certificates_with_clients
from harness.gateway_process import REPO, GatewayProcess, free_port, set_flags
from harness.waiting import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates_with_clients(tmp_path_factory.mktemp("certs"), "frank", "stranger")


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[GatewayProcess]:
    port = free_port()
    settings = {
        "amqp.tls_cert_file": certs["cert"],
        "amqp.tls_key_file": certs["key"],
        "amqp.tls_ca_file": certs["ca"],
        "amqp.tls_port": port,
        "authorization.superusers": "frank",  # logging in is tested here, not rights
    }
    extra = set_flags(settings)
    process = GatewayProcess(tmp_path_factory.mktemp("external"), extra=extra).start()
    process.amqps_port = port  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "frank"]
    command += ["--gateway-health", f"http://127.0.0.1:{process.metrics_port}"]
    subprocess.run(command, input="unused pw\n", text=True, check=True, cwd=REPO, timeout=60)
    yield process
    assert process.stop() == 0, process.log_tail()


def _params(
    gateway: GatewayProcess, certs: dict[str, Path], name: str | None
) -> pika.ConnectionParameters:
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    if name is not None:
        context.load_cert_chain(str(certs[f"{name}.pem"]), str(certs[f"{name}.key"]))
    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=gateway.amqps_port,  # type: ignore[attr-defined]
        credentials=pika.credentials.ExternalCredentials(),
        ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
        connection_attempts=1,
    )


def test_external_logs_in_the_certificates_user(
    gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    # the store's follower may take a moment to see frank
    def connect() -> pika.BlockingConnection | None:
        try:
            return pika.BlockingConnection(_params(gateway, certs, "frank"))
        except pika.exceptions.ProbableAccessDeniedError:
            return None

    connection = wait_until(connect, timeout=15, message="frank logged in by certificate")
    try:
        channel = connection.channel()
        queue = f"ext-{uuid.uuid4().hex[:8]}"
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"by certificate")
        body = wait_until(lambda: channel.basic_get(queue, auto_ack=True)[2], timeout=15)
        assert body == b"by certificate"
    finally:
        connection.close()
    assert gateway.metric(
        "gateway_authentications_total", protocol="amqp", mechanism="EXTERNAL", outcome="success"
    )


def test_unknown_certificate_user_and_no_certificate_are_refused(
    gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(_params(gateway, certs, "stranger"))
    assert "certificate user 'stranger' unknown" in gateway.log_path.read_text()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(_params(gateway, certs, None))
