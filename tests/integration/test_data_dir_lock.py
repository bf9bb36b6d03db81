"""A second `pulsar-gateway run` on a live gateway's data directory (issue 33): it stops with
one line naming the holder and touches nothing; before, its start-up took the live
gateway's embedded broker for an orphan and stopped it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

from harness.gateway_process import REPO, GatewayProcess, free_ports
from pulsar_gateway.gateway.backend.embedded import DB_NAME, brokers_on


def _second_run(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    names = ("kafka.port", "metrics.port", "amqp.port", "embedded.port")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    flags = [arg for key, value in ports.items() for arg in ("--set", f"{key}={value}")]
    return subprocess.run(
        [sys.executable, "-m", "pulsar_gateway.cli", "run", "--data-dir", str(data_dir)]
        + flags
        + list(extra),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_a_second_gateway_on_a_live_data_dir_refuses_and_touches_nothing(
    tmp_path: Path,
) -> None:
    live = GatewayProcess(tmp_path / "data").start()
    try:
        assert live.process is not None
        database = live.data_dir / "pulsar" / DB_NAME
        broker_pids = brokers_on(database)
        assert len(broker_pids) == 1
        config = live.data_dir / "pulsar" / "pulsar-lite.toml"
        written = config.stat().st_mtime_ns
        for extra in ([], ["--workers", "2"]):
            second = _second_run(live.data_dir, *extra)
            assert second.returncode == 1, second.stderr
            assert second.stderr.splitlines() == [
                f"pulsar-gateway: another gateway (pid {live.process.pid}) runs on "
                f"{live.data_dir.absolute()}: it holds {live.data_dir.absolute()}/gateway.lock"
            ]
        # the live gateway's broker was left alone, nothing was rewritten
        assert brokers_on(database) == broker_pids
        assert config.stat().st_mtime_ns == written
        assert (live.data_dir / "gateway.lock").read_text().strip() == str(live.process.pid)
        health = live.health()
        assert health is not None and health["ok"] and health["broker_restarts"] == 0
        delivered: list[object] = []
        producer = Producer({"bootstrap.servers": live.bootstrap})
        producer.produce(
            "lock-check", b"still served", on_delivery=lambda e, m: delivered.append(e)
        )
        producer.flush(30)
        assert delivered == [None]
    finally:
        assert live.stop() == 0
