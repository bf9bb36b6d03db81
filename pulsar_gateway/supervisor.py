"""`pulsar-gateway run --workers N`: one embedded broker, N worker gateways, restarted when
they die (docs/cluster.md, "Workers on one host").

One Python process serves on one core. The supervisor does no protocol work: it starts the
embedded broker once (none with an external Pulsar, `pulsar.service_url`), then N copies of
`pulsar-gateway run`, each a member of the cluster (`[cluster] enabled`) with its own Kafka
node id, Kafka port and metrics port (the configured ones plus the worker's index), and all
sharing the AMQP port (`amqp.reuse_port`: the kernel spreads connections over the workers,
and the accepting worker hands a connection to its vhost's owner).

Per-worker values reach the child through `PULSAR_GATEWAY_*` environment variables, never
its command line, so a secret given as `--set` stays out of `ps`. A worker that exits
unasked is started again after a back-off; more than `gateway.worker_restart_limit` exits
within `gateway.worker_restart_window_seconds` stop the whole supervisor (exit 1), as the
embedded broker's own restart window does: a worker that cannot stay up needs a person.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.config import ENV_PREFIX, Settings
from pulsar_gateway.gateway.waiting import result_within

log = logging.getLogger("gateway.supervisor")

# Back-off before a worker is started again: doubles per exit within the window, capped.
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 10.0
# How long a stopping worker gets to close its connections before SIGKILL.
STOP_GRACE_SECONDS = 20.0
POLL_SECONDS = 0.05
_PR_SET_PDEATHSIG = 1


def resolve_workers(value: int | str) -> int:
    """`gateway.workers`: a count, or `auto`: the cores this process may run on."""
    if value == "auto":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, os.cpu_count() or 1)
    return int(value)


def _shifted(port: int, index: int) -> int:
    """Worker `index`'s port from a configured one; 0 (any free port) stays 0."""
    return port + index if port else 0


def worker_settings(settings: Settings, index: int, service_url: str) -> dict[str, str]:
    """The settings worker `index` runs with on top of the supervisor's: dotted name ->
    value. Ports are the configured ones plus the index (kafka.port 9092: 9092, 9093, ...);
    the member id is `<cluster.member_id or host name>/<index>`, the node id the base
    (`cluster.node_id`, else `kafka.node_id`) plus the index."""
    kafka, cluster = settings.kafka, settings.cluster
    base_id = cluster.member_id or socket.gethostname()
    base_node = cluster.node_id if cluster.node_id >= 0 else kafka.node_id
    values = {
        "gateway.workers": "1",
        "gateway.data_dir": str(settings.gateway.data_dir / "workers" / str(index)),
        "kafka.port": str(_shifted(kafka.port, index)),
        "metrics.port": str(_shifted(settings.metrics.port, index)),
        "amqp.reuse_port": "true",
        "cluster.enabled": "true",
        "cluster.member_id": f"{base_id}/{index}",
        "cluster.node_id": str(base_node + index),
    }
    if service_url:  # the supervisor's embedded broker
        values["pulsar.service_url"] = service_url
        # its users store is signed with the broker directory's key (docs/security.md)
        key = settings.users_key_path
        if key is not None:
            values["gateway.users_key_file"] = str(key.absolute())
    if kafka.advertised_port:
        values["kafka.advertised_port"] = str(kafka.advertised_port + index)
    if kafka.tls_port > 0:
        values["kafka.tls_port"] = str(kafka.tls_port + index)
    if kafka.advertised_tls_port:
        values["kafka.advertised_tls_port"] = str(kafka.advertised_tls_port + index)
    if cluster.advertised_amqp_port:
        values["cluster.advertised_amqp_port"] = str(cluster.advertised_amqp_port + index)
    if settings.amqp.cluster_port:
        values["amqp.cluster_port"] = str(settings.amqp.cluster_port + index)
    return values


