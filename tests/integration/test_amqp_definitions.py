"""RabbitMQ definitions, exported by a real RabbitMQ, imported into the gateway; then
messages flow through the imported topology. A bad file imports nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from harness.gateway_process import REPO, GatewayProcess
from harness.rabbitmq_process import CTL, RabbitMQProcess, available


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQProcess]:
    # the reference is part of the suite: missing, it fails (make test installs it)
    assert available(), "rabbitmq-server is not installed: run ./scripts/install-system-packages"
    node = RabbitMQProcess(tmp_path_factory.mktemp("rabbitmq-defs")).start()
    yield node
    node.stop()


def _url(base: str, vhost: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + ("%2F" if vhost == "/" else vhost)


def _build_topology(rabbitmq: RabbitMQProcess, p: str) -> None:
    """Exchanges of every type, queues with arguments, queue and exchange bindings."""
    subprocess.run(
        [str(CTL), "-n", rabbitmq.node, "add_vhost", f"{p}-shop"],
        env=rabbitmq._env(),
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [str(CTL), "-n", rabbitmq.node, "set_permissions", "-p", f"{p}-shop", "guest"]
        + [".*", ".*", ".*"],
        env=rabbitmq._env(),
        check=True,
        capture_output=True,
    )
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    ch = conn.channel()
    ch.exchange_declare(f"{p}.events", "topic", durable=True)
    ch.exchange_declare(f"{p}.dead", "fanout", durable=True)
    ch.exchange_declare(f"{p}.route", "direct", durable=True)
    ch.exchange_declare(f"{p}.match", "headers", durable=True)
    ch.queue_declare(
        f"{p}.orders",
        durable=True,
        arguments={
            "x-dead-letter-exchange": f"{p}.dead",
            "x-max-length": 1000,
            "x-message-ttl": 60000,
        },
    )
    ch.queue_declare(f"{p}.dlq", durable=True)
    ch.queue_declare(f"{p}.audit", durable=True)
    ch.queue_bind(f"{p}.orders", f"{p}.events", "order.*.created")
    ch.queue_bind(f"{p}.dlq", f"{p}.dead")
    ch.exchange_bind(f"{p}.route", f"{p}.events", "audit.#")  # exchange-to-exchange
    ch.queue_bind(f"{p}.audit", f"{p}.route", "audit.login")
    ch.queue_bind(f"{p}.audit", f"{p}.match", arguments={"x-match": "any", "kind": "audit"})
    conn.close()
    shop = pika.BlockingConnection(pika.URLParameters(_url(rabbitmq.url, f"{p}-shop")))
    sch = shop.channel()
    sch.queue_declare(f"{p}.carts", durable=True)
    shop.close()


def _export(rabbitmq: RabbitMQProcess, path: Path) -> dict:
    subprocess.run(
        [str(CTL), "-n", rabbitmq.node, "export_definitions", str(path)],
        env=rabbitmq._env(),
        check=True,
        capture_output=True,
    )
    return json.loads(path.read_text())


def _import(gateway: GatewayProcess, path: Path) -> subprocess.CompletedProcess[str]:
    base = f"amqp://guest:guest@127.0.0.1:{gateway.amqp_port}/"
    return subprocess.run(
        [sys.executable, "-m", "pulsar_gateway.cli", "amqp", "import-definitions", str(path)]
        + ["--url", base],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _get(ch, queue: str, wait: float = 5.0) -> bytes | None:
    deadline = time.time() + wait
    while time.time() < deadline:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            return body
        time.sleep(0.05)
    return None


def test_exported_definitions_work_on_the_gateway(rabbitmq, gateway, tmp_path) -> None:
    p = f"d{uuid.uuid4().hex[:6]}"
    _build_topology(rabbitmq, p)
    exported = _export(rabbitmq, tmp_path / "definitions.json")
    assert exported["users"] and exported["permissions"]  # skipped, not refused
    done = _import(gateway, tmp_path / "definitions.json")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "skipped" in done.stdout and "users" in done.stdout

    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(f"{p}.events", "order.eu.created", b"order-1")
    ch.basic_publish(f"{p}.events", "audit.login", b"login-1")  # via events -> route
    ch.basic_publish(f"{p}.match", "", b"audit-2", pika.BasicProperties(headers={"kind": "audit"}))
    assert _get(ch, f"{p}.orders") == b"order-1"
    assert _get(ch, f"{p}.audit") == b"login-1"
    assert _get(ch, f"{p}.audit") == b"audit-2"
    # the imported dead-letter argument works: a rejected order lands in the DLQ
    ch.basic_publish(f"{p}.events", "order.us.created", b"order-2")
    method = None
    deadline = time.time() + 5
    while method is None and time.time() < deadline:
        method, _props, _body = ch.basic_get(f"{p}.orders")
    assert method is not None
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert _get(ch, f"{p}.dlq") == b"order-2"
    # arguments came across: redeclaring with different ones is refused, as on RabbitMQ
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare(f"{p}.orders", durable=True, arguments={"x-max-length": 5})
    assert refused.value.reply_code == 406
    conn.close()
    shop = pika.BlockingConnection(pika.URLParameters(_url(gateway.amqp_url, f"{p}-shop")))
    shop.channel().queue_declare(f"{p}.carts", passive=True)
    shop.close()


def _exists(gateway: GatewayProcess, kind: str, name: str) -> bool:
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        if kind == "exchange":
            conn.channel().exchange_declare(name, passive=True)
        else:
            conn.channel().queue_declare(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()


def _definitions(p: str, **extra: object) -> dict:
    return {
        "rabbit_version": "3.10.8",
        "vhosts": [{"name": "/"}],
        "exchanges": [
            {
                "name": f"{p}.x",
                "vhost": "/",
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            },
        ],
        "queues": [
            {
                "name": f"{p}.q",
                "vhost": "/",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-max-length": 10},
            },
        ],
        "bindings": [
            {
                "source": f"{p}.x",
                "vhost": "/",
                "destination": f"{p}.q",
                "destination_type": "queue",
                "routing_key": "#",
                "arguments": {},
            },
        ],
        **extra,
    }


def test_a_bad_file_imports_nothing_and_lists_every_problem(gateway, tmp_path) -> None:
    p = f"b{uuid.uuid4().hex[:6]}"
    data = _definitions(p, policies=[{"name": "ha-all", "vhost": "/", "pattern": ".*"}])
    data["exchanges"].append(
        {
            "name": f"{p}.delayed",
            "vhost": "/",
            "type": "x-delayed-message",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
    )
    data["queues"].append(
        {
            "name": f"{p}.bad",
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-max-length": -1},
        }
    )
    data["bindings"].append(
        {
            "source": f"{p}.nowhere",
            "vhost": "/",
            "destination": f"{p}.q",
            "destination_type": "queue",
            "routing_key": "",
            "arguments": {},
        }
    )
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    done = _import(gateway, path)
    assert done.returncode == 1
    report = done.stderr
    for problem in ("ha-all", f"{p}.delayed", f"{p}.bad", f"{p}.nowhere"):
        assert problem in report, report
    assert not _exists(gateway, "exchange", f"{p}.x")  # the good entries were not imported
    assert not _exists(gateway, "queue", f"{p}.q")


def test_a_refusal_while_declaring_rolls_everything_back(gateway, tmp_path) -> None:
    """A queue that already exists on the gateway with other arguments passes the file
    check but is refused at declare time: what was already declared is removed."""
    p = f"r{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    conn.channel().queue_declare(f"{p}.q", durable=True, arguments={"x-max-length": 99})
    conn.close()
    path = tmp_path / "conflict.json"
    path.write_text(json.dumps(_definitions(p)))
    done = _import(gateway, path)
    assert done.returncode == 1 and "PRECONDITION_FAILED" in done.stderr, done.stderr
    assert not _exists(gateway, "exchange", f"{p}.x")  # declared, then rolled back
    assert _exists(gateway, "queue", f"{p}.q")  # it was there before: left alone
