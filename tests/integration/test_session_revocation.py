"""A removed user, or one whose password changed, loses its open sessions (docs/security.md,
"Session lifetime"): AMQP connections are closed with 320 CONNECTION_FORCED within a few
seconds, as RabbitMQ does when a user is deleted; a Kafka connection is closed at its next
request. Other users' connections stay up."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

PASSWORDS = {"rita": "rita pw", "sam": "sam pw", "kurt": "kurt pw", "kim": "kim pw"}


def _users(gateway: GatewayProcess, *args: str, password: str | None = None) -> None:
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", *args]
    command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    subprocess.run(
        command, input=(password or "") + "\n", text=True, check=True, cwd=REPO, timeout=60
    )


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # about sessions: its users may do everything (test_authorization.py: rights)
    extra = set_flags(
        {"kafka.sasl_mechanisms": "PLAIN", "authorization.superusers": ",".join(PASSWORDS)}
    )
    process = GatewayProcess(tmp_path_factory.mktemp("revocation"), extra=extra).start()
    for name, password in PASSWORDS.items():
        _users(process, "add", name, password=password)
    yield process
    assert process.stop() == 0, process.log_tail()


def _amqp(gateway: GatewayProcess, user: str) -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        gateway.amqp_port,
        credentials=pika.PlainCredentials(user, PASSWORDS[user]),
        heartbeat=0,
    )
    return pika.BlockingConnection(parameters)


def _closed_by_broker(connection: pika.BlockingConnection) -> Callable[[], Any]:
    def closed() -> Any:
        try:
            connection.process_data_events(time_limit=0.2)
        except pika.exceptions.ConnectionClosedByBroker as closing:
            return closing
        return None

    return closed


@pytest.mark.parametrize("change", ["remove", "passwd"])
def test_amqp_connections_of_a_changed_user_are_forced_closed(
    gateway: GatewayProcess, change: str
) -> None:
    user, bystander = ("rita", "sam") if change == "remove" else ("sam", "kim")
    connection = _amqp(gateway, user)
    other = _amqp(gateway, bystander)
    channel = connection.channel()
    channel.queue_declare("", exclusive=True)  # the connection works before the change
    if change == "remove":
        _users(gateway, "remove", user)
    else:
        _users(gateway, "passwd", user, password="a new pw")
    closing = wait_until(
        _closed_by_broker(connection), timeout=15, interval=0, message="connection.close"
    )
    assert closing.reply_code == 320
    assert "removed or its password changed" in closing.reply_text
    # the other user's connection is untouched
    other.channel().queue_declare("", exclusive=True)
    other.close()
    assert "closing the connection of user" in gateway.log_path.read_text()


def _kafka_call(sock: socket.socket) -> Callable[[int, int, dict[str, object]], dict[str, Any]]:
    correlation = iter(range(1, 10_000))

    def call(key: int, version: int, body: dict[str, object]) -> dict[str, Any]:
        sock.sendall(protocol.encode_request(key, version, next(correlation), "t", body))
        return protocol.decode_response(key, version, recv_frame(sock))

    return call


def _kafka_session(gateway: GatewayProcess, user: str, password: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10)
    call = _kafka_call(sock)
    assert call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    token = f"\x00{user}\x00{password}".encode()
    assert call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})["error_code"] == ErrorCode.NONE
    assert call(ApiKey.METADATA, 1, {"topics": []})["brokers"]
    return sock


def test_a_kafka_session_ends_at_the_next_request_after_a_password_change(
    gateway: GatewayProcess,
) -> None:
    sock = _kafka_session(gateway, "kurt", PASSWORDS["kurt"])
    try:
        _users(gateway, "passwd", "kurt", password="kurt's new pw")
        call = _kafka_call(sock)

        def refused() -> bool:
            try:
                call(ApiKey.METADATA, 1, {"topics": []})
            except (ConnectionError, OSError):
                return True
            return False

        wait_until(refused, timeout=15, interval=0.2, message="the session closed")
    finally:
        sock.close()
    assert "'kurt' was removed or its password changed" in gateway.log_path.read_text()
    # the new password logs in
    _kafka_session(gateway, "kurt", "kurt's new pw").close()