def environment_for(
    base: Mapping[str, str], overrides: Mapping[str, Any], config: Path | None
) -> dict[str, str]:
    """A child's environment: ours, the supervisor's own flags and then the worker's values
    as `PULSAR_GATEWAY_<SECTION>__<KEY>` (which the child reads below its flags, and it has
    none)."""
    env = dict(base)
    if config is not None:
        env[ENV_PREFIX + "CONFIG"] = str(config.absolute())
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        env[f"{ENV_PREFIX}{section.upper()}__{key.upper()}"] = str(value)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """A worker is SIGTERMed when the supervisor dies, even by SIGKILL (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Worker:
    index: int
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    exits: deque[float] = field(default_factory=deque)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None


class Supervisor:
    """Starts the broker and the workers, restarts workers that exit, stops them all."""

    def __init__(
        self,
        settings: Settings,
        count: int,
        overrides: Mapping[str, Any],
        config: Path | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.count = count
        self.overrides = dict(overrides)
        self.config = config
        self.broker: EmbeddedBroker | None = None
        self.workers: list[Worker] = []
        self.restart_limit = settings.gateway.worker_restart_limit
        self.restart_window = settings.gateway.worker_restart_window_seconds
        self._clock = clock
        self._fatal: asyncio.Future[str] | None = None

    def _on_fatal(self, reason: str) -> None:
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_result(reason)

    async def start(self) -> None:
        self._fatal = asyncio.get_running_loop().create_future()
        settings = self.settings
        service_url = ""
        if settings.embedded_mode:
            embedded = settings.embedded
            self.broker = EmbeddedBroker(
                settings.embedded_data_dir,
                port=embedded.port,
                start_timeout=embedded.start_timeout_seconds,
                restart_limit=embedded.restart_limit,
                restart_window=embedded.restart_window_seconds,
                log_level=embedded.log_level,
                on_fatal=self._on_fatal,
            )
            await self.broker.start()
            service_url = self.broker.service_url
        # the workers' shared secret for signed AMQP hand-offs, unless one is configured
        secret = settings.cluster.member_secret.get_secret_value() or secrets.token_hex(32)
        for index in range(self.count):
            values = {
                **self.overrides,
                **worker_settings(settings, index, service_url),
                "cluster.member_secret": secret,
            }
            worker = Worker(index, environment_for(os.environ, values, self.config))
            self.workers.append(worker)
            self._spawn(worker)

    def _spawn(self, worker: Worker) -> None:
        command = [sys.executable, "-m", "pulsar_gateway.cli", "run"]
        worker.process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            command, env=worker.env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        worker.starts += 1
        log.info(
            "worker %d started (pid %d, start %d)", worker.index, worker.process.pid, worker.starts
        )

    def backoff(self, recent_exits: int) -> float:
        """Seconds to wait before starting a worker that exited `recent_exits` times within
        the window."""
        return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, recent_exits - 1))

    def count_exit(self, worker: Worker) -> int:
        """Record an exit now; the exits of `worker` within the restart window."""
        now = self._clock()
        worker.exits.append(now)
        while worker.exits and worker.exits[0] <= now - self.restart_window:
            worker.exits.popleft()
        return len(worker.exits)

    async def run(self) -> int:
        """Watch the workers until stopped (0) or until one cannot stay up (1)."""
        assert self._fatal is not None
        restarts: dict[int, float] = {}  # worker index -> when to start it again
        while not self._fatal.done():
            now = self._clock()
            for worker in self.workers:
                process = worker.process
                if worker.index in restarts:
                    if now >= restarts[worker.index]:
                        del restarts[worker.index]
                        self._spawn(worker)
                    continue
                if process is None or process.poll() is None:
                    continue
                recent = self.count_exit(worker)
                log.error(
                    "worker %d (pid %d) exited with %s (%d exits within %gs)",
                    worker.index,
                    process.pid,
                    process.returncode,
                    recent,
                    self.restart_window,
                )
                if recent > self.restart_limit:
                    self._on_fatal(
                        f"worker {worker.index} exited {recent} times within "
                        f"{self.restart_window:g}s (gateway.worker_restart_limit)"
                    )
                    break
                delay = self.backoff(recent)
                log.info("worker %d starts again in %.1fs", worker.index, delay)
                restarts[worker.index] = now + delay
            with contextlib.suppress(TimeoutError):
                await result_within(self._fatal, POLL_SECONDS)
        reason = self._fatal.result()
        if reason.startswith("signal"):
            log.info("%s: stopping %d workers", reason, len(self.workers))
            return 0
        log.error("fatal: %s; stopping", reason)
        return 1

    def request_stop(self, signum: int) -> None:
        self._on_fatal(f"signal {signal.Signals(signum).name}")

    async def stop(self) -> None:
        """SIGTERM every worker (each closes its connections and leaves the cluster), SIGKILL
        the ones still there after the grace period, then stop the broker."""
        running = [w.process for w in self.workers if w.process and w.process.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = self._clock() + STOP_GRACE_SECONDS
        for process in running:
            while process.poll() is None and self._clock() < deadline:
                await asyncio.sleep(POLL_SECONDS)
            if process.poll() is None:
                log.warning("worker pid %d did not stop in time: killed", process.pid)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await asyncio.to_thread(process.wait)
            log.info("worker pid %d stopped (%s)", process.pid, process.returncode)
        if self.broker is not None:
            await self.broker.stop()


async def supervise(
    settings: Settings, count: int, overrides: Mapping[str, Any], config: Path | None
) -> int:
    """Run the supervisor until SIGINT/SIGTERM (exit 0) or a fatal failure (exit 1)."""
    supervisor = Supervisor(settings, count, overrides, config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, supervisor.request_stop, signum)
    log.info("supervisor pid %d: %d workers", os.getpid(), count)
    try:
        await supervisor.start()
    except Exception as exc:
        log.error("start-up failed: %s", exc)
        await supervisor.stop()
        return 1
    code = await supervisor.run()
    await supervisor.stop()
    return code
