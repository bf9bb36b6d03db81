"""Safe defaults on a real gateway process (docs/security.md, "Safe defaults"): a Kafka
listener on a non-loopback address without authentication refuses to start unless
`kafka.allow_anonymous` says so (then it warns); a wildcard listener advertises this
machine's name, never 0.0.0.0; `gateway.bootstrap_user` creates the first user from a
password file once, and never overwrites it."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.waiting import wait_until


def test_a_wildcard_listener_without_authentication_refuses_to_start(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, extra=set_flags({"kafka.host": "0.0.0.0"}))
    with pytest.raises(RuntimeError) as refused:
        gateway.start()
    message = str(refused.value)
    assert "kafka.allow_anonymous" in message and "non-loopback" in message
    assert gateway.health() is None  # nothing was served


def test_allow_anonymous_starts_warns_and_advertises_a_reachable_host(tmp_path: Path) -> None:
    flags = set_flags({"kafka.host": "0.0.0.0", "kafka.allow_anonymous": "true"})
    gateway = GatewayProcess(tmp_path, extra=flags).start()
    try:
        assert "serves clients that do not authenticate" in gateway.log_path.read_text()
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        brokers = admin.list_topics(timeout=10).brokers
        hosts = {broker.host for broker in brokers.values()}
        assert hosts == {socket.getfqdn()}, hosts
        assert "0.0.0.0" not in hosts
    finally:
        assert gateway.stop() == 0, gateway.log_tail()


def _delivers(gateway: GatewayProcess, password: str) -> bool:
    """Whether `admin` with `password` gets a record stored (a refused login times out)."""
    producer = Producer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "admin",
            "sasl.password": password,
            "message.timeout.ms": 5000,
        }
    )
    outcome: list[object] = []
    topic = f"boot-{uuid.uuid4().hex[:8]}"
    producer.produce(topic, b"x", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(15)
    # `is`, not ==: confluent-kafka's KafkaError compared with None raises
    return len(outcome) == 1 and outcome[0] is None


def test_bootstrap_user_is_created_once_and_never_overwritten(tmp_path: Path) -> None:
    secret = tmp_path / "admin-password"
    secret.write_text("first admin pw\n")
    settings = {
        "kafka.sasl_mechanisms": "SCRAM-SHA-256",
        "gateway.bootstrap_user": "admin",
        "gateway.bootstrap_password_file": secret,
    }
    gateway = GatewayProcess(tmp_path / "gw", extra=set_flags(settings)).start()
    try:
        assert "bootstrap user 'admin' created" in gateway.log_path.read_text()
        assert _delivers(gateway, "first admin pw")
        assert "first admin pw" not in gateway.log_path.read_text()
        # the administrator changes the password; the secret file still holds the first
        command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "passwd", "admin"]
        command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
        subprocess.run(command, input="changed pw\n", text=True, check=True, cwd=REPO, timeout=60)
        wait_until(lambda: _delivers(gateway, "changed pw"), timeout=30, message="new password")
    finally:
        assert gateway.stop() == 0, gateway.log_tail()
    gateway.start()  # same data directory: the store holds admin already
    try:
        assert _delivers(gateway, "changed pw")
        assert not _delivers(gateway, "first admin pw")
    finally:
        assert gateway.stop() == 0, gateway.log_tail()


def test_an_empty_bootstrap_password_stops_start_up(tmp_path: Path) -> None:
    secret = tmp_path / "admin-password"
    secret.write_text("\n")
    settings = {
        "kafka.sasl_mechanisms": "SCRAM-SHA-256",
        "gateway.bootstrap_user": "admin",
        "gateway.bootstrap_password_file": secret,
    }
    gateway = GatewayProcess(tmp_path / "gw", extra=set_flags(settings))
    with pytest.raises(RuntimeError, match="gateway.bootstrap_password_file"):
        gateway.start()
