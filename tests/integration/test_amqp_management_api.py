"""The RabbitMQ management API subset on the metrics port, against a real gateway and
pika: what monitoring tools (Flower, rabbitmqadmin list, exporters) read, logged in as
guest (from loopback) as RabbitMQ's tools do by default."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pika

from harness.gateway_process import GUEST, GatewayProcess
from harness.waiting import wait_until


def _get(gateway: GatewayProcess, path: str) -> object:
    url = f"http://127.0.0.1:{gateway.metrics_port}{path}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=GUEST), timeout=5) as response:
        assert response.headers["Content-Type"] == "application/json"
        return json.loads(response.read())


def test_queues_exchanges_bindings_overview_and_vhosts(gateway: GatewayProcess) -> None:
    name = f"mgmt-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(f"{name}.x", "topic", durable=True)
        ch.queue_declare(name, durable=True, arguments={"x-max-length": 10})
        ch.queue_bind(name, f"{name}.x", "a.#")
        for i in range(3):
            ch.basic_publish(f"{name}.x", "a.b", f"m{i}".encode())
        path = f"/api/queues/%2F/{urllib.parse.quote(name)}"
        wait_until(lambda: _get(gateway, path)["messages_ready"] == 3, 5, message="3 ready")
        queue = _get(gateway, path)
        assert isinstance(queue, dict)
        assert (queue["name"], queue["vhost"], queue["durable"], queue["consumers"]) == (
            name,
            "/",
            True,
            0,
        )
        assert queue["arguments"] == {"x-max-length": 10}
        method, _props, _body = ch.basic_get(name)
        assert method is not None
        queue = _get(gateway, path)
        assert isinstance(queue, dict)
        assert (queue["messages_ready"], queue["messages_unacknowledged"]) == (2, 1)
        assert name in [q["name"] for q in _get(gateway, "/api/queues")]  # type: ignore[union-attr]
        exchanges = _get(gateway, "/api/exchanges/%2F")
        assert isinstance(exchanges, list)
        assert [(x["type"], x["durable"]) for x in exchanges if x["name"] == f"{name}.x"] == [
            ("topic", True)
        ]
        bindings = _get(gateway, "/api/bindings/%2F")
        assert isinstance(bindings, list)
        assert {
            (b["source"], b["routing_key"], b["destination_type"])
            for b in bindings
            if b["destination"] == name
        } == {("", name, "queue"), (f"{name}.x", "a.#", "queue")}
        overview = _get(gateway, "/api/overview")
        assert isinstance(overview, dict)
        assert overview["object_totals"]["queues"] >= 1
        assert "rabbitmq_version" in overview
        assert "/" in [v["name"] for v in _get(gateway, "/api/vhosts")]  # type: ignore[union-attr]
        try:
            _get(gateway, "/api/queues/%2F/no-such-queue")
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as error:
            assert error.code == 404
        ch.queue_delete(name)
        ch.exchange_delete(f"{name}.x")
    finally:
        conn.close()


def test_open_connections_are_listed_with_rabbitmqs_fields(gateway: GatewayProcess) -> None:
    """`/api/connections` (what Flower and rabbitmqadmin list connections read): each open
    connection with its user, vhost, channels and both ends; one by its name; gone once
    closed."""
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        conn.channel()
        conn.channel()
        local_port = conn._impl._transport._sock.getsockname()[1]  # the client's own end

        def mine() -> dict | None:
            rows = _get(gateway, "/api/connections")
            assert isinstance(rows, list)
            return next((r for r in rows if r["peer_port"] == local_port), None)

        row = wait_until(mine, 5, message="the connection listed")
        assert (row["user"], row["vhost"], row["channels"], row["ssl"]) == ("guest", "/", 2, False)
        assert row["state"] == "running" and row["protocol"] == "AMQP 0-9-1"
        assert row["name"] == f"127.0.0.1:{local_port} -> 127.0.0.1:{row['port']}"
        assert row["client_properties"]["product"] == "Pika Python Client Library"
        one = _get(gateway, "/api/connections/" + urllib.parse.quote(row["name"], safe=""))
        assert one == row
    finally:
        conn.close()
    wait_until(lambda: mine() is None, 5, message="the closed connection gone")


RABBITMQADMIN = shutil.which("rabbitmqadmin")


def _admin(gateway: GatewayProcess, *args: str) -> str:
    """Run RabbitMQ's own `rabbitmqadmin` (shipped with rabbitmq-server) against the
    gateway's management port."""
    assert RABBITMQADMIN, (
        "rabbitmqadmin comes with rabbitmq-server (scripts/install-system-packages)"
    )
    command = [RABBITMQADMIN, "-H", "127.0.0.1", "-P", str(gateway.metrics_port)]
    done = subprocess.run(
        [*command, "-u", "guest", "-p", "guest", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_rabbitmqadmin_lists_and_exports_what_pika_declared(
    gateway: GatewayProcess, tmp_path
) -> None:
    """The tool people reach for first: `rabbitmqadmin list queues/exchanges/bindings/
    vhosts/connections`, `show overview` and `export` read the gateway as they read
    RabbitMQ."""
    name = f"adm-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare(f"{name}.x", "direct", durable=True)
        ch.queue_declare(name, durable=True)
        ch.queue_bind(name, f"{name}.x", "k")
        for i in range(4):
            ch.basic_publish(f"{name}.x", "k", f"m{i}".encode())

        def queue_row() -> dict | None:
            rows = json.loads(_admin(gateway, "-f", "raw_json", "list", "queues"))
            return next((r for r in rows if r["name"] == name and r["messages"] == 4), None)

        row = wait_until(queue_row, 10, message="rabbitmqadmin lists the queue with 4 messages")
        assert (row["vhost"], row["durable"], row["messages_ready"]) == ("/", True, 4)
        exchanges = json.loads(_admin(gateway, "-f", "raw_json", "list", "exchanges"))
        assert {"name": f"{name}.x", "type": "direct"}.items() <= next(
            e for e in exchanges if e["name"] == f"{name}.x"
        ).items()
        bindings = json.loads(_admin(gateway, "-f", "raw_json", "list", "bindings"))
        assert any(
            (b["source"], b["destination"], b["routing_key"]) == (f"{name}.x", name, "k")
            for b in bindings
        )
        vhosts = json.loads(_admin(gateway, "-f", "raw_json", "list", "vhosts"))
        assert "/" in [v["name"] for v in vhosts]
        connections = json.loads(_admin(gateway, "-f", "raw_json", "list", "connections"))
        assert any(c["user"] == "guest" and c["vhost"] == "/" for c in connections)
        overview = json.loads(_admin(gateway, "-f", "raw_json", "show", "overview"))
        assert overview[0]["rabbitmq_version"]
        exported = tmp_path / "definitions.json"
        assert "Exported definitions" in _admin(gateway, "export", str(exported))
        definitions = json.loads(exported.read_text())
        assert name in [q["name"] for q in definitions["queues"]]
        assert f"{name}.x" in [e["name"] for e in definitions["exchanges"]]
    finally:
        conn.close()


def _admin_fails(gateway: GatewayProcess, *args: str) -> str:
    command = [RABBITMQADMIN or "rabbitmqadmin", "-H", "127.0.0.1", "-P", str(gateway.metrics_port)]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0, done.stdout
    return done.stderr + done.stdout


def test_rabbitmqadmin_imports_definitions_all_or_nothing(
    gateway: GatewayProcess, tmp_path
) -> None:
    """`rabbitmqadmin import` (POST /api/definitions) declares the file's topology with
    the caller's login, as `pulsar-gateway amqp import-definitions` does: afterwards a
    publish to the imported exchange reaches the imported queue. A wrong password is
    refused (401) and a file the gateway cannot apply imports nothing (400 and why)."""
    name = f"imp-{uuid.uuid4().hex[:8]}"
    definitions = {
        "vhosts": [{"name": "/"}],
        "exchanges": [
            {"name": f"{name}.x", "vhost": "/", "type": "fanout", "durable": True,
             "auto_delete": False, "internal": False, "arguments": {}},
        ],
        "queues": [
            {"name": name, "vhost": "/", "durable": True, "auto_delete": False,
             "arguments": {"x-max-length": 5}},
        ],
        "bindings": [
            {"source": f"{name}.x", "vhost": "/", "destination": name,
             "destination_type": "queue", "routing_key": "", "arguments": {}},
        ],
    }  # fmt: skip
    good = tmp_path / "good.json"
    good.write_text(json.dumps(definitions))
    refused = _admin_fails(gateway, "-u", "guest", "-p", "wrong", "import", str(good))
    assert "Access refused" in refused
    assert _get_status(gateway, f"/api/queues/%2F/{name}") == 404
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**definitions, "policies": [{"name": "ha", "vhost": "/"}]}))
    why = _admin_fails(gateway, "-u", "guest", "-p", "guest", "import", str(bad))
    assert "policies are not applied" in why
    assert _get_status(gateway, f"/api/queues/%2F/{name}") == 404
    assert "Uploaded definitions" in _admin(gateway, "import", str(good))
    queue = _get(gateway, f"/api/queues/%2F/{name}")
    assert isinstance(queue, dict) and queue["arguments"] == {"x-max-length": 5}
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(f"{name}.x", "", b"through the imported binding")
        method, _, body = wait_until(
            lambda: (got := ch.basic_get(name, auto_ack=True))[0] and got, 5, message="delivered"
        )
        assert body == b"through the imported binding"
    finally:
        conn.close()


