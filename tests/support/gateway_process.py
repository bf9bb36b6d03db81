"""Start a real `pulsar-gateway run` process on free loopback ports, for tests and benches."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GatewayProcess:
    """One gateway with its embedded broker, in a data directory of its own."""

    def __init__(
        self, data_dir: Path, extra: list[str] | None = None, broker_port: int | None = None
    ) -> None:
        self.data_dir = data_dir
        self.kafka_port = free_port()
        self.metrics_port = free_port()
        self.amqp_port = free_port()
        self.broker_port = broker_port or free_port()
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "gateway.log"

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self, timeout: float = 60) -> GatewayProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "pulsar_gateway.cli",
            "run",
            "--kafka-port",
            str(self.kafka_port),
            "--metrics-port",
            str(self.metrics_port),
            "--amqp-port",
            str(self.amqp_port),
            "--set",
            "amqp.enabled=true",
            "--data-dir",
            str(self.data_dir),
            "--set",
            f"embedded.port={self.broker_port}",
            *self.extra,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            command, stdout=log, stderr=log, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited {self.process.returncode}:\n{self.log_tail()}")
            health = self.health()
            if health and health.get("ok"):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"gateway not ready after {timeout}s:\n{self.log_tail()}")

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/health", timeout=1
            ) as response:
                return json.loads(response.read())
        except OSError:
            return None
        except ValueError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
            return response.read().decode()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def broker_pid(self) -> int:
        """The embedded pulsar-lite child of this gateway."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.process.pid), "-f", "pulsar-lite"],
            capture_output=True,
            text=True,
        )
        return int(out.stdout.split()[0])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def kill(self) -> None:
        """kill -9 the gateway, and its broker (which then also dies, as after a power cut)."""
        broker = None
        try:
            broker = self.broker_pid()
        except (ValueError, IndexError):
            pass
        self.process.kill()
        self.process.wait()
        if broker:
            try:
                os.kill(broker, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
