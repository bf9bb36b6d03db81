"""AMQP refusals of the authorizer, compared with RabbitMQ's own (docs/security.md).

The same user `bob` on both: no permission at all on vhost `authz-b`, read only on vhost
`authz-r` (RabbitMQ: configure `^$`, write `^$`, read `.*`; the gateway: `read` on the
namespace the vhost maps onto). Opening `authz-b`, declaring a queue and publishing on
`authz-r` must give the same reply codes and texts.

Needs Debian's `rabbitmq-server` package (scripts/install-system-packages).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from harness.gateway_process import GatewayProcess, set_flags
from harness.rabbitmq_process import CTL, RabbitMQProcess, available
from harness.waiting import wait_until
from tests.integration.test_security import users

PASSWORD = "a long enough test password"


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQProcess]:
    assert available(), "rabbitmq-server is not installed: run ./scripts/install-system-packages"
    node = RabbitMQProcess(tmp_path_factory.mktemp("rabbitmq-authz")).start()
    for args in (
        ["add_user", "bob", PASSWORD],
        ["add_vhost", "authz-b"],
        ["add_vhost", "authz-r"],
        ["set_permissions", "-p", "authz-r", "bob", "^$", "^$", ".*"],
    ):
        done = subprocess.run(
            [str(CTL), "-n", node.node, *args], env=node._env(), capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    yield node
    node.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path_factory.mktemp("authz-gateway"), extra=set_flags({"kafka.enabled": "false"})
    )
    process.start()
    assert users(process, "add", "bob", password=PASSWORD).returncode == 0
    granted = users(process, "grant", "bob", "--namespace", "public/authz-r", "-o", "read")
    assert granted.returncode == 0, granted.stderr
    yield process
    process.stop()


def connect(port: int, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", port, vhost, pika.PlainCredentials("bob", PASSWORD), connection_attempts=1
        )
    )


def transcript(port: int) -> list[object]:
    """What bob is told: opening authz-b, then declaring and publishing on authz-r."""
    seen: list[object] = []
    try:
        connect(port, "authz-b").close()
        seen.append("opened authz-b")
    except pika.exceptions.AMQPConnectionError as error:
        # pika reports a close during connection.open as ProbableAccessDeniedError, whose
        # text holds the reply code and text
        seen.append((type(error).__name__, str(error)))
    connection = connect(port, "authz-r")
    try:
        channel = connection.channel()
        try:
            channel.queue_declare("q")
            seen.append("declared")
        except pika.exceptions.ChannelClosedByBroker as closed:
            seen.append((closed.reply_code, closed.reply_text))
        channel = connection.channel()
        channel.confirm_delivery()
        try:
            channel.basic_publish("", "q", b"x")
            seen.append("published")
        except pika.exceptions.ChannelClosedByBroker as closed:
            seen.append((closed.reply_code, closed.reply_text))
        channel = connection.channel()
        try:
            channel.basic_publish("amq.direct", "q", b"x")
            channel.queue_declare("q", passive=True)
            seen.append("published")
        except pika.exceptions.ChannelClosedByBroker as closed:
            seen.append((closed.reply_code, closed.reply_text))
    finally:
        if connection.is_open:
            connection.close()
    return seen


def test_refusals_read_as_rabbitmqs(rabbitmq: RabbitMQProcess, guarded: GatewayProcess) -> None:
    expected = transcript(rabbitmq.port)
    assert "(530)" in str(expected[0]) and expected[1][0] == 403  # type: ignore[index]
    wait_until(
        lambda: transcript(guarded.amqp_port) == expected,
        timeout=30,
        message=lambda: f"gateway {transcript(guarded.amqp_port)} != RabbitMQ {expected}",
    )