def _get_status(gateway: GatewayProcess, path: str) -> int:
    try:
        url = f"http://127.0.0.1:{gateway.metrics_port}{path}"
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=GUEST), timeout=5
        ) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_an_upload_is_bounded_before_its_body_is_read(gateway: GatewayProcess) -> None:
    """The management port is still a socket: a POST without a login is answered 401
    before its body is looked at; a logged-in one that claims a huge body 413 without
    reading it, one without a length 411."""
    import http.client

    def post(headers: dict[str, str], body: bytes = b"") -> int:
        conn = http.client.HTTPConnection("127.0.0.1", gateway.metrics_port, timeout=5)
        try:
            conn.putrequest("POST", "/api/definitions")
            for key, value in headers.items():
                conn.putheader(key, value)
            conn.endheaders(body)
            return conn.getresponse().status
        finally:
            conn.close()

    assert post({"Content-Length": str(10**9)}) == 401
    assert post({"Content-Length": "2"}, b"{}") == 401
    assert post({"Content-Length": "2", "Authorization": "Basic !!"}, b"{}") == 401
    assert post({"Content-Length": str(10**9), **GUEST}) == 413
    assert post(GUEST) == 411


def test_celery_flower_reads_queue_lengths(gateway: GatewayProcess) -> None:
    """Celery Flower's broker view asks the management API for the queues' lengths
    (flower.utils.broker.RabbitMQ, the code Flower runs for an amqp:// broker)."""
    import asyncio

    from flower.utils.broker import Broker

    name = f"flower-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, durable=True)
        for i in range(3):
            ch.basic_publish("", name, f"task {i}".encode())
        broker = Broker(
            f"amqp://guest:guest@127.0.0.1:{gateway.amqp_port}//",
            http_api=f"http://guest:guest@127.0.0.1:{gateway.metrics_port}/api/",
        )

        def lengths() -> list | None:
            rows = asyncio.run(broker.queues([name]))
            return rows if rows and rows[0]["messages"] == 3 else None

        (row,) = wait_until(lengths, 10, message="Flower sees 3 messages in the queue")
        assert (row["name"], row["messages_ready"], row["consumers"]) == (name, 3, 0)
    finally:
        conn.close()
