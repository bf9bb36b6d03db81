"""Flame graphs of a server under benchmark load, with py-spy (a sampling profiler that
attaches to a running process, so the server runs unmodified and the benchmark's numbers
stay comparable with the peer's run).

    with flame_graph(pid, Path("reports/bench/amqp-publish.svg")):
        ...  # the load

py-spy comes with the `bench` extra (pyproject.toml); without it, or where the kernel
refuses ptrace, the block runs unprofiled and the reason is returned in `Flame.error`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SAMPLE_RATE = 100  # per second: enough for a 10 s phase, light on a shared 2-core machine


@dataclass
class Flame:
    """Where the SVG went (None when no profile was taken) and why not."""

    path: Path | None = None
    error: str | None = None


def py_spy() -> str | None:
    """The py-spy binary: beside this Python first (the venv), then on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def flame_graph(pid: int, path: Path, subprocesses: bool = False) -> Iterator[Flame]:
    """Profile `pid` while the block runs; the SVG is written when it ends."""
    flame = Flame()
    binary = py_spy()
    if binary is None:
        flame.error = "py-spy not installed (pip install -e '.[bench]')"
        yield flame
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    command = [binary, "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE)]
    command += ["--format", "flamegraph", "--output", str(path), "--nonblocking"]
    if subprocesses:
        command.append("--subprocesses")
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        yield flame
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # py-spy writes the SVG on SIGINT
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        if path.exists() and path.stat().st_size > 0:
            _make_well_formed(path)
            flame.path = path
        else:
            flame.error = f"py-spy wrote no profile: {(stderr or '').strip()[-300:]}"


_NOT_XML = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _make_well_formed(path: Path) -> None:
    """py-spy can name a frame it could not read with NUL octets, which XML forbids (the SVG
    then shows nowhere): such octets become "?"."""
    data = path.read_bytes()
    cleaned = _NOT_XML.sub(b"?", data)
    if cleaned != data:
        path.write_bytes(cleaned)
