"""Which TCP ports a child process itself listens on, read from Linux's /proc.

A connection to a port proves only that *something* listens there: a port picked free
and taken by another process before the child binds it (loopback_ports.py) would pass
such a check while the child fails on "address already in use". Matching the listening
sockets' inodes (/proc/net/tcp*) with the child's open files (/proc/<pid>/fd) proves the
child owns the port.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
LISTEN_STATE = "0A"  # TCP_LISTEN in the tables' "st" column


def listening_ports(pid: int) -> set[int] | None:
    """The TCP ports `pid` listens on; None where /proc cannot tell (not Linux)."""
    if not Path(TCP_TABLES[0]).exists():
        return None
    inodes = set()
    with contextlib.suppress(OSError):  # the process is gone: it listens on nothing
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # closed while being read
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in TCP_TABLES:
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows, None)  # the header
            for row in rows:
                fields = row.split()
                if len(fields) > 9 and fields[3] == LISTEN_STATE and fields[9] in inodes:
                    ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports
