"""One process per data directory: an exclusive `flock` on a lock file inside it.

Two gateways on one data directory would run two embedded brokers on one database, and the
second one's start-up took the first one's broker for an orphan and stopped it
(backend/embedded.py, `stop_orphans`). So `pulsar-gateway run` takes `gateway.lock` in
`gateway.data_dir` before it touches anything there, and the embedded broker takes
`broker.lock` in its own directory before it writes its config or looks for orphans (which
also keeps `pulsar-gateway users --data-dir` off a running gateway's broker). A second
process finds the lock held and stops with one line naming the holder.

The kernel drops a `flock` when its holder dies, however it dies (kill -9 included), so a
lock file left behind never blocks a restart. The descriptor is not inherited by child
processes (Python opens it close-on-exec): the broker and the workers of
`run --workers N` (each with its own data directory, docs/cluster.md) hold nothing of
their parent's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

GATEWAY_LOCK = "gateway.lock"
BROKER_LOCK = "broker.lock"


class DataDirBusy(Exception):
    """Another live process holds the directory's lock; the message says who and where."""


class DataDirLock:
    """An exclusive lock on `directory/name`, held until `release` or the process ends."""

    def __init__(self, directory: Path, name: str = GATEWAY_LOCK, what: str = "gateway") -> None:
        self.directory = directory.absolute()
        self.path = self.directory / name
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise DataDirBusy. Creates the directory (0700) when missing;
        writes the holder's pid into the lock file only once the lock is ours."""
        if self._fd is not None:
            return
        _make_missing_dirs(self.directory)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise DataDirBusy(
                f"another {self.what} ({who}) runs on {self.directory}: it holds {self.path}"
            ) from None
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the descriptor drops the lock
        self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def _make_missing_dirs(path: Path) -> None:
    """Create `path` and its missing parents 0700; an existing directory is left as it is
    (its owner may be running on it)."""
    missing = []
    level = path
    while not level.exists():
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
