"""pulsar-client's log lands in a file, not on the terminal or in a Python logger.

pulsar-client keeps the first logger a process gives it, so each case runs in a
fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.waiting import wait_until

FAIL_TO_CONNECT = """
import sys
from pathlib import Path
import pulsar
from pulsar_gateway.gateway.backend.client_logging import client_logger
path = Path(sys.argv[1]) if len(sys.argv) > 1 else None
client = pulsar.Client(
    "pulsar://127.0.0.1:1",
    logger=client_logger(path),
    operation_timeout_seconds=1,
    connection_timeout_ms=200,
)
try:
    client.create_producer("persistent://public/default/nowhere")
except pulsar.PulsarException:
    pass
client.close()
"""


def _run(args: list[str], tmpdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FAIL_TO_CONNECT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmpdir)},
        check=True,
    )


def _wait_for_text(path: Path) -> str:
    wait_until(
        lambda: path.exists() and "127.0.0.1:1" in path.read_text(),
        5,
        message=f"the connection failure in {path}",
    )
    return path.read_text()


def test_client_log_goes_to_the_given_file(tmp_path: Path) -> None:
    log = tmp_path / "data" / "pulsar-client.log"
    done = _run([str(log)], tmp_path)
    assert "127.0.0.1:1" in _wait_for_text(log)
    assert "127.0.0.1:1" not in done.stderr + done.stdout


def test_tools_without_a_data_dir_log_to_the_temp_dir(tmp_path: Path) -> None:
    done = _run([], tmp_path)
    assert "127.0.0.1:1" in _wait_for_text(tmp_path / "pulsar-gateway" / "pulsar-client.log")
    assert "127.0.0.1:1" not in done.stderr + done.stdout
