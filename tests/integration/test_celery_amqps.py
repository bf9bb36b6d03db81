"""Celery over amqps:// (docs/security.md): a real worker and client reach the gateway's
AMQPS listener with a verified certificate and a users-store user (py-amqp 5 logs in with
PLAIN), and tasks go round trip through the `rpc://` result backend."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.certificates import make_certificates
from harness.gateway_process import REPO, GatewayProcess, free_port, set_flags

PASSWORD = "celery over tls"
CLIENT = """
from harness.celery_app import add
for result in [add.delay(i, 1) for i in range(5)]:
    print(result.get(timeout=60))
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    where = tmp_path_factory.mktemp("celery-amqps")
    certs = make_certificates(where)
    port = free_port()
    settings = {
        "amqp.tls_cert_file": certs["cert"],
        "amqp.tls_key_file": certs["key"],
        "amqp.tls_port": port,
        "authorization.superusers": "celery",  # rights: test_authorization.py
    }
    process = GatewayProcess(where / "gw", extra=set_flags(settings)).start()
    process.amqps_port = port  # type: ignore[attr-defined]
    process.ca = certs["ca"]  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", "add", "celery"]
    command += ["--gateway-health", f"http://127.0.0.1:{process.metrics_port}"]
    subprocess.run(command, input=PASSWORD + "\n", text=True, check=True, cwd=REPO, timeout=60)
    yield process
    assert process.stop() == 0, process.log_tail()


def test_celery_task_round_trip_over_amqps(gateway: GatewayProcess, tmp_path: Path) -> None:
    port = gateway.amqps_port  # type: ignore[attr-defined]
    url = f"amqps://celery:{PASSWORD.replace(' ', '%20')}@localhost:{port}//"
    ca = str(gateway.ca)  # type: ignore[attr-defined]
    env = {**os.environ, "GATEWAY_AMQP_URL": url, "GATEWAY_AMQP_CA": ca}
    before = gateway.metric(
        "gateway_authentications_total", protocol="amqp", mechanism="PLAIN", outcome="success"
    )
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "harness.celery_app", "worker",
         "--pool=solo", "--concurrency=1", "--loglevel=INFO"],
        cwd=REPO, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        # the client in its own process too: the Celery app's TLS settings and connection
        # pool stay out of this one (another test module uses the same app in plaintext)
        client = subprocess.run(
            [sys.executable, "-c", CLIENT], cwd=REPO, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert client.returncode == 0, client.stderr[-3000:]
        assert client.stdout.split() == ["1", "2", "3", "4", "5"]
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
        print((tmp_path / "worker.log").read_text(errors="replace")[-3000:])
    # the worker and the client logged in over TLS as the store's user
    after = gateway.metric(
        "gateway_authentications_total", protocol="amqp", mechanism="PLAIN", outcome="success"
    )
    assert after - before >= 2, gateway.metrics()
    assert "celery over tls" not in gateway.log_path.read_text()
