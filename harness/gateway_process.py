"""Start a real `pulsar-gateway run` process on free loopback ports, for tests and benches."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.machine_load import load_per_core
from harness.waiting import wait_until
from pulsar_gateway.gateway.backend.embedded import process_alive
from pulsar_gateway.gateway.loopback_ports import free_port as free_port  # for tests, benches
from pulsar_gateway.gateway.loopback_ports import free_ports

REPO = Path(__file__).resolve().parents[1]
# HTTP Basic for the management port's /api/ and /cluster: guest, from loopback an
# administrator (docs/security.md, "The management port")
GUEST = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


def answers_for(health: dict, data_dir: Path) -> bool:
    """Whether a /health answer is from a gateway of `data_dir` (a worker's is under it).
    Ports are picked free, not reserved, so two tests running at once may pick the same
    one: the slower gateway then stops on "address already in use", but its test, asking
    /health on that port, was answered ok by the other test's gateway (and then found
    nothing on its Kafka port, cc46)."""
    answered = health.get("data_dir")
    if not isinstance(answered, str):
        return False
    ours = Path(os.path.realpath(REPO / data_dir))
    return Path(os.path.realpath(answered)).is_relative_to(ours)


def set_flags(settings: dict[str, object]) -> list[str]:
    """`--set key=value` flags for `pulsar-gateway run`, one pair per setting."""
    return [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]


class GatewayProcess:
    """One gateway with its embedded broker, in a data directory of its own."""

    def __init__(
        self,
        data_dir: Path,
        extra: list[str] | None = None,
        broker_port: int | None = None,
        port_settings: tuple[str, ...] = (),
    ) -> None:
        """`port_settings` names further settings that take a port (e.g. "kafka.tls_port"):
        the process picks each one free, and picks it again if start-up finds it taken, so
        the caller reads it from `ports` after `start`, never picks it itself."""
        self.data_dir = data_dir
        self.kafka_port, self.metrics_port, self.amqp_port, picked_broker, *others = free_ports(
            4 + len(port_settings)
        )
        self.broker_port = broker_port or picked_broker
        self._own_broker_port = broker_port is None
        self.extra = extra or []
        self.ports = dict(zip(port_settings, others, strict=True))
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "gateway.log"
        self.cwd = REPO  # where the process starts

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self, timeout: float = 60) -> GatewayProcess:
        """Start the gateway and wait until it is healthy. A port picked free may be taken
        by another test's process before the gateway binds it (tests run in parallel): the
        gateway then stops with "address already in use", and it is started again on ports
        picked afresh (a port the caller chose is kept).

        The wait stretches with the load per core (up to 4x): start-up is CPU work (imports,
        the Kafka codecs compiled, the metadata loaded), 40-48 s at load 20 on 2 cores."""
        timeout *= min(4.0, load_per_core())
        for attempt in range(3):
            written = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return self._start(timeout)
            except RuntimeError:
                taken = "address already in use" in self._log_since(written).lower()
                if not taken or attempt == 2:
                    raise
            picked = free_ports(4 + len(self.ports))
            self.kafka_port, self.metrics_port, self.amqp_port = picked[:3]
            self.ports = dict(zip(self.ports, picked[4:], strict=True))
            if self._own_broker_port:
                self.broker_port = picked[3]
        raise AssertionError("unreachable")

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _command(self) -> list[str]:
        """The `pulsar-gateway run` command line on the ports picked (a subclass may start
        the gateway otherwise: `cwd` and this, and still be started again on taken ports)."""
        return [
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
            *set_flags(dict(self.ports)),
        ]

    def _start(self, timeout: float) -> GatewayProcess:
        # the log's directory only: a gateway makes its data directory itself (0700)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = self._command()
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=log,
            cwd=self.cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited {self.process.returncode}:\n{self.log_tail()}")
            health = self.health()
            if health and health.get("ok") and answers_for(health, self.data_dir):
                return self
            time.sleep(0.1)
        # a gateway that never became ready is stopped (and its broker with it), or it
        # outlives the caller that gave up on it
        self.stop()
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

    def metric(self, sample: str, **labels: str) -> float:
        """One sample of `/metrics`, 0 when it is not there yet (a counter never incremented)."""
        for family in text_string_to_metric_families(self.metrics()):
            for found in family.samples:
                if found.name == sample and all(
                    found.labels.get(k) == v for k, v in labels.items()
                ):
                    return found.value
        return 0.0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def broker_log(self) -> str:
        """The embedded broker's log (at info level it names subscriptions, acks, consumers)."""
        try:
            return (self.data_dir / "pulsar" / "broker.log").read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_mirror(self, pulsar_topic: str, group: str, timeout: float = 30) -> None:
        """Until the group-offset mirror has acknowledged on `group`'s subscription of
        `pulsar_topic` and then let go of it (after kafka.group_mirror_idle_seconds), so
        that a Pulsar consumer can take the subscription. Needs embedded.log_level=info."""

        def released() -> bool:
            log = self.broker_log()
            acked = log.rfind(
                f"Message acknowledged for topic {pulsar_topic} subscription {group}:"
            )
            closed = re.compile(rf"Closed consumer \d+ \(subscription={re.escape(group)}\)")
            return acked >= 0 and closed.search(log, acked) is not None

        wait_until(
            released, timeout, 0.1, f"the mirror to move and release {group} on {pulsar_topic}"
        )

    def broker_pid(self) -> int:
        """The embedded pulsar-lite child of this gateway."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.process.pid), "-f", "pulsar-lite"],
            capture_output=True,
            text=True,
        )
        return int(out.stdout.split()[0])

    def kill_broker(self, timeout: float = 30) -> None:
        """kill -9 the embedded broker; return once the gateway has restarted it and the new
        one accepts connections."""
        restarts = (self.health() or {}).get("broker_restarts", 0)
        os.kill(self.broker_pid(), signal.SIGKILL)

        def restarted() -> bool:
            if (self.health() or {}).get("broker_restarts", 0) <= restarts:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.broker_port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(restarted, timeout, 0.1, "the gateway to restart its killed broker")

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
            wait_until(lambda: _gone(broker), 10, message=f"the killed broker {broker} to die")

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but runs nothing, as in a long GC pause
        or a frozen VM."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def cluster(self) -> dict:
        """This member's view of the cluster (/health)."""
        return (self.health() or {}).get("cluster", {})


def cluster_member(
    data_dir: Path,
    service_url: str,
    member_id: str,
    node_id: int,
    heartbeat_seconds: float = 0.5,
    lease_seconds: float = 3.0,
) -> GatewayProcess:
    """A gateway with a `[cluster]` config in front of an already running broker (one
    standing for a host of docs/cluster.md); start() it."""
    settings = {
        "pulsar.service_url": service_url,
        "cluster.enabled": "true",
        "cluster.member_id": member_id,
        "cluster.node_id": node_id,
        "cluster.heartbeat_seconds": heartbeat_seconds,
        "cluster.lease_seconds": lease_seconds,
        "gateway.log_level": "info",
    }
    return GatewayProcess(data_dir, extra=set_flags(settings))


def wait_until_members_see_each_other(members: list[GatewayProcess], timeout: float = 30) -> None:
    """Started cluster members have each seen every other one's heartbeat: before that, a
    member may still take itself for the owner of everything."""
    wait_until(
        lambda: all(len(m.cluster().get("members", [])) == len(members) for m in members),
        timeout,
        0.1,
        "the members to see each other",
    )


def _gone(pid: int) -> bool:
    """Exited, or a zombie (its parent, the gateway, is dead, and PID 1 may not reap it)."""
    return not process_alive(pid)
