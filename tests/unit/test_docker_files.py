"""The compose file is valid (checked offline by docker-compose) and the Dockerfile installs
the package the way the README does."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_compose_file_is_valid() -> None:
    result = subprocess.run(
        ["docker-compose", "-f", str(REPO / "docker/compose.yaml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "apachepulsar/pulsar" in result.stdout
    assert "PULSAR_GATEWAY_PULSAR__SERVICE_URL: pulsar://pulsar:6650" in result.stdout


def test_dockerfile_copies_what_the_package_needs() -> None:
    text = (REPO / "docker/Dockerfile").read_text()
    for folder in ("pulsar_gateway", "conf"):
        assert f"COPY {folder} ./{folder}" in text
    assert "pip install --no-cache-dir ." in text
