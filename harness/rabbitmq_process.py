"""A throwaway RabbitMQ node (Debian's rabbitmq-server) for differential tests.

Started in the foreground as a child process with every directory (data, logs,
Erlang cookie via HOME) inside a temporary directory, on free loopback ports, so
it never touches a system RabbitMQ. docs/tools.md ("RabbitMQ") has the package and timings.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from harness.gateway_process import free_port

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")


def available() -> bool:
    return SERVER.exists() and CTL.exists()


def _epmd_running() -> bool:
    return subprocess.run(["pgrep", "-x", "epmd"], capture_output=True).returncode == 0


class RabbitMQProcess:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.node = f"gwdiff{self.port}@localhost"
        self.process: subprocess.Popen[bytes] | None = None
        self._started_epmd = False

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def _env(self) -> dict[str, str]:
        d = self.data_dir
        return {
            **os.environ,
            "HOME": str(d),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
            "RABBITMQ_PID_FILE": str(d / "rabbit.pid"),
        }

    def start(self, timeout: float = 90) -> RabbitMQProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "enabled_plugins").write_text("[].\n")
        self._started_epmd = not _epmd_running()
        log = open(self.data_dir / "server.out", "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen([str(SERVER)], env=self._env(), stdout=log, stderr=log)
        log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited: {self._tail()}")
            done = subprocess.run(
                [str(CTL), "-n", self.node, "await_startup", "--timeout", "5"],
                env=self._env(),
                capture_output=True,
            )
            if done.returncode == 0:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"rabbitmq not up after {timeout}s: {self._tail()}")

    def _tail(self) -> str:
        try:
            return (self.data_dir / "server.out").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is None:
            return
        subprocess.run(
            [str(CTL), "-n", self.node, "stop"], env=self._env(), capture_output=True, timeout=60
        )
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._started_epmd and shutil.which("epmd"):
            subprocess.run(["epmd", "-kill"], capture_output=True)
