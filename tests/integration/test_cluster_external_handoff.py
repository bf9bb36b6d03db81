"""An AMQP client that logs in by its TLS certificate (EXTERNAL) on a member that does not
own its vhost: the connection is handed to the owner with its signed origin, and the login
works there (docs/cluster.md, "AMQP on one port"). Before, the certificate ended at the
accepting member and the owner refused the login."""

from __future__ import annotations

import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import pika

from harness.certificates import make_certificates_with_clients
from harness.gateway_process import (
    REPO,
    GatewayProcess,
    set_flags,
    wait_until_members_see_each_other,
)
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until
from pulsar_gateway.gateway.cluster.view import Member, owner_of, vhost_key

SECRET = "members-only-" + uuid.uuid4().hex


def _member(tmp: Path, url: str, node: int, certs: dict[str, Path]) -> GatewayProcess:
    settings = {
        "pulsar.service_url": url,
        "cluster.enabled": "true",
        "cluster.member_id": f"m{node}",
        "cluster.node_id": node,
        "cluster.heartbeat_seconds": 0.5,
        "cluster.lease_seconds": 3.0,
        "amqp.tls_cert_file": certs["cert"],
        "amqp.tls_key_file": certs["key"],
        "amqp.tls_ca_file": certs["ca"],
        "authorization.superusers": "frank",
    }
    return GatewayProcess(
        tmp / f"g{node}", extra=set_flags(settings), port_settings=("amqp.tls_port",)
    )


def test_an_external_login_is_handed_to_the_vhost_owner(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "certs").mkdir()
    certs = make_certificates_with_clients(tmp_path / "certs", "frank", "stranger")
    monkeypatch.setenv("PULSAR_GATEWAY_CLUSTER__MEMBER_SECRET", SECRET)  # both members
    broker = SharedBroker(tmp_path / "broker").start()
    members = [_member(tmp_path, broker.service_url, node, certs) for node in (1, 2)]
    try:
        for member in members:
            member.start()
        wait_until_members_see_each_other(members)
        command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "frank"]
        command += ["--gateway-health", f"http://127.0.0.1:{members[0].metrics_port}"]
        subprocess.run(command, input="unused pw\n", text=True, check=True, cwd=REPO, timeout=60)
        live = [
            Member(row["member_id"], row["node_id"], "", 0, "", 0, 0)
            for row in members[0].cluster()["members"]
        ]
        owner_id = owner_of(vhost_key("/"), live).member_id
        accepting = next(m for m, n in zip(members, ("m1", "m2"), strict=True) if n != owner_id)

        context = ssl.create_default_context(cafile=str(certs["ca"]))
        context.load_cert_chain(str(certs["frank.pem"]), str(certs["frank.key"]))
        params = pika.ConnectionParameters(
            host="127.0.0.1",
            port=accepting.ports["amqp.tls_port"],
            credentials=pika.credentials.ExternalCredentials(),
            ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
            connection_attempts=1,
        )

        def connect() -> pika.BlockingConnection | None:
            try:
                return pika.BlockingConnection(params)
            except (pika.exceptions.ProbableAccessDeniedError, pika.exceptions.AMQPError):
                return None

        connection = wait_until(connect, timeout=20, message="frank logged in via the owner")
        try:
            channel = connection.channel()
            queue = f"ext-{uuid.uuid4().hex[:8]}"
            channel.queue_declare(queue)
            channel.basic_publish("", queue, b"through the hand-off")
            body = wait_until(lambda: channel.basic_get(queue, auto_ack=True)[2], timeout=15)
            assert body == b"through the hand-off"
        finally:
            connection.close()
        assert "handing the connection" not in accepting.log_tail(400)
    finally:
        for member in members:
            member.stop()
        broker.stop()
