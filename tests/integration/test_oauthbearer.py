"""OAUTHBEARER against a real gateway: confluent-kafka (librdkafka) hands JWTs from Python
through `oauth_cb`; the gateway checks them against an RS256 public key (docs/security.md).

A valid token produces and consumes as its `sub`; an expired token and a token signed by
another key are refused (the RFC 7628 error JSON, then SASL_AUTHENTICATION_FAILED) and
nothing is served; short-lived tokens make librdkafka re-authenticate (KIP-368) with fresh
ones on the same connection, and keep producing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ISSUER = "https://idp.example"


def _token(lifetime: float, sub: str = "olivia", key: Any = KEY, issuer: str = ISSUER) -> str:
    claims = {"sub": sub, "iss": issuer, "exp": int(time.time() + lifetime)}
    return jwt.encode(claims, key, algorithm="RS256")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    where = tmp_path_factory.mktemp("oauthbearer")
    public = where / "idp-public.pem"
    public.write_bytes(
        KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    settings = {
        "kafka.sasl_mechanisms": "OAUTHBEARER",
        "kafka.oauthbearer_key_file": public,
        "kafka.oauthbearer_algorithms": "RS256",
        "kafka.oauthbearer_issuer": ISSUER,
        "authorization.superusers": "olivia",  # rights: test_authorization.py
    }
    process = GatewayProcess(where, extra=set_flags(settings)).start()
    yield process
    assert process.stop() == 0, process.log_tail()


def _config(gateway: GatewayProcess, token: Callable[[], tuple[str, float]]) -> dict[str, Any]:
    return {
        "bootstrap.servers": gateway.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "oauth_cb": lambda _config: token(),
    }


def _metric(gateway: GatewayProcess, outcome: str) -> float:
    return gateway.metric(
        "gateway_authentications_total",
        protocol="kafka",
        mechanism="OAUTHBEARER",
        outcome=outcome,
    )


def test_a_valid_token_produces_and_consumes_as_its_subject(gateway: GatewayProcess) -> None:
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    fresh = lambda: (_token(300), time.time() + 300)  # noqa: E731
    producer = Producer(_config(gateway, fresh))
    errors: list[Any] = []
    for i in range(5):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    assert errors == [None] * 5
    consumer = Consumer(
        {**_config(gateway, fresh), "group.id": "oauth-g", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.close()
    assert got == [f"m{i}".encode() for i in range(5)]
    log = gateway.log_path.read_text()
    assert "Kafka user 'olivia' authenticated" in log and "(OAUTHBEARER)" in log


@pytest.mark.parametrize(
    "why, token",
    [
        ("expired", lambda: _token(-60)),
        ("signed by another key", lambda: _token(300, key=rsa.generate_private_key(65537, 2048))),
        ("another issuer", lambda: _token(300, issuer="https://elsewhere")),
    ],
)
def test_a_bad_token_is_refused_and_nothing_is_served(
    gateway: GatewayProcess, why: str, token: Callable[[], str]
) -> None:
    before = _metric(gateway, "failure")
    failures: list[KafkaError] = []
    # librdkafka takes the token as valid for 60 s; the gateway reads the JWT's own exp
    config = _config(gateway, lambda: (token(), time.time() + 60))
    producer = Producer({**config, "error_cb": failures.append, "message.timeout.ms": 3000})
    delivered: list[Any] = []
    producer.produce(
        f"refused-{uuid.uuid4().hex[:8]}", b"x", on_delivery=lambda e, m: delivered.append(e)
    )

    def refused() -> bool:
        producer.poll(0.2)
        return any(f.code() == KafkaError._AUTHENTICATION for f in failures)

    wait_until(refused, timeout=30, message=f"{why}: an authentication error")
    text = " ".join(str(f) for f in failures)
    assert "invalid_token" in text or "Authentication failed" in text, text
    producer.flush(10)
    assert delivered and delivered[0] is not None  # never stored
    assert _metric(gateway, "failure") > before
    log = gateway.log_path.read_text()
    assert "Kafka authentication failed" in log
    assert token().split(".")[2] not in log  # never the token


def test_the_wire_answers_of_a_bad_then_a_good_token(gateway: GatewayProcess) -> None:
    """The exact answers: the RFC 7628 error JSON with no error, SASL_AUTHENTICATION_FAILED
    on the client's %x01 (then the connection closes); a good token's session_lifetime_ms is
    no later than its exp."""

    def connect() -> Callable[[int, int, dict[str, object]], dict[str, Any]]:
        sock = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10)
        sockets.append(sock)
        correlation = iter(range(1, 1000))

        def call(key: int, version: int, body: dict[str, object]) -> dict[str, Any]:
            sock.sendall(protocol.encode_request(key, version, next(correlation), "t", body))
            return protocol.decode_response(key, version, recv_frame(sock))

        return call

    def bearer(token: str) -> dict[str, object]:
        return {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()}

    sockets: list[socket.socket] = []
    try:
        call = connect()
        assert call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"})["error_code"] == 0
        answer = call(ApiKey.SASL_AUTHENTICATE, 2, bearer(_token(-60)))
        assert answer["error_code"] == ErrorCode.NONE
        assert json.loads(answer["auth_bytes"]) == {"status": "invalid_token"}
        answer = call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        with pytest.raises((ConnectionError, OSError)):
            call(ApiKey.METADATA, 1, {"topics": []})

        call = connect()
        assert call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"})["error_code"] == 0
        answer = call(ApiKey.SASL_AUTHENTICATE, 2, bearer(_token(120)))
        assert answer["error_code"] == ErrorCode.NONE
        assert 0 < answer["session_lifetime_ms"] <= 120_000
        assert call(ApiKey.METADATA, 1, {"topics": []})["brokers"]
    finally:
        for sock in sockets:
            sock.close()


def test_short_lived_tokens_are_renewed_by_reauthentication(gateway: GatewayProcess) -> None:
    """Tokens living 4 s: the session ends with each token, librdkafka fetches a new one
    and re-authenticates on the same connection; every record is delivered."""
    issued: list[float] = []

    def fresh() -> tuple[str, float]:
        issued.append(time.time())
        return _token(4), time.time() + 4

    before = _metric(gateway, "success")
    producer = Producer(_config(gateway, fresh))
    topic = f"oauth-reauth-{uuid.uuid4().hex[:8]}"
    errors: list[Any] = []
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < 10:
        producer.produce(topic, b"x", on_delivery=lambda e, m: errors.append(e))
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert len(errors) == sent and not any(errors)
    assert len(issued) >= 2  # the token was renewed
    assert _metric(gateway, "success") - before >= 2
    assert "Kafka user 'olivia' re-authenticated" in gateway.log_path.read_text()


def test_a_bad_key_file_stops_start_up_naming_the_setting(tmp_path: Path) -> None:
    garbage = tmp_path / "key.pem"
    garbage.write_text("not a key")
    command = [sys.executable, "-m", "pulsar_gateway.cli", "run", "--data-dir", str(tmp_path)]
    command += set_flags(
        {
            "kafka.sasl_mechanisms": "OAUTHBEARER",
            "kafka.oauthbearer_key_file": garbage,
            "kafka.port": 0,
            "amqp.enabled": "false",
            "metrics.enabled": "false",
        }
    )
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "kafka.oauthbearer_key_file" in output and "not a PEM public key" in output
