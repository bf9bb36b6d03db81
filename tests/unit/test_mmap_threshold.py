"""gateway.malloc_mmap_threshold_bytes: big C heap blocks are mapped on their own, so a
burst of big buffers freed among smaller long-lived blocks goes back to the system
(gateway/memory.py, `set_mmap_threshold`). Run in a child process: the setting is the
whole process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

MIB = 1 << 20

# A 4 MiB block freed (glibc then raises its own threshold to 4 MiB), forty 1 MiB buffers
# each followed by a smaller block that stays, the buffers freed: what RSS gave back.
BURST = """
import sys
from pulsar_gateway.gateway.memory import resident_bytes, set_mmap_threshold
if sys.argv[1] == "set" and not set_mmap_threshold(512 * 1024):
    print(-1)  # not glibc: no mallopt
    sys.exit()
big = b"b" * (4 << 20)
del big
held, pins = [], []
for i in range(40):
    held.append(b"x" * (1 << 20))
    pins.append(b"p" * (200 << 10))  # kept: from the heap top, after each buffer
before = resident_bytes()
held.clear()
print(before - resident_bytes())
"""


def _given_back(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", BURST, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def test_big_buffers_freed_among_smaller_blocks_go_back_to_the_system() -> None:
    given_back = _given_back("set")
    if given_back == -1:
        pytest.skip("not glibc: no mallopt")
    assert given_back >= 30 * MIB, f"{given_back / MIB:.0f} MiB given back of 40"
