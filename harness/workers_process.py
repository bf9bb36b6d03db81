"""Start a real `pulsar-gateway run --workers N` (a supervisor, one embedded broker and N
worker gateways) on free loopback ports, for tests and benches."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from harness.gateway_process import GUEST, REPO, answers_for, free_port, free_ports, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol


def free_port_run(count: int, attempts: int = 200) -> int:
    """A port p with p, p+1, ... p+count-1 all free on loopback (the workers' ports)."""
    for _ in range(attempts):
        base = free_port()
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no run of {count} free ports")


def _distinct(count: int) -> tuple[int, int, int, int]:
    """The workers' Kafka and metrics port runs, the AMQP port and the broker's, no two the
    same: picked one after another, each free when picked, the AMQP port was once the first
    worker's Kafka port, and that worker could never start (cc55)."""
    for _ in range(100):
        kafka, metrics = free_port_run(count), free_port_run(count)
        amqp, broker = free_ports(2)
        runs = set(range(kafka, kafka + count)) | set(range(metrics, metrics + count))
        if len(runs) == 2 * count and not {amqp, broker} & runs:
            return kafka, metrics, amqp, broker
    raise RuntimeError("no distinct ports for the workers")


class WorkersProcess:
    """A supervisor with `count` workers in a data directory of its own."""

    def __init__(
        self,
        data_dir: Path,
        count: int,
        settings: dict[str, object] | None = None,
        workers_arg: str = "",
    ):
        """`workers_arg`: what `--workers` is given (default `count`; "auto" must resolve to
        `count` on this machine)."""
        self.data_dir = data_dir
        self.count = count
        self.workers_arg = workers_arg or str(count)
        self.kafka_base, self.metrics_base, self.amqp_port, self.broker_port = _distinct(count)
        self.settings = settings or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "supervisor.log"

    @property
    def bootstrap(self) -> str:
        """Every worker's Kafka listener: any of them is a bootstrap address."""
        return ",".join(f"127.0.0.1:{self.kafka_base + i}" for i in range(self.count))

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    def metrics_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.metrics_base + index}"

    def start(self, timeout: float = 120) -> WorkersProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "pulsar_gateway.cli",
            "run",
            "--workers",
            self.workers_arg,
            "--kafka-port",
            str(self.kafka_base),
            "--metrics-port",
            str(self.metrics_base),
            "--amqp-port",
            str(self.amqp_port),
            "--data-dir",
            str(self.data_dir),
            *set_flags({"embedded.port": self.broker_port, **self.settings}),
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            command, stdout=log, stderr=log, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        try:
            self.wait_all_serving(timeout)
        except BaseException:
            # a start that timed out is the caller's to report, not to clean up: the
            # supervisor and its broker would outlive the test otherwise
            self.stop()
            raise
        return self

    def health(self, index: int) -> dict | None:
        try:
            with urllib.request.urlopen(self.metrics_url(index) + "/health", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def cluster(self, index: int) -> dict | None:
        """The worker's `/cluster`, logged in as guest (from loopback: an administrator)."""
        request = urllib.request.Request(self.metrics_url(index) + "/cluster", headers=GUEST)
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def worker_pid(self, index: int) -> int:
        health = self.health(index)
        assert health is not None, f"worker {index} does not answer"
        return int(health["pid"])

    def wait_all_serving(self, timeout: float = 120) -> None:
        """Until every worker is healthy, serving, and sees all `count` members."""

        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"supervisor exited {self.process.returncode}:\n{self.tail()}")
            for index in range(self.count):
                health = self.health(index)
                if not health or not health.get("ok") or not answers_for(health, self.data_dir):
                    return False
                cluster = health.get("cluster") or {}
                if not cluster.get("serving") or len(cluster.get("members", [])) != self.count:
                    return False
            return True

        wait_until(ready, timeout, 0.2, lambda: f"all workers serving:\n{self.tail()}")

    def partition_count(self, index: int, topic: str) -> int:
        """Partitions of `topic` as worker `index`'s Metadata says (0: unknown there), asked
        without auto-creation."""
        body = {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False}
        with socket.create_connection(("127.0.0.1", self.kafka_base + index), timeout=10) as s:
            s.sendall(protocol.encode_request(3, 12, 1, "workers-test", body))
            answer = protocol.decode_response(3, 12, memoryview(recv_frame(s)))
        [found] = answer["topics"]
        return 0 if found["error_code"] else len(found["partitions"])

    def wait_topic(self, topic: str, partitions: int, timeout: float = 30) -> None:
        """Until every worker knows `topic` with `partitions` partitions: a member learns of
        a topic another one created by following the metadata log, and a client that asked
        it with auto-creation on before that would create the topic again (docs/cluster.md,
        "Limits")."""
        wait_until(
            lambda: all(self.partition_count(i, topic) == partitions for i in range(self.count)),
            timeout,
            0.05,
            f"every worker to know {topic} with {partitions} partitions",
        )

    def kill_worker(self, index: int) -> int:
        """kill -9 one worker; returns its pid."""
        pid = self.worker_pid(index)
        os.kill(pid, signal.SIGKILL)
        return pid

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 60) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
