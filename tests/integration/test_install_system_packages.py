"""scripts/install-system-packages stops only the RabbitMQ node its own install started.

The script runs for real, with a PATH on which kcat and amqp-tools are missing (so it has
something to install) and on which apt-get, rabbitmqctl and epmd are stand-ins that record
their calls: the test must not install packages or touch the machine's Erlang daemons. The
RabbitMQ node a user already runs is a real one; the node Debian's postinst would start is
a process that looks like one to `pgrep` (the apt-get stand-in starts it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.rabbitmq_process import CTL, RabbitMQProcess, available

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install-system-packages"
TOOLS = ["bash", "env", "id", "pgrep", "tr", "seq", "sleep", "grep", "cat", "setsid"]

APT_GET = """#!/bin/bash
echo "apt-get $*" >> "$CALLS"
if [ "$1" = install ] && [ -n "${POSTINST_STARTS_NODE:-}" ]; then
    # what Debian's rabbitmq-server postinst does: start a node (here one that only looks
    # like one to pgrep), detached from the installer
    setsid bash -c 'exec -a beam.smp "$0" -c "import time; time.sleep(600)" -s rabbit boot' \\
        "$PYTHON" </dev/null >/dev/null 2>&1 &
    echo $! > "$POSTINST_STARTS_NODE"
fi
"""
RECORDER = """#!/bin/bash
echo "${0##*/} $*" >> "$CALLS"
"""


def _sandbox(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH has the script's tools but not kcat or amqp-publish."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the script"
        (bin_dir / tool).symlink_to(found)
    for name, text in (("apt-get", APT_GET), ("rabbitmqctl", RECORDER), ("epmd", RECORDER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    env = {"PATH": str(bin_dir), "CALLS": str(calls), "PYTHON": sys.executable}
    return env, calls


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(SCRIPT), "clients"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the script calls sudo when not root")
def test_a_running_rabbitmq_is_left_alone(tmp_path: Path) -> None:
    assert available(), "Debian's rabbitmq-server is needed (scripts/install-system-packages)"
    node = RabbitMQProcess(tmp_path / "rabbitmq").start()
    try:
        env, calls = _sandbox(tmp_path)
        result = _run(env)
        assert result.returncode == 0, result.stderr
        recorded = calls.read_text().splitlines()
        assert any(line.startswith("apt-get install") for line in recorded), recorded
        assert [line for line in recorded if not line.startswith("apt-get")] == []
        assert node.process is not None and node.process.poll() is None
        status = subprocess.run(
            [str(CTL), "-n", node.node, "status"], env=node._env(), capture_output=True
        )
        assert status.returncode == 0, "the user's node no longer answers"
    finally:
        node.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="the script calls sudo when not root")
def test_the_node_the_install_started_is_stopped(tmp_path: Path) -> None:
    env, calls = _sandbox(tmp_path)
    pid_file = tmp_path / "postinst-node.pid"
    env["POSTINST_STARTS_NODE"] = str(pid_file)
    result = _run(env)
    pid = int(pid_file.read_text())
    try:
        assert result.returncode == 0, result.stderr
        status = Path(f"/proc/{pid}/status")
        state = status.read_text().split("State:")[1].split()[0] if status.exists() else "gone"
        assert state in ("gone", "Z", "X"), f"the node the install started still runs ({state})"
        assert "stopping the RabbitMQ node the install started" in result.stdout
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
