"""The embedded `pulsar-lite` broker, run as a child process.

Why the care: pulsar-lite silently ignores its whole config file if one value is
invalid, reads `./pulsar-lite.toml` when `--config` is missing, and binds a
metrics port on 0.0.0.0:8080 by default (BACKEND.md). So the file is always
written here, from validated values only, and always passed.

The child is started with `subprocess.Popen` from a worker thread, not with the event
loop's subprocess support: uvloop runs Python after-fork hooks in the child before
exec, and with pulsar-client's threads running, that child can deadlock before it
ever becomes pulsar-lite (seen when restarting a killed broker: the gateway froze).
CPython's own fork-exec runs no Python code in the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("gateway.embedded")


def broker_binary() -> Path:
    """Locate the broker binary shipped inside the pulsar-lite wheel."""
    import pulsar_lite

    path = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
    if not path.exists():
        raise FileNotFoundError(f"pulsar-lite binary not found at {path}")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def render_config() -> str:
    """The broker config: no partitions of its own (the gateway owns counts), no metrics port."""
    return "default_partitions = 0\n\n[metrics]\nenabled = false\n"


class EmbeddedBroker:
    """Starts, watches and stops one pulsar-lite process on a loopback port.

    A crash is logged and the broker is restarted on the same port and data
    directory (data is durable); after `restart_limit` crashes `on_fatal` is called
    so that the gateway exits non-zero instead of hanging.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        start_timeout: float = 20.0,
        restart_limit: int = 5,
        log_level: str = "warn",
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.restart_limit = restart_limit
        self.log_level = log_level
        self.on_fatal = on_fatal
        self.restarts = 0
        self.generation = 0  # counts successful starts
        self._process: subprocess.Popen[bytes] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.data_dir / "pulsar-lite.toml"
        config_path.write_text(render_config())
        await self._spawn(config_path)
        self._watch = asyncio.create_task(self._watch_process(config_path))

    async def _spawn(self, config_path: Path) -> None:
        command = [
            str(broker_binary()),
            "--addr",
            f"127.0.0.1:{self.port}",
            "--db-path",
            str(self.data_dir / "db"),
            "--config",
            str(config_path),
            "--log-level",
            self.log_level,
        ]

        def spawn() -> subprocess.Popen[bytes]:
            with open(self.data_dir / "broker.log", "ab") as log_file:
                return subprocess.Popen(
                    command,
                    stdout=log_file,
                    stderr=log_file,
                    stdin=subprocess.DEVNULL,
                    cwd=str(self.data_dir),
                    start_new_session=True,
                    close_fds=True,
                )

        self._process = await asyncio.to_thread(spawn)
        await self._wait_ready()
        self.generation += 1
        log.info("embedded pulsar-lite pid %s ready on %s", self._process.pid, self.service_url)

    async def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = asyncio.get_running_loop().time() + self.start_timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"pulsar-lite exited with {self._process.returncode} during start-up; "
                    f"see {self.data_dir / 'broker.log'}"
                )
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    await self._terminate()
                    raise RuntimeError(
                        f"pulsar-lite not ready on port {self.port} after {self.start_timeout}s"
                    ) from None
                await asyncio.sleep(0.05)

    async def _watch_process(self, config_path: Path) -> None:
        while not self._stopping:
            assert self._process is not None
            code = await _wait(self._process)
            if self._stopping:
                return
            self.restarts += 1
            log.error("embedded pulsar-lite exited with %s (crash %d)", code, self.restarts)
            if self.restarts > self.restart_limit:
                if self.on_fatal:
                    self.on_fatal(f"embedded broker crashed {self.restarts} times")
                return
            try:
                await self._spawn(config_path)
            except Exception as exc:  # noqa: BLE001 - reported, then fatal
                log.error("embedded pulsar-lite restart failed: %s", exc)
                if self.on_fatal:
                    self.on_fatal(f"embedded broker restart failed: {exc}")
                return

    async def _terminate(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(_wait(process), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await _wait(process)

    async def stop(self) -> None:
        self._stopping = True
        if self._watch:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await self._terminate()
        log.info("embedded pulsar-lite stopped")


async def _wait(process: subprocess.Popen[bytes]) -> int:
    """The exit code, polled: a thread blocked in wait() would outlive a cancelled task."""
    while True:
        code = process.poll()
        if code is not None:
            return code
        await asyncio.sleep(0.05)
