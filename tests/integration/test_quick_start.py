"""The README's quick start, as a new user runs it: a fresh clone, `make run`, then the
kcat and amqp-tools commands the README prints, read from the README itself (only the
ports change, so the test does not collide with a gateway already on 9092)."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.gateway_process import REPO, free_ports

README = REPO / "README.md"


def quick_start_blocks() -> list[str]:
    """The shell blocks of the README's first section, in order."""
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def _health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("quick-start") / "pulsar-gateway"
    subprocess.run(["git", "clone", "-q", str(REPO), str(target)], check=True, timeout=120)
    return target


@pytest.fixture(scope="module")
def started(clone: Path) -> Iterator[dict[str, int]]:
    blocks = quick_start_blocks()
    assert blocks[0].strip() == "make run" and blocks[1].strip() == "make test"
    ports = dict(zip(("kafka", "amqp", "metrics"), free_ports(3), strict=True))
    args = " ".join(f"--{name}-port {port}" for name, port in ports.items())
    log = open(clone / "make-run.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        ["make", "run", f"ARGS={args}"],
        cwd=clone,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
    )
    try:
        deadline = time.monotonic() + 900  # a fresh venv installs everything first
        while not (_health(ports["metrics"]) or {}).get("ok"):
            tail = (clone / "make-run.log").read_text(errors="replace")[-3000:]
            assert process.poll() is None, f"make run exited {process.returncode}:\n{tail}"
            assert time.monotonic() < deadline, f"not up after 900 s:\n{tail}"
            time.sleep(0.5)
        yield ports
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        log.close()
    assert code == 0 or code == -signal.SIGTERM, (clone / "make-run.log").read_text()[-3000:]


def _run_block(block: str, ports: dict[str, int]) -> str:
    script = block.replace("127.0.0.1:9092", f"127.0.0.1:{ports['kafka']}").replace(
        "127.0.0.1:5672", f"127.0.0.1:{ports['amqp']}"
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_make_run_from_a_clean_clone_serves_the_readme_commands(
    clone: Path, started: dict[str, int]
) -> None:
    kafka_block, amqp_block = quick_start_blocks()[2:4]
    assert "kcat" in kafka_block and "amqp-publish" in amqp_block
    assert _run_block(kafka_block, started).splitlines() == ["k1=hello @0", "k2=world @1"]
    assert "hello" in _run_block(amqp_block, started)
    assert (clone / ".venv" / "bin" / "pulsar-gateway").exists()
    # the web console the quick start points at, logged in as guest from loopback
    assert "http://127.0.0.1:9404/" in README.read_text().split("## Quick start", 1)[1]
    login = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
    console = f"http://127.0.0.1:{started['metrics']}"
    for path, wanted in (("/", "console.js"), ("/console/api/topics", '"demo"')):
        request = urllib.request.Request(console + path, headers=login)
        with urllib.request.urlopen(request, timeout=10) as response:
            assert wanted in response.read().decode(), path
