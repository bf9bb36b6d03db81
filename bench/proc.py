"""What a server process costs, read from /proc: CPU time and resident memory.

Shared by the benchmarks so that every CPU-per-message and RSS number is taken the same way
(user plus system time of the server's processes, e.g. the gateway and its pulsar-lite).
"""

from __future__ import annotations

import os
from pathlib import Path


def rss_kib(pid: int) -> int:
    """Resident memory of one process, in KiB (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of these processes so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def cpu_wait_seconds(pids: list[int]) -> float:
    """How long these processes' threads have been ready to run but waiting for a core
    (the scheduler's run-queue delay, /proc/<pid>/task/<tid>/schedstat's second field).
    Beside CPU time it tells a server that was idle (waiting for its peers) from one that
    had work but no core: on a shared machine the second is the other processes' doing."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the thread ended
    return total / 1e9
