"""The data directory's lock (gateway/data_dir_lock.py): one holder at a time, freed when its
holder dies however it dies, the pid of the holder named to the one refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.waiting import wait_until
from pulsar_gateway.gateway.data_dir_lock import DataDirBusy, DataDirLock

HOLD = """
import sys, time
from pathlib import Path
from pulsar_gateway.gateway.data_dir_lock import DataDirLock
DataDirLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_one_holder_at_a_time_and_the_refusal_names_it(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path / "data")
    first.acquire()
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700  # made private
    second = DataDirLock(tmp_path / "data")
    with pytest.raises(DataDirBusy) as refused:
        second.acquire()
    assert str(refused.value) == (
        f"another gateway (pid {os.getpid()}) runs on {tmp_path / 'data'}: "
        f"it holds {tmp_path / 'data' / 'gateway.lock'}"
    )
    first.release()
    second.acquire()
    assert second.held
    second.release()


def test_a_killed_holder_leaves_the_lock_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirBusy, match=f"pid {holder.pid}"):
            DataDirLock(tmp_path).acquire()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        lock = DataDirLock(tmp_path)
        wait_until(lambda: _takes(lock), 5, message="the lock free once its holder died")
    finally:
        holder.kill()
        holder.wait()


def _takes(lock: DataDirLock) -> bool:
    try:
        lock.acquire()
    except DataDirBusy:
        return False
    return True
