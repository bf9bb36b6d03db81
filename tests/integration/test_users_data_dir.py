"""`pulsar-gateway users --data-dir` on a stopped gateway: the user is there at its next
start; refused while the gateway (its broker) runs on that directory."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from harness.gateway_process import REPO, GatewayProcess
from harness.raw_kafka_socket import recv_frame
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey


def users_on_dir(
    data_dir: Path, *args: str, password: str = ""
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", *args]
    return subprocess.run(
        [*command, "--data-dir", str(data_dir)],
        input=password + "\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def plain_login(port: int, user: str, password: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for key, version, body in (
            (ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
            (ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": f"\x00{user}\x00{password}".encode()}),
        ):
            sock.sendall(protocol.encode_request(key, version, 1, "t", body))
            answer = protocol.decode_response(key, version, recv_frame(sock))
        return int(answer["error_code"])


def test_users_on_a_stopped_gateways_data_dir(tmp_path: Path) -> None:
    extra = ["--set", "kafka.sasl_mechanisms=PLAIN", "--set", "authorization.superusers=dave"]
    gateway = GatewayProcess(tmp_path / "gw", extra=extra)
    gateway.start()
    try:
        running = users_on_dir(gateway.data_dir, "add", "dave", password="dave's pw")
        assert running.returncode == 1 and "runs on" in running.stderr
    finally:
        assert gateway.stop() == 0
    added = users_on_dir(gateway.data_dir, "add", "dave", password="dave's pw")
    assert added.returncode == 0, added.stderr
    assert users_on_dir(gateway.data_dir, "list").stdout.split() == ["dave"]
    gateway.start()
    try:
        assert plain_login(gateway.kafka_port, "dave", "dave's pw") == ErrorCode.NONE
        assert plain_login(gateway.kafka_port, "dave", "nope") == (
            ErrorCode.SASL_AUTHENTICATION_FAILED
        )
    finally:
        assert gateway.stop() == 0
