"""KIP-368: a SASL session ends after kafka.sasl_session_lifetime_ms unless the client
re-authenticates; librdkafka does, a raw client that does not is closed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from harness.gateway_process import REPO, GatewayProcess
from harness.raw_kafka_socket import recv_frame
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

LIFETIME_MS = 2000
PASSWORD = "reauth pw"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    extra = ["--set", "kafka.sasl_mechanisms=PLAIN,SCRAM-SHA-256"]
    extra += ["--set", f"kafka.sasl_session_lifetime_ms={LIFETIME_MS}"]
    extra += ["--set", "authorization.superusers=erin"]  # rights: test_authorization.py
    process = GatewayProcess(tmp_path_factory.mktemp("reauth"), extra=extra).start()
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "erin"]
    command += ["--gateway-health", f"http://127.0.0.1:{process.metrics_port}"]
    subprocess.run(command, input=PASSWORD + "\n", text=True, check=True, cwd=REPO, timeout=60)
    yield process
    assert process.stop() == 0, process.log_tail()


def _successes(gateway: GatewayProcess) -> float:
    return gateway.metric(
        "gateway_authentications_total",
        protocol="kafka",
        mechanism="SCRAM-SHA-256",
        outcome="success",
    )


def test_librdkafka_reauthenticates_and_keeps_producing(gateway: GatewayProcess) -> None:
    producer = Producer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "erin",
            "sasl.password": PASSWORD,
        }
    )
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    errors: list[object] = []
    sent = 0
    started = time.monotonic()
    before = _successes(gateway)
    while time.monotonic() - started < 3 * LIFETIME_MS / 1000:
        producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert len(errors) == sent and not any(errors)
    # the first authentication and at least one re-authentication on the same connection
    assert _successes(gateway) - before >= 2
    assert "re-authenticated" in gateway.log_path.read_text()


def test_a_session_not_reauthenticated_is_closed(gateway: GatewayProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10)
    correlation = 0

    def call(key: int, version: int, body: dict[str, object]) -> dict[str, object]:
        nonlocal correlation
        correlation += 1
        sock.sendall(protocol.encode_request(key, version, correlation, "t", body))
        return protocol.decode_response(key, version, recv_frame(sock))

    try:
        assert call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = f"\x00erin\x00{PASSWORD}".encode()
        answer = call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        assert answer["error_code"] == ErrorCode.NONE
        assert answer["session_lifetime_ms"] == LIFETIME_MS
        authenticated = time.monotonic()
        assert call(ApiKey.METADATA, 1, {"topics": []})["brokers"]

        def closed() -> bool:
            try:
                call(ApiKey.METADATA, 1, {"topics": []})
            except (ConnectionError, OSError):
                return True
            return False

        wait_until(closed, timeout=10, interval=0.2, message="the expired session closed")
        assert time.monotonic() - authenticated >= LIFETIME_MS / 1000 * 0.9
    finally:
        sock.close()
    assert "expired (kafka.sasl_session_lifetime_ms)" in gateway.log_path.read_text()
