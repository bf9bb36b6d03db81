"""The embedded `pulsar-lite` broker, run as a child process.

Why the care: pulsar-lite silently ignores its whole config file if one value is
invalid, reads `./pulsar-lite.toml` when `--config` is missing, and binds a
metrics port on 0.0.0.0:8080 by default (docs/backend.md, "Config file and absolute
paths", "Metrics listener"). So the file is always
written here, from validated values only, and always passed.

The child is started with `subprocess.Popen` from a worker thread, not with the event
loop's subprocess support: uvloop runs Python after-fork hooks in the child before
exec, and with pulsar-client's threads running, that child can deadlock before it
ever becomes pulsar-lite (seen when restarting a killed broker: the gateway froze).
CPython's own fork-exec runs no Python code in the child.

Paths are made absolute before anything else: the child runs with the data directory as
its working directory, so a relative `--config` was not found (the broker then ran on its
defaults, metrics on 0.0.0.0:8080) and a relative `--db-path` put the database one copy of
the path deeper. A database left there by such a start is moved into place once.

The broker's files hold users' messages: its directory is created 0700 (a directory left
readable by an older version is tightened once, files to 0600) and the child runs with
umask 077, so everything it creates is private to the gateway's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import stat
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from pulsar_gateway.gateway.data_dir_lock import BROKER_LOCK, DataDirLock
from pulsar_gateway.gateway.loopback_ports import free_ports
from pulsar_gateway.gateway.process_sockets import listening_ports
from pulsar_gateway.gateway.waiting import cancel_and_wait

log = logging.getLogger("gateway.embedded")

# The broker's log line for a connection it dropped on an I/O error (a client killed, or
# closed, with messages still unread in its socket: the kernel resets it). pulsar-lite then
# skips removing that connection's consumers, and a Shared subscription keeps dispatching to
# the dead one: docs/backend.md, "A reset connection leaves its consumers behind".
RESET_LINE = re.compile(rb"Connection error from (\S+): [^\n]*\(os error \d+\)")
# The broker's log lines when a port it was given is taken: the service port (it exits) or
# its metrics port (it runs on without its metrics).
PORT_TAKEN_LINE = re.compile(rb"Address already in use")
# Start-ups on ports picked afresh after one was taken (loopback_ports.py says how).
PORT_ATTEMPTS = 3
# At most this much of the broker's log is read per look (it grows with its own errors).
LOG_READ_LIMIT = 1 << 20


def broker_binary() -> Path:
    """Locate the broker binary shipped inside the pulsar-lite wheel."""
    import pulsar_lite

    path = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
    if not path.exists():
        raise FileNotFoundError(f"pulsar-lite binary not found at {path}")
    return path


def render_config(metrics_port: int | None = None) -> str:
    """The broker config: no partitions of its own (the gateway owns counts); its metrics
    (topic sizes, storage_sizes.py) on `metrics_port` of loopback, or none."""
    if metrics_port is None:
        return "default_partitions = 0\n\n[metrics]\nenabled = false\n"
    return (
        f'default_partitions = 0\n\n[metrics]\nenabled = true\naddr = "127.0.0.1:{metrics_port}"\n'
    )


# The broker's database is every file whose name starts with its --db-path's last part
# (db.rocksdb/, db.metadata.json).
DB_NAME = "db"
PRIVATE_UMASK = 0o077


def _ours(path: Path) -> bool:
    return path.lstat().st_uid == os.geteuid()


def make_private_dir(path: Path) -> None:
    """Create `path`, and any missing parent, 0700; tighten an existing one of ours.

    `Path.mkdir(parents=True)` gives parents the default mode, so each level is made here.
    A directory that was readable by others (made by an older version) has its whole tree
    tightened once: directories 0700, files 0600.
    """
    missing = []
    level = path
    while not level.exists():
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        os.chmod(directory, 0o700)
    if not missing and _ours(path) and stat.S_IMODE(path.stat().st_mode) & 0o077:
        _tighten_tree(path)


def _tighten_tree(root: Path) -> None:
    os.chmod(root, 0o700)
    for parent, dirs, files in os.walk(root):
        for name, mode in [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files]:
            path = Path(parent) / name
            with contextlib.suppress(OSError):
                if not path.is_symlink() and _ours(path):
                    os.chmod(path, mode)


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only, whatever the process umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(text)


def brokers_on(db_path: Path) -> list[int]:
    """Pids of processes started with this database path (a gateway's embedded broker),
    read from /proc: Linux only, elsewhere none are found."""
    wanted = str(db_path.absolute()).encode()
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if wanted in cmdline.read_bytes().split(b"\x00"):
                pids.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return pids


def stop_orphans(db_path: Path, timeout: float = 10.0) -> list[int]:
    """Stop brokers left running on this database by a gateway that was killed (the broker
    runs in its own session, so it outlives a kill -9 of its gateway). Two brokers on one
    database must never run at once. Called only with the directory's broker lock held, so
    a live gateway's broker is never taken for an orphan. Returns the pids stopped."""
    orphans = [pid for pid in brokers_on(db_path) if pid != os.getpid()]
    for pid in orphans:
        log.warning(
            "stopping pulsar-lite pid %d left running on %s by a killed gateway", pid, db_path
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in orphans:
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return orphans


def process_alive(pid: int) -> bool:
    """Running (a zombie, whose parent died, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def misplaced_database_dir(data_dir: Path) -> Path | None:
    """Where a start with a relative `data_dir` put the database: the broker resolved the
    relative --db-path against its working directory, the data directory itself."""
    if data_dir.is_absolute() or ".." in data_dir.parts or data_dir == Path("."):
        return None
    return data_dir.absolute() / data_dir


def move_misplaced_database(data_dir: Path, misplaced: Path) -> bool:
    """Move a database found at `misplaced` into `data_dir`, once; True if it moved.

    Only when `data_dir` holds no database of its own: two databases are left alone (with a
    warning) rather than one overwriting the other.
    """
    if not misplaced.is_dir():
        return False
    stale = sorted(misplaced.glob(DB_NAME + "*"))
    if not stale:
        return False
    if any(data_dir.glob(DB_NAME + "*")):
        log.warning(
            "a misplaced embedded broker database is in %s but %s has its own: "
            "left alone, move or delete one of them by hand",
            misplaced,
            data_dir,
        )
        return False
    for item in stale:
        os.replace(item, data_dir / item.name)
    log.warning(
        "moved the embedded broker database from %s to %s, where a relative data_dir "
        "had misplaced it",
        misplaced,
        data_dir,
    )
    level = misplaced
    while level != data_dir and data_dir in level.parents:
        try:
            level.rmdir()  # only what the old layout created and is now empty
        except OSError:
            break
        level = level.parent
    return True


def reset_peers(text: bytes) -> list[str]:
    """The client addresses of the connections the broker dropped on an I/O error, in the
    order its log names them."""
    return [match.group(1).decode(errors="replace") for match in RESET_LINE.finditer(text)]


class EmbeddedBroker:
    """Starts, watches and stops one pulsar-lite process on a loopback port.

    A crash is logged and the broker is restarted on the same port and data
    directory (data is durable). Crashes count within a sliding window of
    `restart_window` seconds (as systemd's StartLimitIntervalSec): a broker that crashes
    now and then over weeks keeps being restarted, and only more than `restart_limit`
    crashes inside one window call `on_fatal`, so that the gateway exits non-zero instead
    of restarting a broker that cannot stay up.

    With `heal_resets`, the broker is also restarted (planned, not counted as a crash) once
    its log says it dropped a connection on an I/O error: the consumers of that connection
    stay registered, holding their messages, and nothing but a restart removes them
    (docs/backend.md, "A reset connection leaves its consumers behind"). The restart waits
    for `heal_quiet` seconds without another such line (a killed process drops all its
    connections at once) and comes at most once per `heal_interval` seconds.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        start_timeout: float = 20.0,
        restart_limit: int = 5,
        log_level: str = "warn",
        on_fatal: Callable[[str], None] | None = None,
        restart_window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        heal_resets: bool = True,
        heal_quiet: float = 0.5,
        heal_interval: float = 10.0,
    ) -> None:
        # absolute: the child's working directory is the data directory (module docstring)
        self.data_dir = data_dir.absolute()
        self._misplaced = misplaced_database_dir(data_dir)
        self._own_port = not port  # picked here: picked again if taken at start-up
        self.port = port
        self.metrics_port = 0  # its Prometheus page: topic sizes for the console
        self._pick_ports()
        self.start_timeout = start_timeout
        self.restart_limit = restart_limit
        self.restart_window = restart_window
        self.log_level = log_level
        self.on_fatal = on_fatal
        self._clock = clock
        self._crash_times: deque[float] = deque()
        self.restarts = 0  # in the gateway's lifetime, for /health
        self.generation = 0  # counts successful starts
        self._process: subprocess.Popen[bytes] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False
        self.heal_resets = heal_resets
        self.heal_quiet = heal_quiet
        self.heal_interval = heal_interval
        self.heal_restarts = 0  # planned restarts after a reset connection, for /health
        self._log_position = 0  # how far the broker's log has been read for reset lines
        self._planned_restart = False
        self._log_watch: asyncio.Task[None] | None = None
        self._lock = DataDirLock(self.data_dir, BROKER_LOCK, "embedded broker")

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def start(self) -> None:
        # before anything here is touched: a second gateway on this directory stops now,
        # and a broker still running on the database is an orphan (gateway/data_dir_lock.py)
        self._lock.acquire()
        make_private_dir(self.data_dir)
        if self._misplaced is not None:
            move_misplaced_database(self.data_dir, self._misplaced)
        config_path = self.data_dir / "pulsar-lite.toml"
        await asyncio.to_thread(stop_orphans, self.data_dir / DB_NAME)
        await self._spawn_on_free_ports(config_path)
        self._watch = asyncio.create_task(self._watch_process(config_path))
        if self.heal_resets:
            self._log_watch = asyncio.create_task(self._watch_log())

    async def _spawn_on_free_ports(self, config_path: Path) -> None:
        """Spawn the broker; a port picked here and found taken by the time the broker binds
        it (loopback_ports.py) is picked again, the service port only if it was not given."""
        for attempt in range(PORT_ATTEMPTS):
            write_private(config_path, render_config(self.metrics_port))
            try:
                await self._spawn(config_path)
            except RuntimeError:
                if attempt == PORT_ATTEMPTS - 1 or not self._port_taken() or not self._own_port:
                    raise
            else:
                if not self._port_taken() or attempt == PORT_ATTEMPTS - 1:
                    return
                await self._terminate()  # running, but without its metrics page
            log.warning("a port picked for the embedded broker was taken; picking again")
            self._pick_ports()

    def _pick_ports(self) -> None:
        """The metrics port, and the service port unless it was given: two different ports
        picked together (one after another, each free when picked, they could be the same)."""
        first, second = free_ports(2)
        if self._own_port:
            self.port = first
        self.metrics_port = first if second == self.port else second

    def _port_taken(self) -> bool:
        """Whether the broker started last logged that a port it was given is taken."""
        with open(self.data_dir / "broker.log", "rb") as broker_log:
            broker_log.seek(self._log_position)
            return PORT_TAKEN_LINE.search(broker_log.read(LOG_READ_LIMIT)) is not None

    async def _spawn(self, config_path: Path) -> None:
        command = [
            str(broker_binary()),
            "--addr",
            f"127.0.0.1:{self.port}",
            "--db-path",
            str(self.data_dir / DB_NAME),
            "--config",
            str(config_path),
            "--log-level",
            self.log_level,
        ]

        # only what this process logs is looked at for reset connections
        with contextlib.suppress(FileNotFoundError):
            self._log_position = (self.data_dir / "broker.log").stat().st_size

        def spawn() -> subprocess.Popen[bytes]:
            log_fd = os.open(
                self.data_dir / "broker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
            )
            with os.fdopen(log_fd, "ab") as log_file:
                return subprocess.Popen(
                    command,
                    stdout=log_file,
                    stderr=log_file,
                    stdin=subprocess.DEVNULL,
                    cwd=str(self.data_dir),
                    start_new_session=True,
                    close_fds=True,
                    umask=PRIVATE_UMASK,  # set by CPython's fork-exec, no Python in the child
                )

        self._process = await asyncio.to_thread(spawn)
        await self._wait_ready()
        self.generation += 1
        log.info("embedded pulsar-lite pid %s ready on %s", self._process.pid, self.service_url)

    async def _wait_ready(self) -> None:
        """Until the broker listens on its port: the broker process itself, where /proc
        says (process_sockets.py: another process may hold a port picked for it)."""
        assert self._process is not None
        deadline = asyncio.get_running_loop().time() + self.start_timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"pulsar-lite exited with {self._process.returncode} during start-up; "
                    f"see {self.data_dir / 'broker.log'}"
                )
            if await self._listening(self._process.pid):
                return
            if asyncio.get_running_loop().time() > deadline:
                await self._terminate()
                raise RuntimeError(
                    f"pulsar-lite not ready on port {self.port} after {self.start_timeout}s"
                )
            await asyncio.sleep(0.05)

    async def _listening(self, pid: int) -> bool:
        ports = await asyncio.to_thread(listening_ports, pid)
        if ports is not None:
            return self.port in ports
        try:  # no /proc: whoever answers on the port
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        return True

    async def _watch_process(self, config_path: Path) -> None:
        while not self._stopping:
            assert self._process is not None
            code = await _wait(self._process)
            if self._stopping:
                return
            if self._planned_restart:  # by _watch_log: not a crash
                self._planned_restart = False
                if not await self._respawn(config_path):
                    return
                continue
            self.restarts += 1
            recent = self._count_crash()
            log.error(
                "embedded pulsar-lite exited with %s (crash %d, %d within %gs)",
                code,
                self.restarts,
                recent,
                self.restart_window,
            )
            if recent > self.restart_limit:
                if self.on_fatal:
                    self.on_fatal(
                        f"embedded broker crashed {recent} times within {self.restart_window:g}s"
                    )
                return
            if not await self._respawn(config_path):
                return

    async def _respawn(self, config_path: Path) -> bool:
        """Start the broker again; a failure is reported to `on_fatal` (False)."""
        try:
            await self._spawn(config_path)
        except Exception as exc:  # noqa: BLE001 - reported, then fatal
            log.error("embedded pulsar-lite restart failed: %s", exc)
            if self.on_fatal:
                self.on_fatal(f"embedded broker restart failed: {exc}")
            return False
        return True

    async def _watch_log(self, poll: float = 0.1) -> None:
        """Restart the broker after it dropped a connection on an I/O error (class
        docstring): read its log as it grows, wait for the quiet and the interval."""
        last_reset: float | None = None  # the newest reset line not yet healed
        reset_generation = self.generation  # the broker process that logged it
        last_heal = -self.heal_interval
        while not self._stopping:
            await asyncio.sleep(poll)
            position = self._log_position
            consumed, peers = await asyncio.to_thread(self._read_log, position)
            if self._log_position != position:
                continue  # a new broker process started meanwhile: its log is read next
            self._log_position = position + consumed
            now = self._clock()
            if last_reset is not None and reset_generation != self.generation:
                last_reset = None  # that process is gone (a crash, a restart): so are they
            if peers:
                log.warning(
                    "embedded pulsar-lite dropped %s on an I/O error; their consumers stay"
                    " registered until it restarts",
                    ", ".join(peers),
                )
                last_reset = now
                reset_generation = self.generation
            if (
                last_reset is not None
                and now - last_reset >= self.heal_quiet
                and now - last_heal >= self.heal_interval
                and self._process is not None
                and self._process.poll() is None
            ):
                last_reset = None
                last_heal = now
                self.heal_restarts += 1
                log.warning(
                    "restarting embedded pulsar-lite (planned restart %d) to remove the"
                    " consumers of connections it dropped",
                    self.heal_restarts,
                )
                self._planned_restart = True
                await self._terminate()

    def _read_log(self, position: int) -> tuple[int, list[str]]:
        """The bytes of whole lines the broker logged from `position` on (at most
        LOG_READ_LIMIT) and the reset lines among them."""
        try:
            with open(self.data_dir / "broker.log", "rb") as log_file:
                log_file.seek(position)
                chunk = log_file.read(LOG_READ_LIMIT)
        except OSError:  # not there (yet), or unreadable: nothing to act on, look again
            return 0, []
        end = chunk.rfind(b"\n") + 1
        if end == 0 and len(chunk) == LOG_READ_LIMIT:
            end = len(chunk)  # one absurdly long line: skip it rather than stall on it
        return end, reset_peers(chunk[:end])

    def _count_crash(self) -> int:
        """Record a crash now; the number of crashes within the last `restart_window`."""
        now = self._clock()
        crashes = self._crash_times
        crashes.append(now)
        while crashes[0] <= now - self.restart_window:
            crashes.popleft()
        return len(crashes)

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
        await cancel_and_wait(self._log_watch)
        await cancel_and_wait(self._watch)
        await self._terminate()
        self._lock.release()
        log.info("embedded pulsar-lite stopped")


async def _wait(process: subprocess.Popen[bytes]) -> int:
    """The exit code, polled: a thread blocked in wait() would outlive a cancelled task."""
    while True:
        code = process.poll()
        if code is not None:
            return code
        await asyncio.sleep(0.05)
