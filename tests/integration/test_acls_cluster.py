"""ACLs on a cluster (docs/security.md, "Authorization"; docs/cluster.md): two gateways in
front of one broker share the users store, so a rule created through one member applies at
the next request of a connection open on the other, without a reconnect, ALLOW and DENY."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.gateway_process import GatewayProcess, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.shared_broker import SharedBroker
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from tests.integration.test_security import users

PASSWORD = "a long enough test password"
TOPIC, LITERAL, DESCRIBE, ALLOW, DENY = 2, 3, 8, 3, 2


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    broker = SharedBroker(tmp_path / "broker").start()
    started: list[GatewayProcess] = []
    try:
        for node in (1, 2):
            settings = {
                "pulsar.service_url": broker.service_url,
                "cluster.enabled": "true",
                "cluster.member_id": f"m{node}",
                "cluster.node_id": node,
                "kafka.sasl_mechanisms": "PLAIN",
                "authorization.superusers": "root",
            }
            member = GatewayProcess(tmp_path / f"g{node}", extra=set_flags(settings))
            started.append(member.start())
        yield started
    finally:
        for member in started:
            member.stop()
        broker.stop()


def request(sock: socket.socket, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(protocol.encode_request(api, version, 1, "t", body))
    return protocol.decode_response(api, version, recv_frame(sock))


def logged_in(member: GatewayProcess, user: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", member.kafka_port), timeout=10)
    assert not request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"]
    token = f"\x00{user}\x00{PASSWORD}".encode()
    if request(sock, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})["error_code"]:
        sock.close()
        raise ConnectionRefusedError(f"{user} not known (yet) to {member.kafka_port}")
    return sock


def described(sock: socket.socket, topic: str) -> int:
    """Metadata v12's error code for the topic."""
    body = {
        "topics": [{"name": topic, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return int(request(sock, ApiKey.METADATA, 12, body)["topics"][0]["error_code"])


def create_acl(sock: socket.socket, user: str, topic: str, permission: int) -> None:
    creation = {
        "resource_type": TOPIC,
        "resource_name": topic,
        "resource_pattern_type": LITERAL,
        "principal": f"User:{user}",
        "host": "*",
        "operation": DESCRIBE,
        "permission_type": permission,
    }
    answer = request(sock, ApiKey.CREATE_ACLS, 3, {"creations": [creation]})
    assert answer["results"][0]["error_code"] == ErrorCode.NONE


def test_a_rule_created_on_one_member_applies_on_the_other(
    members: list[GatewayProcess],
) -> None:
    first, second = members
    for user in ("root", "bob"):
        done = users(first, "add", user, password=PASSWORD)
        assert done.returncode == 0, done.stderr
    topic = f"c-{uuid.uuid4().hex[:8]}"
    with logged_in(first, "root") as root:
        body = {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        }
        created = request(root, ApiKey.CREATE_TOPICS, 7, body)
        assert created["topics"][0]["error_code"] == ErrorCode.NONE
        bob = wait_until(
            lambda: _try_login(second, "bob"), 30, message="the second member knows bob"
        )
        with bob:
            assert described(bob, topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            create_acl(root, "bob", topic, ALLOW)  # on the first member
            wait_until(
                lambda: described(bob, topic) == ErrorCode.NONE,
                30,
                message="the ALLOW written through the first member applies on the second",
            )
            create_acl(root, "bob", topic, DENY)
            wait_until(
                lambda: described(bob, topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                30,
                message="the DENY written through the first member applies on the second",
            )


def _try_login(member: GatewayProcess, user: str) -> socket.socket | None:
    try:
        return logged_in(member, user)
    except ConnectionRefusedError:
        return None
