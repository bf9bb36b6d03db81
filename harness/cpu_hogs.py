"""Processes that do nothing but burn a core, to run tests beside: a race that an idle
machine hides shows up when the gateway, its broker and the clients fight for the cores."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

BURN = "while True: pass"


@contextlib.contextmanager
def burning_cpus(count: int) -> Iterator[None]:
    """`count` busy-looping processes for as long as the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(max(count, 0))]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
