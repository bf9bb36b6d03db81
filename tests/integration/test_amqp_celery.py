"""A Celery worker runs tasks through the gateway: kombu/py-amqp as broker
transport (direct, fanout and pidbox exchanges, acks late) and the `rpc://`
result backend (an exclusive, auto-delete reply queue per client)."""

from __future__ import annotations

import os
import subprocess
import sys

from harness.gateway_process import REPO, GatewayProcess


def test_celery_worker_runs_tasks_through_gateway(gateway: GatewayProcess, tmp_path) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{gateway.amqp_port}//"
    env = {**os.environ, "GATEWAY_AMQP_URL": url}
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "harness.celery_app",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--loglevel=INFO",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        os.environ["GATEWAY_AMQP_URL"] = url
        from harness import celery_app

        celery_app.app.conf.broker_url = url
        results = [celery_app.add.delay(i, i) for i in range(20)]
        assert [r.get(timeout=60) for r in results] == [2 * i for i in range(20)]
        pong = celery_app.app.control.ping(timeout=2.0)
        assert pong and all(reply for reply in pong)
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
        print((tmp_path / "worker.log").read_text(errors="replace")[-3000:])
    assert gateway.process.poll() is None
