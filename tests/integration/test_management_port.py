"""The management port asks who calls (issue 33): `/health` and `/metrics` answer anyone,
`/api/` and `/cluster` want HTTP Basic credentials of the gateway's users, checked against
the caller's own address for guest, and a user sees what its rights show on AMQP. Before,
`curl -u guest:guest -X POST -d @defs http://host:9404/api/definitions` from another host
created queues in any vhost (the import logged in over AMQP from the gateway's loopback),
and reads needed no login at all."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pika
import pytest

from harness.addresses import outside_address
from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.waiting import wait_until

PASSWORD = "management port pw"
TEAM_VHOST = "team-a"


def users(gateway: GatewayProcess, *args: str, password: str = "") -> None:
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", *args]
    command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    done = subprocess.run(
        command, input=password + "\n", capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {
        "kafka.sasl_mechanisms": "SCRAM-SHA-256",
        "metrics.host": "0.0.0.0",  # reached from another address in these tests
        "authorization.superusers": "root",
    }
    process = GatewayProcess(tmp_path_factory.mktemp("management"), extra=set_flags(settings))
    process.start()
    for name in ("alice", "root"):
        users(process, "add", name, password=PASSWORD)
    users(process, "grant", "alice", "--namespace", f"public/{TEAM_VHOST}", "-o", "all")
    yield process
    assert process.stop() == 0, process.log_tail()


def call(
    gateway: GatewayProcess,
    path: str,
    login: tuple[str, str] | None = None,
    method: str = "GET",
    body: bytes | None = None,
    source: str = "127.0.0.1",
) -> tuple[int, object, dict[str, str]]:
    """(status, JSON or text, headers) of one request, sent from `source` to the port."""
    conn = http.client.HTTPConnection(
        source, gateway.metrics_port, timeout=10, source_address=(source, 0)
    )
    headers = {"Content-Type": "application/json"}
    if login is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(login).encode()).decode()
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        kind = response.headers.get("Content-Type", "")
        payload = json.loads(raw) if kind == "application/json" and raw else raw.decode()
        return response.status, payload, dict(response.headers)
    finally:
        conn.close()


def _definitions(queue: str, vhost: str) -> bytes:
    return json.dumps(
        {
            "vhosts": [{"name": vhost}],
            "queues": [
                {
                    "name": queue,
                    "vhost": vhost,
                    "durable": True,
                    "auto_delete": False,
                    "arguments": {},
                },
            ],
        }  # fmt: skip
    ).encode()


def test_only_health_and_metrics_answer_without_a_login(gateway: GatewayProcess) -> None:
    assert call(gateway, "/health")[0] == 200
    assert call(gateway, "/metrics")[0] == 200
    for path in ("/api/overview", "/api/queues", "/api/connections", "/api/definitions"):
        status, _, headers = call(gateway, path)
        assert status == 401, path
        assert headers["WWW-Authenticate"] == 'Basic realm="pulsar-gateway"'
    assert call(gateway, "/cluster")[0] == 401
    body = _definitions("q-anonymous", "/")
    assert call(gateway, "/api/definitions", method="POST", body=body)[0] == 401
    assert call(gateway, "/api/overview", ("alice", "wrong"))[0] == 401
    assert call(gateway, "/api/overview", ("nobody", "wrong"))[0] == 401
    samples = [line for line in gateway.metrics().splitlines() if 'protocol="http"' in line]
    assert any('outcome="failure"' in line and not line.endswith(" 0.0") for line in samples)
    # metrics.host 0.0.0.0 without metrics.require_login: said once at start-up
    assert "metrics.host 0.0.0.0 is reachable beyond this machine" in gateway.log_tail()


def test_guest_is_loopback_only_by_the_callers_own_address(gateway: GatewayProcess) -> None:
    """The attack of issue 33: guest's upload from another address created a queue in the
    default vhost; now it is refused before anything is declared."""
    outside = outside_address()
    queue = f"q-{uuid.uuid4().hex[:8]}"
    upload = _definitions(queue, "/")
    guest = ("guest", "guest")
    status, _, _ = call(gateway, "/api/definitions", guest, "POST", upload, source=outside)
    assert status == 401
    assert call(gateway, "/api/overview", guest, source=outside)[0] == 401
    assert call(gateway, f"/api/queues/%2F/{queue}", guest)[0] == 404  # nothing declared
    # the same credentials from loopback: guest is the operator's account there
    assert call(gateway, "/api/overview", guest)[0] == 200
    assert call(gateway, "/api/definitions", guest, "POST", upload)[0] == 204
    assert call(gateway, f"/api/queues/%2F/{queue}", guest)[0] == 200
    # a users-store user logs in from anywhere
    assert call(gateway, "/api/overview", ("alice", PASSWORD), source=outside)[0] == 200


def test_a_user_sees_only_its_vhosts_and_its_connections(gateway: GatewayProcess) -> None:
    name = uuid.uuid4().hex[:8]
    default = pika.BlockingConnection(pika.URLParameters(gateway.amqp_url))
    team = pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            gateway.amqp_port,
            TEAM_VHOST,
            pika.PlainCredentials("alice", PASSWORD),
            client_properties={"connection_name": "alice's app", "token": "s3cr3t"},
        )
    )
    try:
        default.channel().queue_declare(f"root-{name}", durable=True)
        team.channel().queue_declare(f"team-{name}", durable=True)
        alice, root = ("alice", PASSWORD), ("root", PASSWORD)

        def queues(login: tuple[str, str]) -> set[str]:
            status, rows, _ = call(gateway, "/api/queues", login)
            assert status == 200 and isinstance(rows, list)
            return {row["name"] for row in rows if name in row["name"]}

        wait_until(lambda: queues(root) == {f"root-{name}", f"team-{name}"}, 10, "both listed")
        assert queues(alice) == {f"team-{name}"}
        status, vhosts, _ = call(gateway, "/api/vhosts", alice)
        assert [v["name"] for v in vhosts] == [TEAM_VHOST]  # type: ignore[union-attr]
        assert call(gateway, "/api/queues/%2F", alice)[0] == 404
        status, rows, _ = call(gateway, "/api/connections", alice)
        assert [(r["user"], r["client_properties"]) for r in rows] == [("alice", {})]  # type: ignore[union-attr]
        status, rows, _ = call(gateway, "/api/connections", root)
        mine = [r for r in rows if r["user"] == "alice"]  # type: ignore[union-attr]
        assert mine and mine[0]["client_properties"]["token"] == "s3cr3t"
        assert call(gateway, "/cluster", alice)[0] == 403
        assert call(gateway, "/cluster", root)[0] == 200
        # alice may not import into a vhost she has no rights on
        intruder = f"intruder-{name}"
        done = call(gateway, "/api/definitions", alice, "POST", _definitions(intruder, "/"))
        assert done[0] != 204
        assert call(gateway, f"/api/queues/%2F/{intruder}", root)[0] == 404
        # rabbitmqadmin, given alice's credentials, lists what she may see
        admin = shutil.which("rabbitmqadmin")
        assert admin, "rabbitmqadmin comes with rabbitmq-server (scripts/install-system-packages)"
        listed = subprocess.run(
            [admin, "-H", "127.0.0.1", "-P", str(gateway.metrics_port), "-u", "alice",
             "-p", PASSWORD, "-f", "raw_json", "list", "queues"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert {q["name"] for q in json.loads(listed.stdout) if name in q["name"]} == {
            f"team-{name}"
        }
    finally:
        default.close()
        team.close()
