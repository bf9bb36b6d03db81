"""`pulsar-gateway run --workers N` end to end (docs/cluster.md, "Workers on one host"):
one broker, N worker gateways in a cluster, AMQP on one shared port handed to each
vhost's owner, a killed worker started again by the supervisor, a clean stop."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from harness.waiting import wait_until
from harness.workers_process import WorkersProcess
from pulsar_gateway.gateway.backend.embedded import process_alive

pytestmark = pytest.mark.slow


def publish_and_get(port: int, vhost: str, body: bytes) -> bytes:
    """Declare, publish with a confirm, and get the message back, on one connection."""
    params = pika.ConnectionParameters(
        "127.0.0.1", port, vhost, pika.PlainCredentials("guest", "guest"), connection_attempts=5
    )
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", durable=True)
        channel.basic_publish("", "q", body, mandatory=True)

        def got() -> bytes | None:
            _, _, payload = channel.basic_get("q", auto_ack=True)
            return payload

        return wait_until(got, 30, 0.05, f"the message back on vhost {vhost}")
    finally:
        connection.close()


def metric_sum(workers: WorkersProcess, text: str) -> float:
    import urllib.request

    total = 0.0
    for index in range(workers.count):
        with urllib.request.urlopen(workers.metrics_url(index) + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(text):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def test_two_workers_one_amqp_port_and_a_killed_worker_comes_back(tmp_path: Path) -> None:
    workers = WorkersProcess(tmp_path / "gw", 2).start()
    try:
        views = [workers.cluster(i) for i in range(2)]
        for index, view in enumerate(views):
            assert view is not None and view["serving"]
            kafka = [m["kafka"] for m in view["members"]]
            assert kafka == [f"127.0.0.1:{workers.kafka_base + i}" for i in range(2)]
            assert [m["node_id"] for m in view["members"]] == [0, 1]
            assert [m["me"] for m in view["members"]] == [i == index for i in range(2)]
        # `pulsar-gateway cluster status` prints one member's view: both members
        status = subprocess.run(
            [sys.executable, "-m", "pulsar_gateway.cli", "cluster", "status", "--user", "guest"]
            + ["--gateway-health", workers.metrics_url(1)],
            input="guest\n",
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert status.returncode == 0, status.stderr
        assert "serving" in status.stdout
        for index in range(2):
            assert views[0]["members"][index]["member_id"] in status.stdout
            assert f"127.0.0.1:{workers.kafka_base + index}" in status.stdout
        # every vhost works through the one port, whichever worker accepted the connection
        for number in range(8):
            body = f"message {number}".encode()
            assert publish_and_get(workers.amqp_port, f"v{number}", body) == body
        # 8 vhosts over 2 owners, 16 connections spread by the kernel: some were handed over
        assert metric_sum(workers, 'gateway_amqp_handoffs_total{outcome="handed_off"}') >= 1
        assert metric_sum(workers, 'gateway_amqp_handoffs_total{outcome="failed"}') == 0

        killed = workers.kill_worker(1)
        wait_until(
            lambda: (workers.health(1) or {}).get("pid") not in (None, killed),
            60,
            0.2,
            "the supervisor to start worker 1 again",
        )
        workers.wait_all_serving(60)
        log = workers.log_path.read_text()
        assert f"worker 1 (pid {killed}) exited with -9" in log
        assert "worker 1 started (pid" in log and "start 2)" in log
        for number in range(4):
            body = f"after {number}".encode()
            assert publish_and_get(workers.amqp_port, f"v{number}", body) == body
        pids = [workers.worker_pid(i) for i in range(2)]
    finally:
        code = workers.stop()
    assert code == 0, workers.tail()
    for pid in pids:
        wait_until(lambda pid=pid: not process_alive(pid), 10, 0.1, f"worker {pid} to exit")
